"""NeuralSDF: the neural_sdf problem on the Problem protocol of ``sopt run``."""

from __future__ import annotations

import pathlib
from typing import Any

import numpy as np
import slangpy as spy

from sopt.utils import atomic_write
from sopt.runtime import device as dev
from sopt.config.registry import build
from sopt.data import save_image
from sopt.experiments.problem import Problem
from problems.neural_sdf.build import build_model
from problems.neural_sdf.config import NeuralSDFConfig
from problems.neural_sdf.default_mesh import DEFAULT_MESH
from problems.neural_sdf.mesh import missing_extra, read_mesh, to_unit_box
from problems.neural_sdf.metrics import (SurfaceSample, distance_error, grid_points, iou, marching_cubes,
                                              surface_agreement)
from problems.neural_sdf.plot import CURVES_FIGSIZE, plot_curves, plot_slices, slice_points
from problems.neural_sdf.render import SphereTracer
from problems.neural_sdf.sampler import SDFSampler
from problems.neural_sdf.truth import MeshTruth
from problems.training_curves import plot_training_curves
from sopt.train import EarlyStopping, Evaluate, Trainer
from sopt.train.progress import notice

MESH_FILE, RENDER_FILE, SLICES_FILE, CURVES_FILE = "mesh.ply", "render.png", "slices.png", "curves.png"
UNSIGNED_PANELS = (("loss", "training loss (batch)", True), ("distance_error", "mean |distance error| (grid)", True))


