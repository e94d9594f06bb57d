"""Adagrad (Duchi et al. 2011), torch.optim.Adagrad's semantics. Kernel: slang_lib/optim/adagrad.slang."""

from __future__ import annotations

from typing import Any

from sopt.optim.optimizer import Optimizer
from sopt.validation import check_float


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
        check_float(group["lr_decay"], "lr_decay", low=0.0)
        check_float(group["weight_decay"], "weight_decay", low=0.0)
        check_float(group["initial_accumulator_value"], "initial_accumulator_value", low=0.0)
        check_float(group["eps"], "eps", low=0.0)

    def state_fill(self, name: str, group: dict[str, Any]) -> float:
        return float(group["initial_accumulator_value"])

    def group_hyper(self, group: dict[str, Any]) -> list[float]:
        return [group["lr"], group["lr_decay"], group["eps"], group["weight_decay"], group["maximize"]]
