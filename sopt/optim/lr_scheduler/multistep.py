"""MultiStepLR: decay the lr by ``gamma`` at each milestone (torch.optim.lr_scheduler.MultiStepLR)."""

from __future__ import annotations

from bisect import bisect_right
from typing import Any, Iterable

from sopt.optim.lr_scheduler.base import LRScheduler, check_gamma, check_milestones


class MultiStepLR(LRScheduler):
    r"""Milestone decay::

        lr_t = base_lr * gamma ** (number of milestones m with m <= t)

    Chainable, as torch: at a step equal to ``n`` milestones the group's current lr is multiplied by
    ``gamma ** n`` (a milestone listed twice decays twice).

    Args:
        optimizer: the optimiser whose groups' ``lr`` is scheduled.
        milestones: step indices >= 0, non-decreasing.
        gamma: decay factor, > 0. Default 0.1.
        last_epoch: -1 to start; see :class:`LRScheduler`.
    """

    _state_attrs = ("milestones", "gamma")
    _state_checks = {"milestones": lambda v, n: check_milestones(v, n, low=0, strict=False),
                     "gamma": lambda v, n: check_gamma(v)}

    def __init__(self, optimizer: Any, milestones: Iterable[int], gamma: float = 0.1, last_epoch: int = -1) -> None:
        self.milestones = check_milestones(milestones, "milestones", low=0, strict=False)
        self.gamma = check_gamma(gamma)
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        lrs = self._group_lrs()
        hits = self.milestones.count(self.last_epoch)
        if hits == 0:
            return lrs
        return [lr * self.gamma ** hits for lr in lrs]

    def _get_closed_form_lr(self) -> list[float]:
        return [base * self.gamma ** bisect_right(self.milestones, self.last_epoch) for base in self.base_lrs]
