"""Adam (Kingma & Ba 2015) with torch.optim.Adam's semantics. Kernel: slang_lib/optim/adam.slang."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from sopt.config.registry import ComponentConfig, register
from sopt.optim.optimizer import (Optimizer, check_betas, double_buffer_field, learning_rate_field, log_beta,
                                  max_grad_norm_field, skip_nonfinite_field, weight_decay_field)
from sopt.validation import check_bool, check_float


class AdamConfig(ComponentConfig):
    """Adam (torch.optim.Adam's update) with tiny-cuda-nn's keys."""

    otype: Literal["Adam"] = "Adam"
    learning_rate: float = learning_rate_field(0.05, "parameter units per step at a steady gradient")
    beta1: float = Field(0.9, ge=0.0, lt=1.0, description="decay per step of the gradient's running mean")
    beta2: float = Field(0.99, ge=0.0, lt=1.0, description="decay per step of the squared gradient's running mean")
    epsilon: float = Field(1e-8, gt=0.0, le=1.0, description="added to the root of the second moment "
                                                              "(gradient units)")
    weight_decay: float = weight_decay_field()
    amsgrad: bool = Field(False, description="divide by the largest second moment so far (AMSGrad)")
    max_grad_norm: float | None = max_grad_norm_field()
    skip_nonfinite: bool = skip_nonfinite_field()
    double_buffer: bool = double_buffer_field()


@register("optimizer", "Adam", AdamConfig)
class Adam(Optimizer):
    r"""Adam, torch.optim.Adam's update at step t (g clipped if ``max_grad_norm``)::

        g    = -g if maximize;  g += weight_decay * p
        m    = beta1 * m + (1 - beta1) * g
        v    = beta2 * v + (1 - beta2) * g^2
        vmax = max(vmax, v)                          (amsgrad; raw second moment, as torch)
        p   -= lr / (1 - beta1^t) * m / (sqrt(v or vmax) / sqrt(1 - beta2^t) + eps)

    State per element: ``exp_avg`` (m), ``exp_avg_sq`` (v), ``max_exp_avg_sq`` (vmax, with amsgrad).
    """

    kernel_module = "optim/adam"
    kernel_entry = "adam_step"
    state_names = ("exp_avg", "exp_avg_sq", "max_exp_avg_sq")
    decoupled_weight_decay = False

    def __init__(self, params: Any, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, amsgrad: bool = False, maximize: bool = False, **options: Any) -> None:
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, amsgrad=amsgrad, maximize=maximize)
        super().__init__(params, defaults, **options)

    def check_group(self, group: dict[str, Any]) -> None:
        super().check_group(group)
        group["betas"] = check_betas(group["betas"])
        group["eps"] = check_float(group["eps"], "eps", low=0.0)
        group["weight_decay"] = check_float(group["weight_decay"], "weight_decay", low=0.0)
        group["amsgrad"] = check_bool(group["amsgrad"], "amsgrad")
        group["maximize"] = check_bool(group["maximize"], "maximize")

    def required_states(self) -> set[str]:
        needed = {"exp_avg", "exp_avg_sq"}
        if any(g["amsgrad"] for g in self.param_groups):
            needed.add("max_exp_avg_sq")
        return needed

    @staticmethod
    def config_to_options(config: Any) -> dict[str, Any]:
        return dict(lr=config.learning_rate, betas=(config.beta1, config.beta2), eps=config.epsilon,
                    weight_decay=config.weight_decay, amsgrad=config.amsgrad)

    @staticmethod
    def options_to_config(group: dict[str, Any]) -> dict[str, Any]:
        return dict(learning_rate=group["lr"], beta1=group["betas"][0], beta2=group["betas"][1], epsilon=group["eps"],
                    weight_decay=group["weight_decay"], amsgrad=group["amsgrad"])

    def group_hyper(self, group: dict[str, Any]) -> list[float]:
        beta1, beta2 = group["betas"]
        return [group["lr"], beta1, beta2, 1.0 - beta1, 1.0 - beta2, log_beta(beta1), log_beta(beta2), group["eps"],
                group["weight_decay"], self.decoupled_weight_decay, group["amsgrad"], group["maximize"]]
