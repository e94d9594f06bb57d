"""ExponentialLR: decay the lr by ``gamma`` every step (torch.optim.lr_scheduler.ExponentialLR)."""

from __future__ import annotations

from typing import Any

from sopt.optim.lr_scheduler.base import LRScheduler, check_gamma


class ExponentialLR(LRScheduler):
    r"""Exponential decay::

        lr_t = base_lr * gamma ** t

    Chainable, as torch: every step after construction multiplies the group's current lr by ``gamma``.

    Args:
        optimizer: the optimiser whose groups' ``lr`` is scheduled.
        gamma: decay factor per step, > 0.
        last_epoch: -1 to start; see :class:`LRScheduler`.
    """

    _state_attrs = ("gamma",)
    _state_checks = {"gamma": lambda v, n: check_gamma(v)}

    def __init__(self, optimizer: Any, gamma: float, last_epoch: int = -1) -> None:
        self.gamma = check_gamma(gamma)
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        lrs = self._group_lrs()
        # The constructor's step must not decay: a resumed schedule's lr is already that of its epoch.
        if self._is_initial:
            return lrs
        return [lr * self.gamma for lr in lrs]

    def _get_closed_form_lr(self) -> list[float]:
        return [base * self.gamma ** self.last_epoch for base in self.base_lrs]
