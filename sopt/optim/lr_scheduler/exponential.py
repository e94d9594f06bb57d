"""ExponentialLR: decay the lr by ``gamma`` every step (torch.optim.lr_scheduler.ExponentialLR)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from sopt.config.registry import ComponentConfig, register
from sopt.optim.lr_scheduler.base import LRScheduler, check_gamma


class ExponentialConfig(ComponentConfig):
    """The learning rate times gamma every step."""

    otype: Literal["Exponential"] = "Exponential"
    gamma: float = Field(0.999, gt=0.0, le=1.0, description="decay factor per step")


@register("schedule", "Exponential", ExponentialConfig)
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

    @classmethod
    def from_config(cls, config: ExponentialConfig, optimizer: Any, total_steps: int | None = None) -> "ExponentialLR":
        """The schedule of ``config`` (``total_steps``, the run's length, is not needed)."""
        return cls(optimizer, gamma=config.gamma)

    def to_config(self) -> ExponentialConfig:
        return ExponentialConfig(gamma=self.gamma)

    def get_lr(self) -> list[float]:
        lrs = self._group_lrs()
        # The constructor's step must not decay: a resumed schedule's lr is already that of its epoch.
        if self._is_initial:
            return lrs
        return [lr * self.gamma for lr in lrs]

    def _get_closed_form_lr(self) -> list[float]:
        return [base * self.gamma ** self.last_epoch for base in self.base_lrs]
