"""CosineAnnealingLR: cosine annealing from the base lr to ``eta_min`` over ``T_max`` steps
(torch.optim.lr_scheduler.CosineAnnealingLR)."""

from __future__ import annotations

import math
from typing import Any

from sopt.optim.lr_scheduler.base import LRScheduler
from sopt.utils.validation import check_float, check_int


class CosineAnnealingLR(LRScheduler):
    r"""Cosine annealing (SGDR without restarts)::

        lr_t = eta_min + (base_lr - eta_min) * (1 + cos(pi * t / T_max)) / 2

    Past ``T_max`` the cosine continues, so the lr rises again with period ``2 * T_max``, as in torch.

    Chainable, as torch: each step applies the recursion
    ``lr_t = eta_min + (lr_{t-1} - eta_min) * (1 + cos(pi t / T_max)) / (1 + cos(pi (t-1) / T_max))``,
    with the additive form ``lr_{t-1} + (base_lr - eta_min) * (1 - cos(pi / T_max)) / 2`` where the
    denominator is zero (``t - 1 = T_max`` modulo ``2 T_max``); on a fresh schedule that equals the closed form
    to float rounding.

    Args:
        optimizer: the optimiser whose groups' ``lr`` is scheduled.
        T_max: half-period in steps, >= 1.
        eta_min: lowest lr, >= 0. Default 0.
        last_epoch: -1 to start; see :class:`LRScheduler`.
    """

    _state_attrs = ("T_max", "eta_min")
    _state_checks = {"T_max": lambda v, n: check_int(v, n, low=1), "eta_min": lambda v, n: check_float(v, n, low=0.0)}

    def __init__(self, optimizer: Any, T_max: int, eta_min: float = 0.0, last_epoch: int = -1) -> None:
        self.T_max = check_int(T_max, "T_max", low=1)
        self.eta_min = check_float(eta_min, "eta_min", low=0.0)
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        lrs = self._group_lrs()
        t, T, eta_min = self.last_epoch, self.T_max, self.eta_min
        if self._is_initial:
            return lrs
        if self._step_count == 1 and t > 0:
            # First step after resuming with last_epoch >= 0: nothing to recurse from, use the closed form.
            return [eta_min + (base - eta_min) * (1 + math.cos(t * math.pi / T)) / 2 for base in self.base_lrs]
        if (t - 1 - T) % (2 * T) == 0:
            return [lr + (base - eta_min) * (1 - math.cos(math.pi / T)) / 2
                    for base, lr in zip(self.base_lrs, lrs, strict=True)]
        return [(1 + math.cos(math.pi * t / T)) / (1 + math.cos(math.pi * (t - 1) / T)) * (lr - eta_min) + eta_min
                for lr in lrs]

    def _get_closed_form_lr(self) -> list[float]:
        return [self.eta_min + (base - self.eta_min) * (1 + math.cos(math.pi * self.last_epoch / self.T_max)) / 2
                for base in self.base_lrs]
