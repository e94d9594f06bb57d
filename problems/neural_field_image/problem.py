"""NeuralFieldImage: the neural-field-image problem on the Problem protocol of ``sopt run``."""

from __future__ import annotations

import pathlib
from typing import Any

import numpy as np

from sopt.config.registry import build
from sopt.data import generated_image, load_image, pixel_coordinates, psnr, save_image
from sopt.experiments.problem import Problem
from problems.neural_field_image.build import build_model
from problems.neural_field_image.config import NeuralFieldImageConfig
from problems.neural_field_image.plot import COMPARISON_FILE, plot_comparison, plot_curves
from sopt.train import BatchSampler, EarlyStopping, Evaluate, Trainer
from sopt.utils.validation import as_float32_array

RECONSTRUCTION_FILE, TARGET_FILE, CURVES_FILE = "reconstruction.png", "target.png", "curves.png"


class NeuralFieldImage(Problem):
    """Fit an RGB image with an encoding + network (a neural field).

    Inputs are pixel-centre coordinates in (0, 1)^2 (``sopt.data.pixel_coordinates``), targets the pixels' RGB;
    batches of ``batch_size`` pixels are drawn on the GPU. The PSNR of the whole image (prediction clipped to
    [0, 1]) is evaluated every ``eval_every`` steps and at the last one, and stops the run early once it reaches
    ``target_psnr``.

    ``image``: an (H, W, 3) float array in [0, 1] to fit instead of the config's (``fit_image`` passes it);
    otherwise ``config.image`` is loaded (downscaled to ``image_size``) or the test image generated.
    """

    schema = NeuralFieldImageConfig
    description = "an RGB image as a neural field (encoding + MLP), PSNR against the image"
    splits_batch = True   # its sampler is a BatchSampler: sopt run --nproc N splits each batch over N processes

    def __init__(self, config: NeuralFieldImageConfig, image: np.ndarray | None = None) -> None:
        super().__init__(config)
        if image is not None:
            image = as_float32_array(image, "NeuralFieldImage image")
            if image.ndim != 3 or image.shape[2] != 3 or min(image.shape[:2]) < 1:
                raise ValueError(f"NeuralFieldImage image must have shape (H, W, 3), got {image.shape}")
        elif config.image is not None:
            image = load_image(config.image, max_side=config.image_size)
        else:
            image = generated_image(config.image_size)
        self.image = image
        h, w, _ = image.shape
        self.target = image.reshape(-1, 3).astype(np.float32)
        self.sampler = BatchSampler(pixel_coordinates(h, w), self.target, config.batch_size, seed=config.seed)
        self.model = build_model(config)
        self.loss_fn = build("loss", config.loss)
        self.optimizer = build("optimizer", config.optimizer, self.model.parameters())
        self.scheduler = build("schedule", config.schedule, self.optimizer, config.steps)
        self.reconstruction: np.ndarray | None = None   # (H, W, 3) of the last evaluation
        self.final: dict[str, float] = {}

    def evaluate(self, trainer: Trainer | None = None) -> dict[str, float]:
        """``{"psnr": dB}`` of the whole image now (one forward of every pixel; waits for the GPU)."""
        h, w, _ = self.image.shape
        # the sampler's uploaded inputs are every pixel centre: the whole image in one batch
        pred = self.model.forward(self.sampler.inputs).to_numpy().reshape(h * w, -1)[:, :3]
        self.reconstruction = np.clip(pred, 0.0, 1.0).reshape(h, w, 3)
        return {"psnr": psnr(self.reconstruction.reshape(-1, 3), self.target)}

    def trainer_parts(self) -> dict[str, Any]:
        callbacks: list[Any] = [Evaluate(self.evaluate, every=self.config.eval_every)]
        if self.config.target_psnr is not None:
            callbacks.append(EarlyStopping("psnr", self.config.target_psnr, mode="max"))
        return {"model": self.model, "loss_fn": self.loss_fn, "sampler": self.sampler, "optimizer": self.optimizer,
                "scheduler": self.scheduler, "parameters": dict(self.model.named_parameters()),
                "callbacks": callbacks}

    def finish(self, run_dir: pathlib.Path, history: list[dict[str, Any]]) -> dict[str, float]:
        """Write ``reconstruction.png`` (the field now), ``target.png``, ``comparison.png`` (truth | prediction |
        error, the PSNR in the title) and ``curves.png`` (loss and PSNR over ``history``) into ``run_dir``; return
        ``{"psnr": dB now, "loss": the last logged batch loss}``."""
        run_dir = pathlib.Path(run_dir)
        final = self.evaluate()
        losses = [r["loss"] for r in history if isinstance(r.get("loss"), (int, float))]
        if losses:
            final["loss"] = float(losses[-1])
        save_image(run_dir / RECONSTRUCTION_FILE, self.reconstruction)
        save_image(run_dir / TARGET_FILE, self.image)
        plot_comparison(run_dir / COMPARISON_FILE, self.target.reshape(self.reconstruction.shape), self.reconstruction)
        plot_curves(history, run_dir / CURVES_FILE)
        self.final = final
        return final

    def summary(self) -> list[str]:
        return [f"final PSNR: {self.final['psnr']:.2f} dB"] if "psnr" in self.final else []
