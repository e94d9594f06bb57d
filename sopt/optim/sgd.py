"""SGD with momentum and Nesterov momentum, torch.optim.SGD's semantics. Kernel: slang_lib/optim/sgd.slang."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from sopt.config.registry import ComponentConfig, register
from sopt.optim.optimizer import (Optimizer, double_buffer_field, learning_rate_field, max_grad_norm_field,
                                  skip_nonfinite_field, weight_decay_field)
from sopt.validation import check_bool, check_float


class SGDConfig(ComponentConfig):
    """SGD with optional (Nesterov) momentum (torch.optim.SGD's update, no dampening)."""

    otype: Literal["SGD"] = "SGD"
    learning_rate: float = learning_rate_field(0.01, "parameter units per gradient unit")
    momentum: float = Field(0.0, ge=0.0, lt=1.0, description="momentum factor (0: plain gradient steps)")
    nesterov: bool = Field(False, description="Nesterov momentum (needs momentum > 0)")
    weight_decay: float = weight_decay_field()
    max_grad_norm: float | None = max_grad_norm_field()
    skip_nonfinite: bool = skip_nonfinite_field()
    double_buffer: bool = double_buffer_field()

    @model_validator(mode="after")
    def _nesterov_needs_momentum(self) -> "SGDConfig":
        if self.nesterov and self.momentum <= 0.0:
            raise ValueError("nesterov needs momentum > 0")
        return self


@register("optimizer", "SGD", SGDConfig)
class SGD(Optimizer):
    r"""Stochastic gradient descent, torch.optim.SGD's update::

        g   = -g if maximize;  g += weight_decay * p
        buf = g                                  at the first step
        buf = momentum * buf + (1 - dampening) * g   after
        g   = g + momentum * buf  if nesterov  else buf      (when momentum != 0)
        p  -= lr * g

    State per element: ``momentum_buffer`` (when momentum != 0).
    """

    kernel_module = "optim/sgd"
    kernel_entry = "sgd_step"
    state_names = ("momentum_buffer",)

    def __init__(self, params: Any, lr: float = 1e-3, momentum: float = 0.0, dampening: float = 0.0,
                 weight_decay: float = 0.0, nesterov: bool = False, maximize: bool = False, **options: Any) -> None:
        defaults = dict(lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay,
                        nesterov=nesterov, maximize=maximize)
        super().__init__(params, defaults, **options)

    def check_group(self, group: dict[str, Any]) -> None:
        super().check_group(group)
        momentum = group["momentum"] = check_float(group["momentum"], "momentum", low=0.0)
        dampening = group["dampening"] = check_float(group["dampening"], "dampening")
        group["weight_decay"] = check_float(group["weight_decay"], "weight_decay", low=0.0)
        group["nesterov"] = check_bool(group["nesterov"], "nesterov")
        group["maximize"] = check_bool(group["maximize"], "maximize")
        if group["nesterov"] and (momentum <= 0.0 or dampening != 0.0):
            raise ValueError(f"nesterov momentum requires momentum > 0 and dampening = 0, got momentum={momentum}, "
                             f"dampening={dampening}")

    @staticmethod
    def config_to_options(config: Any) -> dict[str, Any]:
        return dict(lr=config.learning_rate, momentum=config.momentum, nesterov=config.nesterov,
                    weight_decay=config.weight_decay)

    @staticmethod
    def options_to_config(group: dict[str, Any]) -> dict[str, Any]:
        return dict(learning_rate=group["lr"], momentum=group["momentum"], nesterov=group["nesterov"],
                    weight_decay=group["weight_decay"])

    def required_states(self) -> set[str]:
        return {"momentum_buffer"} if any(g["momentum"] != 0 for g in self.param_groups) else set()

    def group_hyper(self, group: dict[str, Any]) -> list[float]:
        return [group["lr"], group["momentum"], group["dampening"], group["weight_decay"], group["nesterov"],
                group["maximize"]]
