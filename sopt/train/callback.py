"""Callback: something the Trainer runs on the steps where it reads metrics from the GPU.

The Trainer waits for the GPU only on *metrics steps*: every ``log_every`` steps, every ``every`` steps of
each callback that sets it, and the final step. There it reads the loss, builds a metrics dict
(``step``, ``loss``, ``lr``, ``steps_per_s``, ...) and calls ``on_metrics`` of the callbacks in ascending
``order`` (evaluation first, so loggers, early stopping and checkpoints see its metrics; ties keep the
order given). A callback with ``every = None`` runs on every metrics step; one with ``every = N`` on
multiples of N. On the final step (the last one, or one where a stop was requested) every callback runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sopt.utils.validation import check_int

if TYPE_CHECKING:
    from sopt.train.trainer import Trainer, TrainResult


class Callback:
    """Base class; override the hooks you need. ``every``: steps between runs, or None (every metrics step)."""

    order: int = 50

    def __init__(self, every: int | None = None) -> None:
        self.every = None if every is None else check_int(every, "every", low=1)

    def due(self, step: int) -> bool:
        """Whether this callback runs at ``step`` (a metrics step that is not the final one)."""
        return self.every is None or step % self.every == 0

    def on_train_start(self, trainer: "Trainer") -> None:
        """Before the first step of ``fit``."""

    def on_metrics(self, trainer: "Trainer", metrics: dict[str, Any]) -> None:
        """On a metrics step where this callback is due; may add entries to ``metrics`` or call ``trainer.stop``."""

    def on_train_end(self, trainer: "Trainer", result: "TrainResult") -> None:
        """When ``fit`` ends: completed, stopped early, or stopped on a non-finite value."""
