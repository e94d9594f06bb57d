"""StepLR: decay the lr by ``gamma`` every ``step_size`` steps (torch.optim.lr_scheduler.StepLR)."""

from __future__ import annotations

from typing import Any

from sopt.optim.lr_scheduler.base import LRScheduler, check_gamma
from sopt.validation import check_int


class StepLR(LRScheduler):
    r"""Step decay::

        lr_t = base_lr * gamma ** (t // step_size)

    Chainable, as torch: at every non-zero multiple of ``step_size`` the group's current lr is multiplied by
    ``gamma``.

    Args:
        optimizer: the optimiser whose groups' ``lr`` is scheduled.
        step_size: steps between decays, >= 1.
        gamma: decay factor, > 0. Default 0.1.
        last_epoch: -1 to start; see :class:`LRScheduler`.
    """

    _state_attrs = ("step_size", "gamma")
    _state_checks = {"step_size": lambda v, n: check_int(v, n, low=1), "gamma": lambda v, n: check_gamma(v)}

    def __init__(self, optimizer: Any, step_size: int, gamma: float = 0.1, last_epoch: int = -1) -> None:
        self.step_size = check_int(step_size, "step_size", low=1)
        self.gamma = check_gamma(gamma)
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        lrs = self._group_lrs()
        if self.last_epoch == 0 or self.last_epoch % self.step_size != 0:
            return lrs
        return [lr * self.gamma for lr in lrs]

    def _get_closed_form_lr(self) -> list[float]:
        return [base * self.gamma ** (self.last_epoch // self.step_size) for base in self.base_lrs]
