"""The neural_sdf config: a pydantic schema (:class:`NeuralSDFConfig`) in tiny-cuda-nn's layout.

Sections ``encoding``, ``network``, ``loss``, ``optimizer`` and ``schedule`` name their kind in ``otype`` and take any
component of that family in :mod:`sopt.config.registry`; the other keys are scalars. Besides each key's type and
bounds, the schema checks what only the keys together decide (the point shares of the pool, the widths
FullyFusedMLP takes, the hash table's size, the memory the sizes need) and that ``mesh`` names a mesh trimesh reads,
closed unless ``unsigned`` (an open surface has no inside: the sign of its distance is undefined), all before any
GPU work.
"""

from __future__ import annotations

import os
import pathlib
from typing import Any

from pydantic import Field, field_validator, model_validator

from sopt.config.registry import union
from sopt.config.schema import defaults
from sopt.experiments.problem import load_config as load_problem_config
from sopt.losses import L1Config
from sopt.nn import FullyFusedMLPConfig, HashGridConfig
from sopt.optim import AdamConfig
from sopt.optim.lr_scheduler import WarmupCosineConfig
from problems.limits import FLOAT, check_memory, refuse
from problems.neural_field_config import MAX_ELEMENTS, NeuralFieldConfig, deterministic_field
from sopt.utils.regular_file import file_problem

MAX_POINTS = 64 * 65535    # one dispatch of the truth and sampling kernels
IN_FEATURES, OUT_FEATURES = 3, 1   # (x, y, z) -> signed distance


