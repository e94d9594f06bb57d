"""Evaluate: compute metrics (PSNR on a full image, a validation loss, ...) every N steps."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from sopt.train.callback import Callback

if TYPE_CHECKING:
    from sopt.train.trainer import Trainer


class Evaluate(Callback):
    """Calls ``fn(trainer) -> {name: number}`` every ``every`` steps (and at the end) and adds the result to
    the step's metrics, before loggers, early stopping and checkpoints see them.

    The GPU is idle when ``fn`` runs (the Trainer has just waited for it), so ``fn`` may run the model
    without an encoder and read results back. Names may not replace the Trainer's own metrics.
    """

    order = 0
    reserved = ("step", "loss", "lr", "steps_per_s", "time_s", "skipped_steps")

    def __init__(self, fn: Callable[["Trainer"], dict[str, float]], every: int) -> None:
        if not callable(fn):
            raise ValueError(f"Evaluate needs a callable fn(trainer) -> dict, got {type(fn).__name__}")
        super().__init__(every)
        self.fn = fn

    def on_metrics(self, trainer: "Trainer", metrics: dict[str, Any]) -> None:
        result = self.fn(trainer)
        if not isinstance(result, dict):
            raise ValueError(f"the evaluation function must return a dict of metrics, got {type(result).__name__}")
        for name, value in result.items():
            if name in self.reserved:
                raise ValueError(f"evaluation metric {name!r} clashes with the Trainer's own; reserved names: "
                                 f"{list(self.reserved)}")
            try:
                number = float(value)
            except (TypeError, ValueError):
                raise ValueError(f"evaluation metric {name!r} must be a number, got {value!r}") from None
            metrics[name] = number
