"""``fit_image``: train the neural-field-image problem on an image array in this process, writing no files (from
the command line, ``sopt run --problem neural_field_image image=PATH`` trains it into a run directory)."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import numpy as np

from problems.neural_field_image.config import NeuralFieldImageConfig, load_config
from problems.neural_field_image.problem import NeuralFieldImage
from sopt.train import Trainer, TrainResult


@dataclasses.dataclass
class FitResult:
    """``psnr``: of the final reconstruction (dB, prediction clipped to [0, 1]); ``reconstruction``: (H, W, 3);
    ``problem``: the trained problem (its model, optimiser, ...)."""

    psnr: float
    reconstruction: np.ndarray
    train: TrainResult
    seconds: float
    problem: NeuralFieldImage


def fit_image(image: np.ndarray, config: NeuralFieldImageConfig | dict[str, Any], progress: bool = True) -> FitResult:
    """Train the configured field on ``image`` ((H, W, 3) float in [0, 1]). ``config``: a validated
    :class:`NeuralFieldImageConfig`, or a dict merged over its defaults and validated (ConfigError)."""
    if isinstance(config, dict):
        config = load_config(**config)
    problem = NeuralFieldImage(config, image=image)
    trainer = Trainer(**problem.trainer_parts(), log_every=config.log_every, progress=progress)
    start = time.perf_counter()
    result = trainer.fit(config.steps)
    seconds = time.perf_counter() - start
    assert problem.reconstruction is not None   # the last step always evaluates
    return FitResult(psnr=result.metrics["psnr"], reconstruction=problem.reconstruction, train=result,
                     seconds=seconds, problem=problem)
