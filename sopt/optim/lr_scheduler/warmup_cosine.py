"""WarmupCosineLR: linear warmup then cosine decay to ``eta_min`` (the NeRF / instant-ngp style schedule)."""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import Field

from sopt.config.registry import ComponentConfig, register
from sopt.optim.lr_scheduler.base import LRScheduler
from sopt.utils.validation import check_float, check_int


class WarmupCosineConfig(ComponentConfig):
    """Linear warmup, then cosine decay to final_lr_factor times the learning rate at the run's last step."""

    otype: Literal["WarmupCosine"] = "WarmupCosine"
    warmup_steps: int = Field(0, ge=0, le=10_000_000, description="steps of linear warmup (cut to the run's "
                                                                  "steps - 1)")
    final_lr_factor: float = Field(0.01, ge=0.0, le=1.0, description="lr at the last step / learning_rate")
    warmup_start_factor: float = Field(0.0, ge=0.0, le=1.0, description="lr at step 0 / learning_rate "
                                                                        "(with warmup_steps > 0)")


def exact_ratio(numerator: float, denominator: float) -> float:
    """r = numerator / denominator, nudged by an ulp or two where that makes ``denominator * r == numerator``
    exactly (so a value stored as a factor of the lr comes back bit for bit)."""
    r = numerator / denominator
    candidates = [r]
    for direction in (math.inf, -math.inf):
        c = r
        for _ in range(2):
            c = math.nextafter(c, direction)
            candidates.append(c)
    return next((c for c in candidates if denominator * c == numerator), r)


@register("schedule", "WarmupCosine", WarmupCosineConfig)
class WarmupCosineLR(LRScheduler):
    r"""Linear warmup for ``warmup_steps`` (W) steps, then cosine decay until ``total_steps`` (T)::

        lr_t = base_lr * (s + (1 - s) * t / W)                                for 0 <= t < W
        lr_t = eta_min + (base_lr - eta_min) * (1 + cos(pi * (t - W) / (T - W))) / 2   for W <= t <= T
        lr_t = eta_min                                                        for t > T

    with ``s = warmup_start_factor``: the lr starts at ``s * base_lr``, reaches ``base_lr`` at step W and
    ``eta_min`` at step T. ``W = 0`` gives plain cosine decay. The lr is computed from ``base_lrs`` and
    ``t`` alone (closed form, not chainable): inside a ``ChainedScheduler`` it replaces the lr that schedulers
    before it wrote.

    Args:
        optimizer: the optimiser whose groups' ``lr`` is scheduled.
        warmup_steps: W, >= 0 and < ``total_steps``.
        total_steps: T, the step at which the lr reaches ``eta_min``, >= 1.
        eta_min: final lr (absolute, as in CosineAnnealingLR), >= 0. Default 0.
        warmup_start_factor: s, in [0, 1]. Default 0.
        last_epoch: -1 to start; see :class:`LRScheduler`.
    """

    _state_attrs = ("warmup_steps", "total_steps", "eta_min", "warmup_start_factor")
    _lr_factors = ("warmup_start_factor",)
    _state_checks = {"warmup_steps": lambda v, n: check_int(v, n, low=0),
                     "total_steps": lambda v, n: check_int(v, n, low=1),
                     "eta_min": lambda v, n: check_float(v, n, low=0.0),
                     "warmup_start_factor": lambda v, n: check_float(v, n, 0.0, 1.0)}

    def __init__(self, optimizer: Any, warmup_steps: int, total_steps: int, eta_min: float = 0.0,
                 warmup_start_factor: float = 0.0, last_epoch: int = -1) -> None:
        self.warmup_steps = check_int(warmup_steps, "warmup_steps", low=0)
        self.total_steps = check_int(total_steps, "total_steps", low=1)
        if self.warmup_steps >= self.total_steps:
            raise ValueError(f"warmup_steps must be < total_steps (the cosine phase needs at least one step), "
                             f"got warmup_steps={warmup_steps}, total_steps={total_steps}")
        self.eta_min = check_float(eta_min, "eta_min", low=0.0)
        self.warmup_start_factor = check_float(warmup_start_factor, "warmup_start_factor", 0.0, 1.0)
        super().__init__(optimizer, last_epoch)

    @classmethod
    def from_config(cls, config: WarmupCosineConfig, optimizer: Any, total_steps: int) -> "WarmupCosineLR":
        """The schedule of ``config`` over a run of ``total_steps`` steps (eta_min = final_lr_factor times the
        first param group's lr)."""
        total = check_int(total_steps, "total_steps", low=1)
        lr = optimizer.param_groups[0].get("initial_lr", optimizer.param_groups[0]["lr"])
        return cls(optimizer, warmup_steps=min(config.warmup_steps, total - 1), total_steps=total,
                   eta_min=lr * config.final_lr_factor, warmup_start_factor=config.warmup_start_factor)

    def to_config(self) -> WarmupCosineConfig:
        """The config of this schedule (its total_steps is the run's, given to from_config)."""
        base = self.base_lrs[0]
        if base <= 0.0 and self.eta_min > 0.0:
            raise ValueError("WarmupCosineLR.to_config: eta_min > 0 with a learning rate of 0 has no final_lr_factor")
        factor = exact_ratio(self.eta_min, base) if base > 0.0 else 0.0
        return WarmupCosineConfig(warmup_steps=self.warmup_steps, final_lr_factor=factor,
                                  warmup_start_factor=self.warmup_start_factor)

    def _check_state_dict(self, state_dict: Any) -> dict[str, Any]:
        loaded = super()._check_state_dict(state_dict)
        attrs = loaded["attrs"]
        if attrs["warmup_steps"] >= attrs["total_steps"]:
            raise ValueError(f"WarmupCosineLR state_dict has warmup_steps={attrs['warmup_steps']} >= "
                             f"total_steps={attrs['total_steps']}; warmup_steps must be < total_steps")
        return loaded

    def _lr_at(self, base: float, t: int) -> float:
        W, T, s = self.warmup_steps, self.total_steps, self.warmup_start_factor
        if t < W:
            return base * (s + (1.0 - s) * t / W)
        if t <= T:
            return self.eta_min + (base - self.eta_min) * (1.0 + math.cos(math.pi * (t - W) / (T - W))) / 2.0
        return self.eta_min

    def get_lr(self) -> list[float]:
        return [self._lr_at(base, self.last_epoch) for base in self.base_lrs]

    def _get_closed_form_lr(self) -> list[float]:
        return self.get_lr()
