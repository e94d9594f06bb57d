"""ReduceLROnPlateau: cut the lr when a metric stops improving (torch.optim.lr_scheduler.ReduceLROnPlateau)."""

from __future__ import annotations

import math
from typing import Any

from sopt.optim.lr_scheduler.base import (LRScheduler, check_group_count, check_optimizer, check_position,
                                          check_state, per_group)
from sopt.utils.validation import check_choice, check_float, check_int

_MODES = ("min", "max")
_THRESHOLD_MODES = ("rel", "abs")


class ReduceLROnPlateau(LRScheduler):
    r"""Multiply the lr by ``factor`` once the metric has not improved for more than ``patience`` steps.

    At each ``step(metrics)``: the metric improves on ``best`` when (mode 'min')
    ``metrics < best * (1 - threshold)`` ('rel') or ``metrics < best - threshold`` ('abs'); mode 'max' mirrors
    it (``best * (1 + threshold)``, ``best + threshold``). An improvement sets ``best`` and zeroes the count of
    bad steps; otherwise the count grows (a NaN metric never improves). During ``cooldown`` steps after a
    reduction bad steps are not counted. When the count exceeds ``patience``::

        lr <- max(lr * factor, min_lr)     (skipped when it would change lr by no more than eps)

    then the cooldown starts and the count resets. The lr is otherwise left as it is, so other code (or
    another scheduler) may set it.

    Args:
        optimizer: the optimiser whose groups' ``lr`` is reduced.
        mode: 'min' (lower metric is better) or 'max'. Default 'min'.
        factor: in [0, 1). Default 0.1.
        patience: bad steps tolerated before a reduction, >= 0. Default 10.
        threshold: least significant improvement, >= 0. Default 1e-4.
        threshold_mode: 'rel' or 'abs'. Default 'rel'.
        cooldown: steps after a reduction during which bad steps are ignored, >= 0. Default 0.
        min_lr: lower bound on the lr, >= 0; one value or one per group. Default 0.
        eps: smallest lr change applied, >= 0. Default 1e-8.
    """

    def __init__(self, optimizer: Any, mode: str = "min", factor: float = 0.1, patience: int = 10,
                 threshold: float = 1e-4, threshold_mode: str = "rel", cooldown: int = 0,
                 min_lr: float | list[float] = 0.0, eps: float = 1e-8) -> None:
        check_optimizer(optimizer)
        self.optimizer = optimizer
        self.factor = check_float(factor, "factor", 0.0, 1.0, high_inclusive=False, float32=True)
        self.mode = check_choice(mode, "mode", _MODES)
        self.threshold_mode = check_choice(threshold_mode, "threshold_mode", _THRESHOLD_MODES)
        self.threshold = check_float(threshold, "threshold", low=0.0)
        self.patience = check_int(patience, "patience", low=0)
        self.cooldown = check_int(cooldown, "cooldown", low=0)
        self.eps = check_float(eps, "eps", low=0.0)
        self.min_lrs = per_group(min_lr, "min_lr", optimizer,
                                 lambda v, name: check_float(v, name, low=0.0, float32=True))
        # ReduceLROnPlateau never rescales from base_lrs and leaves initial_lr alone, as torch.
        self.base_lrs = self._group_lrs()
        self.last_epoch = 0
        self._step_count = 0
        self._last_lr = self._group_lrs()
        self._reset()

    @property
    def mode_worse(self) -> float:
        """The starting ``best``: +inf for 'min', -inf for 'max'."""
        return math.inf if self.mode == "min" else -math.inf

    def _reset(self) -> None:
        self.best = self.mode_worse
        self.cooldown_counter = 0
        self.num_bad_epochs = 0

    @property
    def in_cooldown(self) -> bool:
        return self.cooldown_counter > 0

    def is_better(self, a: float, best: float) -> bool:
        """Whether metric ``a`` is a significant improvement on ``best``."""
        if self.mode == "min" and self.threshold_mode == "rel":
            return a < best * (1.0 - self.threshold)
        if self.mode == "min":
            return a < best - self.threshold
        if self.threshold_mode == "rel":
            return a > best * (self.threshold + 1.0)
        return a > best + self.threshold

    def step(self, metrics: Any) -> None:  # type: ignore[override]
        """Record this step's metric (a number, or a one-element array) and reduce the lr if it has
        plateaued."""
        try:
            current = float(metrics)
        except (TypeError, ValueError):
            raise ValueError(f"metrics must be a number, got {metrics!r}") from None
        self.last_epoch += 1
        self._step_count += 1
        if self.is_better(current, self.best):
            self.best = current
            self.num_bad_epochs = 0
        else:
            self.num_bad_epochs += 1
        if self.in_cooldown:
            self.cooldown_counter -= 1
            self.num_bad_epochs = 0
        if self.num_bad_epochs > self.patience:
            self._reduce_lr()
            self.cooldown_counter = self.cooldown
            self.num_bad_epochs = 0
        self._last_lr = self._group_lrs()

    def _reduce_lr(self) -> None:
        for group, min_lr in zip(self.optimizer.param_groups, self.min_lrs, strict=True):
            old_lr = float(group["lr"])
            new_lr = max(old_lr * self.factor, min_lr)
            if old_lr - new_lr > self.eps:
                group["lr"] = new_lr

    _SAVED = ("mode", "factor", "patience", "threshold", "threshold_mode", "cooldown", "min_lrs", "eps",
              "cooldown_counter", "num_bad_epochs")

    def state_dict(self) -> dict[str, Any]:
        state = {"type": type(self).__name__, "last_epoch": self.last_epoch, "step_count": self._step_count,
                 "base_lrs": [float(lr) for lr in self.base_lrs],
                 "last_lr": [float(lr) for lr in self._last_lr]}
        state.update({name: getattr(self, name) for name in self._SAVED})
        state["min_lrs"] = list(self.min_lrs)
        # Strict JSON has no infinity: the initial best (+-inf) is saved as None.
        state["best"] = self.best if math.isfinite(self.best) else None
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` saved and write the saved lrs into the param groups; every field is
        checked first (ValueError with nothing changed)."""
        self._apply_state_dict(self._check_state_dict(state_dict))

    def _check_state_dict(self, state_dict: Any) -> dict[str, Any]:
        check_state(state_dict, self, ("last_epoch", "step_count", "base_lrs", "last_lr", "best", *self._SAVED))
        if state_dict["mode"] not in _MODES or state_dict["threshold_mode"] not in _THRESHOLD_MODES:
            raise ValueError(f"ReduceLROnPlateau state_dict has mode={state_dict['mode']!r}, "
                             f"threshold_mode={state_dict['threshold_mode']!r}; allowed: {_MODES}, {_THRESHOLD_MODES}")
        best = state_dict["best"]   # None: the initial +-inf
        attrs = {"mode": state_dict["mode"], "threshold_mode": state_dict["threshold_mode"],
                 "factor": check_float(state_dict["factor"], "factor", 0.0, 1.0, high_inclusive=False,
                                       float32=True),
                 "threshold": check_float(state_dict["threshold"], "threshold", low=0.0),
                 "patience": check_int(state_dict["patience"], "patience", low=0),
                 "cooldown": check_int(state_dict["cooldown"], "cooldown", low=0),
                 "eps": check_float(state_dict["eps"], "eps", low=0.0),
                 "cooldown_counter": check_int(state_dict["cooldown_counter"], "cooldown_counter", low=0),
                 "num_bad_epochs": check_int(state_dict["num_bad_epochs"], "num_bad_epochs", low=0),
                 "min_lrs": check_group_count(state_dict["min_lrs"], "min_lrs", self.optimizer, self),
                 "best": None if best is None else check_float(best, "best")}
        return {**check_position(state_dict, self.optimizer, self), "attrs": attrs}

    def _apply_state_dict(self, loaded: dict[str, Any]) -> None:
        for name, value in loaded["attrs"].items():
            setattr(self, name, value)
        if self.best is None:
            self.best = self.mode_worse
        self.base_lrs = list(loaded["base_lrs"])
        self.last_epoch, self._step_count = loaded["last_epoch"], loaded["step_count"]
        # unlike the closed-form schedules, initial_lr is left alone (as the constructor does)
        for group, lr in zip(self.optimizer.param_groups, loaded["last_lr"]):
            group["lr"] = lr
        self._last_lr = list(loaded["last_lr"])
