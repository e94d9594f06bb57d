"""Adagrad (Duchi et al. 2011), torch.optim.Adagrad's semantics. Kernel: slang_lib/optim/adagrad.slang."""

from __future__ import annotations

from typing import Any

from sopt.optim.optimizer import Optimizer
from sopt.validation import check_bool, check_float


class Adagrad(Optimizer):
    r"""Adagrad, torch.optim.Adagrad's update at step t::

        g   = -g if maximize;  g += weight_decay * p
        clr = lr / (1 + (t - 1) * lr_decay)
        s  += g^2                        (s starts at initial_accumulator_value)
        p  -= clr * g / (sqrt(s) + eps)

    State per element: ``sum``.
    """

    kernel_module = "optim/adagrad"
    kernel_entry = "adagrad_step"
    state_names = ("sum",)

    def __init__(self, params: Any, lr: float = 1e-2, lr_decay: float = 0.0, weight_decay: float = 0.0,
                 initial_accumulator_value: float = 0.0, eps: float = 1e-10, maximize: bool = False,
                 **options: Any) -> None:
        defaults = dict(lr=lr, lr_decay=lr_decay, weight_decay=weight_decay,
                        initial_accumulator_value=initial_accumulator_value, eps=eps, maximize=maximize)
        super().__init__(params, defaults, **options)

    def check_group(self, group: dict[str, Any]) -> None:
        super().check_group(group)
        for key in ("lr_decay", "weight_decay", "initial_accumulator_value", "eps"):
            group[key] = check_float(group[key], key, low=0.0)
        group["maximize"] = check_bool(group["maximize"], "maximize")

    def state_fill(self, name: str, group: dict[str, Any]) -> float:
        return float(group["initial_accumulator_value"])

    def group_hyper(self, group: dict[str, Any]) -> list[float]:
        return [group["lr"], group["lr_decay"], group["eps"], group["weight_decay"], group["maximize"]]
