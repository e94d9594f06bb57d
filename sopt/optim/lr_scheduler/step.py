"""StepLR: decay the lr by ``gamma`` every ``step_size`` steps (torch.optim.lr_scheduler.StepLR)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from sopt.config.registry import ComponentConfig, register
from sopt.optim.lr_scheduler.base import LRScheduler, check_gamma
from sopt.utils.validation import check_int


class StepConfig(ComponentConfig):
    """The learning rate times gamma every step_size steps."""

    otype: Literal["Step"] = "Step"
    step_size: int | None = Field(None, ge=1, le=10_000_000, description="steps between decays (None: a third of "
                                                                         "the run)")
    gamma: float = Field(0.1, gt=0.0, le=1.0, description="decay factor")


@register("schedule", "Step", StepConfig)
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

    @classmethod
    def from_config(cls, config: StepConfig, optimizer: Any, total_steps: int) -> "StepLR":
        """The schedule of ``config`` over a run of ``total_steps`` steps."""
        total = check_int(total_steps, "total_steps", low=1)
        step_size = config.step_size if config.step_size is not None else max(1, total // 3)
        return cls(optimizer, step_size=step_size, gamma=config.gamma)

    def to_config(self) -> StepConfig:
        return StepConfig(step_size=self.step_size, gamma=self.gamma)

    def get_lr(self) -> list[float]:
        lrs = self._group_lrs()
        if self.last_epoch == 0 or self.last_epoch % self.step_size != 0:
            return lrs
        return [lr * self.gamma for lr in lrs]

    def _get_closed_form_lr(self) -> list[float]:
        return [base * self.gamma ** (self.last_epoch // self.step_size) for base in self.base_lrs]
