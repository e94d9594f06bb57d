"""LinearLR: a factor on the lr that moves linearly over ``total_iters`` steps (torch.optim.lr_scheduler.LinearLR)."""

from __future__ import annotations

from typing import Any

from sopt.optim.lr_scheduler.base import LRScheduler
from sopt.utils.validation import check_float, check_int


class LinearLR(LRScheduler):
    r"""Linear warmup (or decay) of a multiplicative factor::

        lr_t = base_lr * (start_factor + (end_factor - start_factor) * min(t, total_iters) / total_iters)

    Chainable, as torch: step 0 multiplies the group's lr by ``start_factor`` and step ``t`` in
    ``1..total_iters`` by the ratio of consecutive factors,
    ``1 + (end - start) / (total_iters * start + (t - 1) * (end - start))``.

    Args:
        optimizer: the optimiser whose groups' ``lr`` is scheduled.
        start_factor: factor at step 0, in (0, 1]. Default 1/3.
        end_factor: factor from step ``total_iters`` on, in [0, 1]. Default 1.
        total_iters: steps of the ramp, >= 1. Default 5.
        last_epoch: -1 to start; see :class:`LRScheduler`.
    """

    _state_attrs = ("start_factor", "end_factor", "total_iters")
    _lr_factors = ("start_factor", "end_factor")
    _state_checks = {"start_factor": lambda v, n: check_float(v, n, 0.0, 1.0, low_inclusive=False),
                     "end_factor": lambda v, n: check_float(v, n, 0.0, 1.0),
                     "total_iters": lambda v, n: check_int(v, n, low=1)}

    def __init__(self, optimizer: Any, start_factor: float = 1.0 / 3, end_factor: float = 1.0, total_iters: int = 5,
                 last_epoch: int = -1) -> None:
        # start_factor 0 would make the chainable ratio divide by zero.
        self.start_factor = check_float(start_factor, "start_factor", 0.0, 1.0, low_inclusive=False)
        self.end_factor = check_float(end_factor, "end_factor", 0.0, 1.0)
        self.total_iters = check_int(total_iters, "total_iters", low=1)
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        lrs = self._group_lrs()
        if self.last_epoch == 0:
            return [lr * self.start_factor for lr in lrs]
        if self._is_initial or self.last_epoch > self.total_iters:
            return lrs
        delta = self.end_factor - self.start_factor
        return [lr * (1.0 + delta / (self.total_iters * self.start_factor + (self.last_epoch - 1) * delta))
                for lr in lrs]

    def _get_closed_form_lr(self) -> list[float]:
        return [base * (self.start_factor + (self.end_factor - self.start_factor)
                        * min(self.total_iters, self.last_epoch) / self.total_iters)
                for base in self.base_lrs]
