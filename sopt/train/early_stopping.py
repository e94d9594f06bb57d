"""EarlyStopping: end training once a metric reaches a target (e.g. PSNR >= 30 dB, loss <= 1e-4)."""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

from sopt.train.callback import Callback
from sopt.utils.validation import check_choice, check_float

if TYPE_CHECKING:
    from sopt.train.trainer import Trainer, TrainResult


class EarlyStopping(Callback):
    """Stops training at the first metrics step where ``metric`` is ``>= target`` (mode "max") or
    ``<= target`` (mode "min"). The metric is checked whenever it is present (an Evaluate callback's
    metric appears every ``Evaluate.every`` steps; "loss" on every metrics step). The result's ``stop_reason``
    names the metric, its value and the step.
    """

    order = 60

    def __init__(self, metric: str, target: float, mode: str = "max") -> None:
        super().__init__(None)
        check_choice(mode, "mode", ("max", "min"))
        if not isinstance(metric, str) or not metric:
            raise ValueError(f"metric must be a metric name such as 'loss' or 'psnr', got {metric!r}")
        self.metric, self.target, self.mode = metric, check_float(target, "target"), mode
        self._seen: set[str] = set()
        self._found = False

    def on_train_start(self, trainer: "Trainer") -> None:
        self._seen, self._found = set(), False

    def on_metrics(self, trainer: "Trainer", metrics: dict[str, Any]) -> None:
        self._seen.update(metrics)
        value = metrics.get(self.metric)
        if value is None:
            return
        self._found = True
        reached = value >= self.target if self.mode == "max" else value <= self.target
        if reached:
            sign = ">=" if self.mode == "max" else "<="
            trainer.stop(f"early stop: {self.metric} = {value:.6g} {sign} target {self.target:g} at step "
                         f"{metrics['step']}")

    def on_train_end(self, trainer: "Trainer", result: "TrainResult") -> None:
        if not self._found and result.history:
            warnings.warn(f"EarlyStopping watched metric {self.metric!r}, which never appeared; metrics seen: "
                          f"{sorted(self._seen)}", RuntimeWarning, stacklevel=2)
