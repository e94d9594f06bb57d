"""Fit an RGB image with an encoding + MLP and write the reconstruction, curves, metrics and a checkpoint."""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import time
from typing import Any

import numpy as np

from sopt.problems.neural_field_image.build import build_loss, build_model, build_optimizer, build_scheduler
from sopt.problems.neural_field_image.plot import plot_curves
from sopt.data import pixel_coordinates, psnr, save_image
from sopt.train import BatchSampler, Checkpoint, EarlyStopping, Evaluate, JSONLLogger, Trainer, TrainResult


@dataclasses.dataclass
class FitResult:
    """``psnr``: of the final reconstruction (dB, prediction clipped to [0, 1]); ``reconstruction``: (H, W, 3)."""

    psnr: float
    reconstruction: np.ndarray
    train: TrainResult
    seconds: float
    out_dir: pathlib.Path | None


def fit_image(image: np.ndarray, config: dict[str, Any], out_dir: str | os.PathLike[str] | None = None,
              progress: bool = True) -> FitResult:
    """Train the configured field on ``image`` ((H, W, 3) float in [0, 1]; ``config`` already checked).

    Inputs are pixel-centre coordinates in (0, 1)^2, targets the pixels' RGB; batches of
    ``config["batch_size"]`` pixels are drawn on the GPU. The PSNR of the whole image is evaluated every
    ``eval_every`` steps and at the end. With ``out_dir``: ``reconstruction.png``, ``target.png``,
    ``curves.png`` (loss and PSNR), ``metrics.jsonl``, ``checkpoint.npz`` and the ``config.json`` used.
    """
    h, w, _ = image.shape
    target = image.reshape(-1, 3).astype(np.float32)
    sampler = BatchSampler(pixel_coordinates(h, w), target, config["batch_size"], seed=config["seed"])
    model = build_model(config)
    optimizer = build_optimizer(config, model.parameters())
    scheduler = build_scheduler(config, optimizer)
    latest: dict[str, np.ndarray] = {}

    def evaluate(trainer: Trainer) -> dict[str, float]:
        # The whole image in one batch: the sampler's uploaded dataset inputs are all pixel centres.
        pred = model.forward(sampler.inputs).to_numpy().reshape(h * w, -1)[:, :3]
        latest["image"] = np.clip(pred, 0.0, 1.0).reshape(h, w, 3)
        return {"psnr": psnr(latest["image"].reshape(-1, 3), target)}

    callbacks: list[Any] = [Evaluate(evaluate, every=config["eval_every"])]
    if config["target_psnr"] is not None:
        callbacks.append(EarlyStopping("psnr", config["target_psnr"], mode="max"))
    out = pathlib.Path(out_dir) if out_dir is not None else None
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
        callbacks += [JSONLLogger(out / "metrics.jsonl"), Checkpoint(out / "checkpoint.npz", every=config["checkpoint_every"])]
    trainer = Trainer(model, build_loss(config), optimizer, sampler, scheduler=scheduler, callbacks=callbacks,
                      log_every=config["log_every"], progress=progress)
    start = time.perf_counter()
    result = trainer.fit(config["steps"])
    seconds = time.perf_counter() - start
    final = result.metrics["psnr"]  # the final step always evaluates
    if out is not None:
        save_image(out / "reconstruction.png", latest["image"])
        save_image(out / "target.png", image)
        plot_curves(result.history, out / "curves.png")
    return FitResult(psnr=final, reconstruction=latest["image"], train=result, seconds=seconds, out_dir=out)
