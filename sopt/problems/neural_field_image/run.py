"""``fit_image``: train the neural-field-image problem on an image in this process (the API behind the module's
command line; ``sopt run`` drives :class:`~sopt.problems.neural_field_image.problem.NeuralFieldImage` itself)."""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import time
from typing import Any

import numpy as np

from sopt import atomic_write
from sopt.config.schema import defaults, merge, validate
from sopt.problems.neural_field_image.config import NeuralFieldImageConfig
from sopt.problems.neural_field_image.problem import NeuralFieldImage
from sopt.train import Checkpoint, JSONLLogger, Trainer, TrainResult

CONFIG_FILE, METRICS_FILE, CHECKPOINT_FILE = "config.json", "metrics.jsonl", "checkpoint.npz"


@dataclasses.dataclass
class FitResult:
    """``psnr``: of the final reconstruction (dB, prediction clipped to [0, 1]); ``reconstruction``: (H, W, 3);
    ``problem``: the trained problem (its model, optimiser, ...)."""

    psnr: float
    reconstruction: np.ndarray
    train: TrainResult
    seconds: float
    out_dir: pathlib.Path | None
    problem: NeuralFieldImage


def fit_image(image: np.ndarray, config: NeuralFieldImageConfig | dict[str, Any],
              out_dir: str | os.PathLike[str] | None = None, progress: bool = True) -> FitResult:
    """Train the configured field on ``image`` ((H, W, 3) float in [0, 1]).

    ``config``: a validated :class:`NeuralFieldImageConfig`, or a dict merged over its defaults and validated
    (ConfigError). With ``out_dir``: ``reconstruction.png``, ``target.png``, ``curves.png`` (loss and PSNR),
    ``metrics.jsonl``, ``checkpoint.npz`` and the ``config.json`` used (every key).
    """
    if isinstance(config, dict):
        config = validate(NeuralFieldImageConfig, merge(defaults(NeuralFieldImageConfig), config))
    problem = NeuralFieldImage(config, image=image)
    parts = problem.trainer_parts()
    callbacks = list(parts.pop("callbacks"))
    out = pathlib.Path(out_dir) if out_dir is not None else None
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        atomic_write.write_text(out / CONFIG_FILE, json.dumps(config.model_dump(mode="json"), indent=2) + "\n")
        callbacks += [JSONLLogger(out / METRICS_FILE), Checkpoint(out / CHECKPOINT_FILE, every=config.checkpoint_every)]
    trainer = Trainer(**parts, callbacks=callbacks, log_every=config.log_every, progress=progress)
    start = time.perf_counter()
    result = trainer.fit(config.steps)
    seconds = time.perf_counter() - start
    if out is not None:
        final = problem.finish(out, result.history)["psnr"]
    else:
        final = result.metrics["psnr"]   # the last step always evaluates
    assert problem.reconstruction is not None
    return FitResult(psnr=final, reconstruction=problem.reconstruction, train=result, seconds=seconds, out_dir=out,
                     problem=problem)
