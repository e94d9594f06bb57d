"""Checkpoint: an atomic checkpoint of the model, optimiser and scheduler every N steps."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import numpy as np

from sopt.train import checkpoint
from sopt.autodiff.parameter import parameters_of
from sopt.train.callback import Callback
from sopt.utils.validation import check_path

if TYPE_CHECKING:
    from sopt.train.trainer import Trainer


class Checkpoint(Callback):
    """Every ``every`` steps (and at the end) writes ``sopt.save(path, model, optimizer, scheduler,
    extra={"step", "metrics"})``, replacing the previous file atomically.

    It runs after the loss was read finite, and first checks that every parameter is finite: if one is not,
    it does not write (the previous checkpoint stays the last good one) and training stops with a
    NonFiniteError. ``Trainer.restore(path)`` resumes from the file.
    """

    order = 70

    def __init__(self, path: str | os.PathLike[str], every: int) -> None:
        super().__init__(every)
        self.path = check_path(path, "Checkpoint path")

    def on_metrics(self, trainer: "Trainer", metrics: dict[str, Any]) -> None:
        for p in parameters_of(trainer.parameters):
            values = p.numpy()
            if not np.isfinite(values).all():
                raise trainer.nonfinite_error(f"parameter {p.name!r} holds {int((~np.isfinite(values)).sum())} "
                                         "non-finite value(s); the checkpoint was not written")
        checkpoint.save(self.path, parameters=trainer.parameters, optimizer=trainer.optimizer,
                        scheduler=trainer.scheduler, extra={"step": trainer.step, "metrics": dict(metrics)})
        trainer.last_checkpoint = (self.path, trainer.step)
