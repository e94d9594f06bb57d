"""RMSprop (Hinton), torch.optim.RMSprop's semantics. Kernel: slang_lib/optim/rmsprop.slang."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from sopt.config.registry import ComponentConfig, register
from sopt.optim.optimizer import (Optimizer, double_buffer_field, learning_rate_field, max_grad_norm_field,
                                  skip_nonfinite_field, weight_decay_field)
from sopt.validation import check_bool, check_float


class RMSpropConfig(ComponentConfig):
    """RMSprop (torch.optim.RMSprop's update)."""

    otype: Literal["RMSprop"] = "RMSprop"
    learning_rate: float = learning_rate_field(0.01, "parameter units per step at a steady gradient")
    alpha: float = Field(0.99, ge=0.0, lt=1.0, description="decay per step of the squared gradient's running mean")
    epsilon: float = Field(1e-8, gt=0.0, le=1.0, description="added to the root of the running mean (gradient "
                                                              "units)")
    momentum: float = Field(0.0, ge=0.0, lt=1.0, description="momentum factor (0: none)")
    centered: bool = Field(False, description="divide by the gradient's running variance instead of its mean "
                                              "square")
    weight_decay: float = weight_decay_field()
    max_grad_norm: float | None = max_grad_norm_field()
    skip_nonfinite: bool = skip_nonfinite_field()
    double_buffer: bool = double_buffer_field()


@register("optimizer", "RMSprop", RMSpropConfig)
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

    @staticmethod
    def config_to_options(config: Any) -> dict[str, Any]:
        return dict(lr=config.learning_rate, alpha=config.alpha, eps=config.epsilon, momentum=config.momentum,
                    centered=config.centered, weight_decay=config.weight_decay)

    @staticmethod
    def options_to_config(group: dict[str, Any]) -> dict[str, Any]:
        return dict(learning_rate=group["lr"], alpha=group["alpha"], epsilon=group["eps"], momentum=group["momentum"],
                    centered=group["centered"], weight_decay=group["weight_decay"])

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