class NeuralSDF(Problem):
    """Fit a triangle mesh's signed distance with an encoding + network (a neural SDF).

    The mesh (``config.mesh`` or the packaged wavy torus) is scaled into the unit box (``margin`` on each side of its
    longest side); the model maps (x, y, z) in [0, 1]^3 to the signed distance in box units (negative inside). Its
    batches come from an :class:`SDFSampler` pool whose exact signed distances the GPU computed (MeshTruth). Every
    metrics step evaluates the field on the ``eval_resolution``^3 grid: ``iou`` of the interiors against the truth
    there, and, from the mesh marching cubes extracts, ``chamfer`` and ``normal_consistency`` against the input mesh
    (``chamfer_points`` on each); a field with no zero crossing yet gives the IoU only. With ``unsigned`` (an open
    mesh) the model fits the distance itself and each metrics step gives ``distance_error``, the mean |prediction -
    truth| on the grid: an unsigned distance has no inside (no IoU) and no zero crossing (no marching cubes).
    """

    schema = NeuralSDFConfig
    description = "a triangle mesh's signed distance as a hash-grid neural field, IoU and chamfer against the mesh"

    def __init__(self, config: NeuralSDFConfig) -> None:
        super().__init__(config)
        missing = missing_extra()
        if missing is not None:
            raise ValueError(missing)
        self.mesh = to_unit_box(read_mesh(config.mesh), config.margin)
        self.truth = MeshTruth(self.mesh.triangles, unsigned=config.unsigned)
        n_uniform = int(round(config.uniform_fraction * config.pool_size))
        n_surface = min(int(round(config.surface_fraction * config.pool_size)), config.pool_size - n_uniform)
        self.sampler = SDFSampler(self.truth, config.pool_size, config.batch_size, n_uniform, n_surface,
                                  config.near_sigma, config.resample_every, config.seed)
        self.model = build_model(config)
        self.loss_fn = build("loss", config.loss)
        self.optimizer = build("optimizer", config.optimizer, self.model.parameters())
        self.scheduler = build("schedule", config.schedule, self.optimizer, config.steps)
        r = config.eval_resolution
        grid = grid_points(r)
        self.grid = spy.Tensor.from_numpy(dev.get_device(), grid)
        notice(f"neural_sdf: ground truth of the {r}^3 evaluation grid: {self.truth.size(len(grid))}")
        self.grid_truth = self.truth.signed_distance(grid).sdf            # (R^3,)
        self.surface_truth = (None if config.unsigned else
                              SurfaceSample.of(self.mesh.trimesh(), config.chamfer_points, seed=config.seed))
        self.field: np.ndarray | None = None                              # (R, R, R) of the last evaluation
        self.final: dict[str, float] = {}

    def input_files(self) -> list[pathlib.Path]:
        """The mesh file this run reads (the packaged wavy torus without ``mesh``)."""
        return [pathlib.Path(self.config.mesh) if self.config.mesh is not None else DEFAULT_MESH]

    def predict(self, points: spy.Tensor) -> np.ndarray:
        """The model's signed distance at ``points`` ((N, 3) tensor) as an (N,) array (waits for the GPU)."""
        out = self.model.forward(points).to_numpy()
        return out.reshape(int(points.shape[0]), -1)[:, 0].astype(np.float64)

    def evaluate(self, trainer: Trainer | None = None) -> dict[str, float]:
        """``iou``, ``chamfer`` (box units) and ``normal_consistency`` of the field now, or ``distance_error`` (box
        units) of an unsigned one (see the class docstring)."""
        r = self.config.eval_resolution
        self.field = self.predict(self.grid).reshape(r, r, r)
        if self.config.unsigned:
            return {"distance_error": distance_error(self.field, self.grid_truth)}
        metrics = {"iou": iou(self.field.ravel(), self.grid_truth)}
        extracted = marching_cubes(self.field)
        if extracted is not None and len(extracted.faces) and extracted.area > 0.0 and self.surface_truth is not None:
            sample = SurfaceSample.of(extracted, self.config.chamfer_points, seed=self.config.seed + 1)
            metrics.update(surface_agreement(sample, self.surface_truth))
        return metrics

    def trainer_parts(self) -> dict[str, Any]:
        callbacks: list[Any] = [Evaluate(self.evaluate, every=self.config.log_every)]
        if self.config.target_iou is not None:
            callbacks.append(EarlyStopping("iou", self.config.target_iou, mode="max"))
        return {"model": self.model, "loss_fn": self.loss_fn, "sampler": self.sampler, "optimizer": self.optimizer,
                "scheduler": self.scheduler, "parameters": dict(self.model.named_parameters()),
                "callbacks": callbacks}

    def slices(self) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """(truth, prediction): the signed distance on the slices x, y, z = 0.5, each (S, S), S = image_size."""
        size = self.config.image_size
        truth, prediction = [], []
        for axis in range(3):
            points = slice_points(axis, size)
            truth.append(self.truth.signed_distance(points).sdf.astype(np.float64).reshape(size, size))
            tensor = spy.Tensor.from_numpy(dev.get_device(), points)
            prediction.append(self.predict(tensor).reshape(size, size))
        return truth, prediction

    def finish(self, run_dir: pathlib.Path, history: list[dict[str, Any]]) -> dict[str, float]:
        """Write ``mesh.ply`` (the marching-cubes mesh of the field, in the input file's coordinates; none while the
        field has no zero crossing), ``render.png`` (the field sphere-traced and shaded), ``slices.png`` (truth |
        prediction | error on three slices) and ``curves.png`` (loss and IoU) into ``run_dir``; return the final
        ``iou``, ``chamfer``, ``normal_consistency`` and ``loss`` (the last logged batch loss). An unsigned field
        writes ``slices.png`` and ``curves.png`` (loss and distance_error) only: it has no surface to extract or
        trace, and returns ``distance_error`` and ``loss``."""
        run_dir = pathlib.Path(run_dir)
        resolution, size = self.config.eval_resolution, self.config.image_size
        notice(f"neural_sdf: final evaluation: the field at the {resolution}^3 grid points" + (
            "" if self.config.unsigned else
            f", its marching cubes ({MESH_FILE}) and {self.config.chamfer_points} points on each surface"))
        final = self.evaluate()
        losses = [r["loss"] for r in history if isinstance(r.get("loss"), (int, float))]
        if losses:
            final["loss"] = float(losses[-1])
        slices = f"neural_sdf: {SLICES_FILE}: ground truth of 3 slices of {size} x {size}: " \
                 f"{self.truth.size(3 * size * size)}"
        if self.config.unsigned:
            notice(slices)
            plot_slices(run_dir / SLICES_FILE, *self.slices())
            plot_training_curves(run_dir / CURVES_FILE, history, UNSIGNED_PANELS, CURVES_FIGSIZE)
            self.final = final
            return final
        extracted = marching_cubes(self.field)
        if extracted is not None:
            extracted.vertices = (extracted.vertices - 0.5) / self.mesh.scale + self.mesh.centre
            atomic_write.write_bytes(run_dir / MESH_FILE, extracted.export(file_type="ply", encoding="binary"))
        tracer = SphereTracer(size, size)
        notice(f"neural_sdf: {RENDER_FILE}: {size} x {size} rays sphere-traced, up to {tracer.max_steps} network "
               "evaluations each")
        save_image(run_dir / RENDER_FILE, tracer.render(self.model))
        notice(slices)
        plot_slices(run_dir / SLICES_FILE, *self.slices())
        plot_curves(history, run_dir / CURVES_FILE)
        self.final = final
        return final

    def summary(self) -> list[str]:
        if "distance_error" in self.final:
            return [f"final mean |distance error|: {self.final['distance_error']:.4g} (box units, unsigned distance on "
                    f"the {self.config.eval_resolution}^3 grid)"]
        if "iou" not in self.final:
            return []
        line = f"final IoU: {self.final['iou']:.4f}"
        if "chamfer" in self.final:
            line += f", chamfer {self.final['chamfer']:.2e} (box units), normal consistency " \
                    f"{self.final['normal_consistency']:.4f}"
        return [line]
