"""Adagrad (Duchi et al. 2011), torch.optim.Adagrad's semantics. Kernel: slang_lib/optim/adagrad.slang."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from sopt.config.registry import ComponentConfig, register
from sopt.optim.optimizer import (Optimizer, double_buffer_field, learning_rate_field, max_grad_norm_field,
                                  skip_nonfinite_field, weight_decay_field)
from sopt.validation import check_bool, check_float


class AdagradConfig(ComponentConfig):
    """Adagrad (torch.optim.Adagrad's update)."""

    otype: Literal["Adagrad"] = "Adagrad"
    learning_rate: float = learning_rate_field(0.01, "parameter units per step at the first step's gradient")
    lr_decay: float = Field(0.0, ge=0.0, le=1e3, description="the lr at step t is learning_rate / (1 + (t - 1) "
                                                             "lr_decay) (per step)")
    initial_accumulator_value: float = Field(0.0, ge=0.0, le=1e30, description="start of the sum of squared "
                                                                               "gradients (gradient units^2)")
    epsilon: float = Field(1e-10, gt=0.0, le=1.0, description="added to the root of the sum (gradient units)")
    weight_decay: float = weight_decay_field()
    max_grad_norm: float | None = max_grad_norm_field()
    skip_nonfinite: bool = skip_nonfinite_field()
    double_buffer: bool = double_buffer_field()


@register("optimizer", "Adagrad", AdagradConfig)
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

    @staticmethod
    def config_to_options(config: Any) -> dict[str, Any]:
        return dict(lr=config.learning_rate, lr_decay=config.lr_decay, eps=config.epsilon,
                    initial_accumulator_value=config.initial_accumulator_value, weight_decay=config.weight_decay)

    @staticmethod
    def options_to_config(group: dict[str, Any]) -> dict[str, Any]:
        return dict(learning_rate=group["lr"], lr_decay=group["lr_decay"], epsilon=group["eps"],
                    initial_accumulator_value=group["initial_accumulator_value"], weight_decay=group["weight_decay"])

    def state_fill(self, name: str, group: dict[str, Any]) -> float:
        return float(group["initial_accumulator_value"])

    def group_hyper(self, group: dict[str, Any]) -> list[float]:
        return [group["lr"], group["lr_decay"], group["eps"], group["weight_decay"], group["maximize"]]
