"""NeuralRadiance: the neural-radiance problem on the Problem protocol of ``sopt run``."""

from __future__ import annotations

import pathlib
from typing import Any

import numpy as np

from sopt.config.registry import build
from sopt.data import psnr, save_image
from sopt.experiments.problem import Problem
from problems.neural_radiance import scene
from problems.neural_radiance.config import NeuralRadianceConfig
from problems.neural_radiance.field import RadianceField
from problems.neural_radiance.nerf_synthetic import input_files, load_split
from problems.neural_radiance.plot import CURVES_FILE, VIEWS_FILE, depth_map, plot_curves, plot_views
from problems.neural_radiance.rays import CameraRays, TrainingRays
from problems.neural_radiance.ssim import missing as ssim_missing, ssim
from problems.neural_radiance.views import Views
from sopt.autodiff.tape import Tape
from sopt.train import EarlyStopping, Evaluate, Trainer
from sopt.train.progress import notice

PREDICTION_FILE = "test_{:03d}.png"   # each held-out view as rendered at the end


def load_views(config: NeuralRadianceConfig) -> tuple[Views, Views]:
    """(training views, held-out views) of ``config``: the built-in scene rendered at ``image_size`` from
    ``train_views`` and ``test_views`` cameras (anti-aliased with ``supersample``), or the first frames of
    ``data``'s transforms_train.json and transforms_test.json, downscaled to ``image_size``."""
    background = config.background_rgb
    if config.data is None:
        n = config.supersample
        notice(f"neural_radiance: rendering the built-in scene: {config.train_views} training and "
               f"{config.test_views} held-out views of {config.image_size} x {config.image_size} pixels"
               + (f", {n} x {n} rays a pixel at edges" if n > 1 else ""))
        train_cams, test_cams = scene.builtin_cameras(config.train_views, config.test_views, config.image_size,
                                                      config.seed)
        train_images, train_depth = scene.render(train_cams, background, config.supersample)
        test_images, test_depth = scene.render(test_cams, background, config.supersample)
        return Views(train_images, train_cams, train_depth), Views(test_images, test_cams, test_depth)
    notice(f"neural_radiance: reading {config.data}: up to {config.train_views} training and {config.test_views} "
           f"held-out frames, at {config.image_size} pixels a side")
    return (load_split(config.data, "train", background, config.image_size, config.train_views),
            load_split(config.data, "test", background, config.image_size, config.test_views))


