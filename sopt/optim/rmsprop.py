"""RMSprop (Hinton), torch.optim.RMSprop's semantics. Kernel: slang_lib/optim/rmsprop.slang."""

from __future__ import annotations

from typing import Any

from sopt.optim.optimizer import Optimizer
from sopt.validation import check_bool, check_float


class RMSprop(Optimizer):
    r"""RMSprop, torch.optim.RMSprop's update::

        g   = -g if maximize;  g += weight_decay * p
        s   = alpha * s + (1 - alpha) * g^2
        avg = sqrt(s - ga^2) + eps  with ga = alpha * ga + (1 - alpha) * g   (centered)
        avg = sqrt(s) + eps                                                  (otherwise)
        buf = momentum * buf + g / avg;  p -= lr * buf     (momentum > 0)
        p  -= lr * g / avg                                 (otherwise)

    State per element: ``square_avg``, ``momentum_buffer`` (momentum > 0), ``grad_avg`` (centered).
    """

    kernel_module = "optim/rmsprop"
    kernel_entry = "rmsprop_step"
    state_names = ("square_avg", "momentum_buffer", "grad_avg")

    def __init__(self, params: Any, lr: float = 1e-2, alpha: float = 0.99, eps: float = 1e-8,
                 weight_decay: float = 0.0, momentum: float = 0.0, centered: bool = False, maximize: bool = False,
                 **options: Any) -> None:
        defaults = dict(lr=lr, alpha=alpha, eps=eps, weight_decay=weight_decay, momentum=momentum,
                        centered=centered, maximize=maximize)
        super().__init__(params, defaults, **options)

    def check_group(self, group: dict[str, Any]) -> None:
        super().check_group(group)
        for key in ("alpha", "eps", "weight_decay", "momentum"):
            group[key] = check_float(group[key], key, low=0.0)
        group["centered"] = check_bool(group["centered"], "centered")
        group["maximize"] = check_bool(group["maximize"], "maximize")

    def required_states(self) -> set[str]:
        needed = {"square_avg"}
        if any(g["momentum"] > 0 for g in self.param_groups):
            needed.add("momentum_buffer")
        if any(g["centered"] for g in self.param_groups):
            needed.add("grad_avg")
        return needed

    def group_hyper(self, group: dict[str, Any]) -> list[float]:
        return [group["lr"], group["alpha"], 1.0 - group["alpha"], group["eps"], group["weight_decay"],
                group["momentum"], group["centered"], group["maximize"]]