class NeuralSDFConfig(NeuralFieldConfig, problem="neural_sdf"):
    """Fit the signed distance of a triangle mesh (scaled into the unit box) with a hash-grid network, trained on
    points drawn uniformly in the box, on the surface and near it, whose exact signed distance the GPU computes.
    Sized for Mesa's software Vulkan driver: the defaults take about a minute there (see the README)."""

    in_features, out_features = IN_FEATURES, OUT_FEATURES
    output_floats = 4   # the output counted padded to 4 floats

    steps: int = Field(300, ge=1, le=10_000_000, description="optimiser steps")
    seed: int = Field(0, ge=0, le=2**32 - 1, description="seed of the weights' initialisation, the points and the "
                                                         "batches")
    log_every: int = Field(50, ge=1, le=10_000_000, description="steps between metrics records, each with the "
                                                                "IoU, chamfer distance and normal consistency (each "
                                                                "waits for the GPU)")
    checkpoint_every: int = Field(200, ge=1, le=10_000_000, description="steps between checkpoints")
    mesh: str | None = Field(None, min_length=1, description="OBJ/PLY/STL/OFF file of the triangle mesh to fit (None: "
                                                             "the packaged wavy torus, data/wavy_torus.ply)")
    unsigned: bool = Field(False, description="fit the unsigned distance to the surface (no inside, no sign), as an "
                           "open mesh needs (one whose edges do not all border two triangles: a sheet, a surface "
                           "with holes); metrics: distance_error (mean |prediction - truth| on the eval grid) instead "
                           "of iou, chamfer and normal_consistency")
    margin: float = Field(0.1, ge=0.0, le=0.45, description="space between the mesh's bounding box and the unit box "
                                                            "on each side of its longest side (box units)")
    pool_size: int = Field(1 << 16, ge=64, le=MAX_POINTS, description="points with a known signed distance that "
                                                                      "batches are drawn from")
    resample_every: int = Field(0, ge=0, le=10_000_000, description="steps between new pools of points (0: one "
                                                                    "pool for the whole run)")
    uniform_fraction: float = Field(0.25, ge=0.0, le=1.0, description="share of the pool uniform in the box")
    surface_fraction: float = Field(0.125, ge=0.0, le=1.0, description="share of the pool on the surface (the "
                                                                       "rest is near it)")
    near_sigma: float = Field(0.02, gt=0.0, le=1.0, description="standard deviation of each coordinate of a near "
                                                                "point's offset from the surface (box units)")
    batch_size: int = Field(4096, ge=1, le=1 << 24, description="points per training step")
    encoding: union("encoding") = Field(  # type: ignore[valid-type]
        default_factory=lambda: HashGridConfig(n_levels=8, n_features_per_level=2, log2_hashmap_size=15,
                                               base_resolution=8, per_level_scale=1.5),
        description="input encoding of (x, y, z) in the unit box")
    network: union("network") = Field(  # type: ignore[valid-type]
        default_factory=lambda: FullyFusedMLPConfig(n_neurons=32, n_hidden_layers=2, activation="ReLU",
                                                    output_activation="None"),
        description="network from the encoding to the signed distance")
    loss: union("loss") = Field(default_factory=L1Config,  # type: ignore[valid-type]
                                description="loss between predicted and true signed distances")
    optimizer: union("optimizer") = Field(  # type: ignore[valid-type]
        default_factory=lambda: AdamConfig(learning_rate=1e-2, beta1=0.9, beta2=0.99, epsilon=1e-15),
        description="optimiser of the encoding's and network's parameters")
    schedule: union("schedule") = Field(  # type: ignore[valid-type]
        default_factory=lambda: WarmupCosineConfig(warmup_steps=20, final_lr_factor=0.05),
        description="learning-rate schedule over the steps")
    eval_resolution: int = Field(48, ge=8, le=512, description="grid vertices per side of the dense point set of "
                                                               "the IoU and of the marching cubes' grid")
    chamfer_points: int = Field(20000, ge=100, le=10_000_000, description="points drawn on each mesh for the chamfer "
                                                                          "distance and normal consistency")
    image_size: int = Field(160, ge=16, le=4096, description="side of the shaded picture and of each SDF slice "
                                                             "(pixels)")
    target_iou: float | None = Field(None, gt=0.0, le=1.0, description="stop once the IoU reaches this (None: run "
                                                                       "every step)")
    deterministic: bool = deterministic_field()

    @field_validator("mesh")
    @classmethod
    def _mesh_is_a_file(cls, value: str | None) -> str | None:
        if value is None:
            return None
        problem = file_problem(value)
        if problem is not None:
            raise ValueError(f"{problem}; expected an OBJ/PLY/STL/OFF file")
        # absolute, so the resolved config.toml still names the file when the run is resumed from elsewhere
        return str(pathlib.Path(value).resolve())

    def _mesh_errors(self) -> list[tuple[tuple[str, ...], Any, str]]:
        """The mesh file's problems (read_mesh's, or an open surface whose sign is undefined) as (key, value,
        message); none without trimesh (NeuralSDF refuses to start then, saying what to install) or for the
        packaged closed mesh."""
        from problems.neural_sdf.mesh import missing_extra, open_edges, read_mesh
        if self.mesh is None or missing_extra() is not None:
            return []
        try:
            mesh = read_mesh(self.mesh)
        except ValueError as exc:
            return [(("mesh",), self.mesh, str(exc))]
        edges = open_edges(mesh) if not self.unsigned else 0
        if edges:
            return [(("mesh",), self.mesh, f"the mesh is not closed ({edges} edges border one triangle only), so "
                     "the sign of its distance (inside or outside) is undefined; set unsigned = true to fit the "
                     "unsigned distance, or close the mesh")]
        return []

    @model_validator(mode="after")
    def _sizes_the_kernels_take(self) -> "NeuralSDFConfig":
        errors: list[tuple[tuple[str, ...], Any, str]] = []   # (dotted key, value, message), see limits.refuse
        if self.uniform_fraction + self.surface_fraction > 1.0:
            errors.append((("surface_fraction",), self.surface_fraction,
                           f"uniform_fraction + surface_fraction = {self.uniform_fraction + self.surface_fraction:g} "
                           "exceeds 1 (the rest of the pool is near the surface)"))
        if self.unsigned and self.target_iou is not None:
            errors.append((("target_iou",), self.target_iou, "an unsigned distance has no inside, so no IoU is "
                           "measured; leave target_iou out (None) with unsigned = true"))
        errors += self._network_errors()
        widest = self._widest()
        for key, rows in (("batch_size", self.batch_size), ("eval_resolution", self.eval_resolution ** 3),
                          ("image_size", 6 * self.image_size ** 2)):
            if rows * widest > MAX_ELEMENTS:
                errors.append(((key,), getattr(self, key),
                               f"{rows} points x {widest} floats through the network exceed {MAX_ELEMENTS} (32-bit "
                               "tensor indices); lower it or the network's width"))
        for key, rows in (("eval_resolution", self.eval_resolution ** 3), ("image_size", 3 * self.image_size ** 2)):
            if rows > MAX_POINTS:
                errors.append(((key,), getattr(self, key), f"{rows} points need their exact signed distance, more "
                                                           f"than the {MAX_POINTS} one dispatch takes"))
        refuse(self, errors)
        refuse(self, self._mesh_errors())   # after the cheap checks: it reads and parses the file
        check_memory(self, "pool_size", self.memory_estimate(),
                     f"a pool of {self.pool_size}, {self.eval_resolution}^3 evaluation points, 6 x {self.image_size}^2 "
                     f"probes and {self.batch_size} per batch x {self._floats_per_sample()} floats, "
                     f"{self._parameter_count()} parameters x 6")
        return self

    def _floats_per_sample(self) -> int:
        """Floats one point takes through the model: coordinates, target, encoding, the network's layers
        (:meth:`_network_floats`), the (padded) output."""
        return IN_FEATURES + OUT_FEATURES + self._encoding_width() + self._network_floats() + \
            self.output_floats

    def memory_estimate(self) -> int:
        """Bytes this config needs: the pool (P points, 5 floats each), the evaluation grid (E = eval_resolution^3)
        and the picture's probes (6 image_size^2) through the network, and a batch (B) with its gradients, each
        point F floats (:meth:`_floats_per_sample`), the parameters with gradient, Adam's two moments and the double
        buffer (6 x W floats); on the host the grid's values in float64 four times: ``4 (5 P + (E + 6 I^2 + 2 B) F +
        6 W) + 32 E`` plus 64 MiB (the meshes and point sets of the chamfer distance)."""
        f, e, i = self._floats_per_sample(), self.eval_resolution ** 3, self.image_size ** 2
        return FLOAT * (5 * self.pool_size + (e + 6 * i + 2 * self.batch_size) * f + 6 * self._parameter_count()) + \
            32 * e + 64 * 2 ** 20


DEFAULT_CONFIG: dict[str, Any] = defaults(NeuralSDFConfig)
"""The default config as a plain dict (what ``sopt config neural_sdf`` prints)."""


def load_config(path: str | os.PathLike[str] | None = None, **overrides: Any) -> NeuralSDFConfig:
    """The defaults, with the TOML or JSON file at ``path`` and then ``overrides`` (top-level keys; None values
    skipped, sections given as dicts) merged over them, validated: ConfigError (one line per problem)."""
    return load_problem_config(NeuralSDFConfig, path, {k: v for k, v in overrides.items() if v is not None})
