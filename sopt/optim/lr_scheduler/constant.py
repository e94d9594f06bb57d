"""ConstantLR: a constant factor on the lr for the first ``total_iters`` steps (torch.optim.lr_scheduler.ConstantLR)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from sopt.config.registry import ComponentConfig, register
from sopt.optim.lr_scheduler.base import LRScheduler
from sopt.utils.validation import check_float, check_int


class ConstantConfig(ComponentConfig):
    """The learning rate stays at the optimizer's (times factor for the first total_iters steps, torch's
    ConstantLR; the defaults change nothing)."""

    otype: Literal["Constant"] = "Constant"
    factor: float = Field(1.0, gt=0.0, le=1.0, description="lr / learning_rate for the first total_iters steps")
    total_iters: int = Field(1, ge=1, le=10_000_000, description="steps at the reduced lr")


@register("schedule", "Constant", ConstantConfig)
class ConstantLR(LRScheduler):
    r"""Scale the lr by ``factor`` until step ``total_iters``::

        lr_t = base_lr * factor     for t <  total_iters
        lr_t = base_lr              for t >= total_iters

    Chainable, as torch: step 0 multiplies the group's current lr by ``factor``, step ``total_iters``
    multiplies it by ``1 / factor``, other steps leave it alone.

    Args:
        optimizer: the optimiser whose groups' ``lr`` is scheduled.
        factor: in (0, 1]. Default 1/3.
        total_iters: steps at the reduced lr, >= 1. Default 5.
        last_epoch: -1 to start; see :class:`LRScheduler`.
    """

    _state_attrs = ("factor", "total_iters")
    _lr_factors = ("factor",)
    _state_checks = {"factor": lambda v, n: check_float(v, n, 0.0, 1.0, low_inclusive=False),
                     "total_iters": lambda v, n: check_int(v, n, low=1)}

    def __init__(self, optimizer: Any, factor: float = 1.0 / 3, total_iters: int = 5, last_epoch: int = -1) -> None:
        # factor 0 could never be undone (torch divides by it at total_iters).
        self.factor = check_float(factor, "factor", 0.0, 1.0, low_inclusive=False)
        self.total_iters = check_int(total_iters, "total_iters", low=1)
        super().__init__(optimizer, last_epoch)

    @classmethod
    def from_config(cls, config: ConstantConfig, optimizer: Any, total_steps: int | None = None) -> "ConstantLR":
        """The schedule of ``config`` (``total_steps``, the run's length, is not needed)."""
        return cls(optimizer, factor=config.factor, total_iters=config.total_iters)

    def to_config(self) -> ConstantConfig:
        return ConstantConfig(factor=self.factor, total_iters=self.total_iters)

    def get_lr(self) -> list[float]:
        lrs = self._group_lrs()
        if self.last_epoch == 0:
            return [lr * self.factor for lr in lrs]
        if self.last_epoch != self.total_iters:
            return lrs
        return [lr * (1.0 / self.factor) for lr in lrs]

    def _get_closed_form_lr(self) -> list[float]:
        return [base * (self.factor + (self.last_epoch >= self.total_iters) * (1 - self.factor))
                for base in self.base_lrs]