class NeuralRadiance(Problem):
    """Fit a radiance field to posed images (see :class:`NeuralRadianceConfig` and the README).

    Each step: ``rays_per_batch`` random pixels of the training views (each ray through a random point of its pixel
    with ``pixel_jitter``), their rays marched through the occupancy grid (updated every ``occupancy.update_every``
    steps first), the network at the samples, volume rendering, the loss against the pixels' colours, all recorded
    on the tape in one command buffer. Every metrics step renders the held-out views (a ray through each pixel's
    centre) for ``psnr`` (mean over views, dB) and ``ssim`` (mean over views).
    """

    schema = NeuralRadianceConfig
    description = "a radiance field from posed images (hash grid + MLP, volume rendering), PSNR/SSIM on held-out views"

    def __init__(self, config: NeuralRadianceConfig, views: tuple[Views, Views] | None = None) -> None:
        super().__init__(config)
        problem = ssim_missing()
        if problem is not None:
            raise ValueError(problem)
        self.train_views, self.test_views = views if views is not None else load_views(config)
        for v in self.test_views.images.shape[1:3]:
            if v < 11:
                raise ValueError(f"neural_radiance: held-out views of {self.test_views.images.shape[2]} x "
                                 f"{self.test_views.images.shape[1]} pixels; SSIM needs at least 11 x 11 (raise "
                                 "image_size)")
        self.field = RadianceField(config)
        self.model = self.field.model
        self.rays = TrainingRays(self.train_views, config.rays_per_batch, config.seed, config.pixel_jitter)
        self.test_rays = CameraRays(self.test_views.cameras)
        self.loss_fn = build("loss", config.loss)
        self.optimizer = build("optimizer", config.optimizer, self.model.parameters())
        self.scheduler = build("schedule", config.schedule, self.optimizer, config.steps)
        self.step = 0   # steps recorded so far (the occupancy grid and the evaluation follow it)
        self.predictions: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []   # (rgb, depth, opacity) per view
        self.final: dict[str, float] = {}

    def input_files(self) -> list[pathlib.Path]:
        """The NeRF-synthetic files this run reads: transforms_train.json, transforms_test.json and the PNG frame of
        each view loaded (none for the built-in scene)."""
        if self.config.data is None:
            return []
        return input_files(self.config.data, {"train": self.config.train_views, "test": self.config.test_views})

    def objective(self, tape: Tape, step: int) -> Any:
        """One training step's forward on ``tape``: occupancy update (when due), random rays, rendering, loss."""
        occupancy = self.field.occupancy
        if occupancy.due(step):
            occupancy.update(self.model, step, tape)
        elif occupancy.active(step):
            occupancy.ensure_mean(tape)
        rays, colours = self.rays.sample(step)
        rgb, _, _ = self.field.render_rays(rays, step, jitter=True)
        value = self.loss_fn(rgb, colours, tape.encoder)
        if not tape.is_seed(value):
            tape.seed_loss(value, rgb)
        self.step = step + 1
        return value

    def evaluate(self, trainer: Trainer | None = None) -> dict[str, float]:
        """``{"psnr": dB, "ssim": ...}``: means over the held-out views rendered now (waits for the GPU)."""
        step = trainer.step if trainer is not None else self.step
        self.step = step
        cameras = self.test_views.cameras
        notice(f"neural_radiance: evaluating {len(self.test_views)} held-out views at step {step} "
               f"({cameras.width} x {cameras.height} pixels each, up to {self.config.samples_per_ray} samples a ray)")
        self.predictions = [self.field.render_view(self.test_rays, i, step) for i in range(len(self.test_views))]
        truths = self.test_views.images
        psnrs = [psnr(p[0].reshape(-1, 3), t.reshape(-1, 3)) for p, t in zip(self.predictions, truths)]
        ssims = [ssim(p[0], t) for p, t in zip(self.predictions, truths)]
        return {"psnr": float(np.mean(psnrs)), "ssim": float(np.mean(ssims)),
                "occupied": self.field.occupancy.occupied_fraction(step)}

    def trainer_parts(self) -> dict[str, Any]:
        callbacks: list[Any] = [Evaluate(self.evaluate, every=None)]
        if self.config.target_psnr is not None:
            callbacks.append(EarlyStopping("psnr", self.config.target_psnr, mode="max"))
        parameters = dict(self.model.named_parameters())
        parameters["occupancy"] = self.field.occupancy.parameter
        return {"objective": self.objective, "optimizer": self.optimizer, "scheduler": self.scheduler,
                "parameters": parameters, "callbacks": callbacks}

    def finish(self, run_dir: pathlib.Path, history: list[dict[str, Any]]) -> dict[str, float]:
        """Write ``views.png`` (held-out truth | prediction | depth), ``test_NNN.png`` (each held-out view rendered)
        and ``curves.png`` into ``run_dir``; return ``{"psnr", "ssim", "loss": the last logged batch loss}``."""
        run_dir = pathlib.Path(run_dir)
        final = self.evaluate()
        losses = [r["loss"] for r in history if isinstance(r.get("loss"), (int, float))]
        if losses:
            final["loss"] = float(losses[-1])
        last = len(self.predictions) - 1
        notice(f"neural_radiance: writing {PREDICTION_FILE.format(0)}"
               + (f" to {PREDICTION_FILE.format(last)}" if last else "") + f", {VIEWS_FILE} and {CURVES_FILE}")
        for i, (rgb, _, _) in enumerate(self.predictions):
            save_image(run_dir / PREDICTION_FILE.format(i), rgb)
        plot_views(run_dir / VIEWS_FILE, list(self.test_views.images), [p[0] for p in self.predictions],
                   [depth_map(p[1], p[2]) for p in self.predictions])
        plot_curves(history, run_dir / CURVES_FILE)
        self.final = final
        return final

    def summary(self) -> list[str]:
        if "psnr" not in self.final:
            return []
        return [f"held-out PSNR: {self.final['psnr']:.2f} dB, SSIM: {self.final['ssim']:.4f}"]
