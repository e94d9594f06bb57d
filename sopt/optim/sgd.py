"""SGD with momentum and Nesterov momentum, torch.optim.SGD's semantics. Kernel: slang_lib/optim/sgd.slang."""

from __future__ import annotations

from typing import Any

from pydantic import model_validator

from sopt.config.registry import register
from sopt.runtime.kernel import Kernel
from sopt.optim.hyperparameter import MAXIMIZE, Hyperparameter, config_model, learning_rate, weight_decay
from sopt.optim.optimizer import Optimizer

HYPERPARAMETERS = (
    learning_rate(1e-3, 0.01, "parameter units per gradient unit"),
    Hyperparameter("momentum", 0.0, "momentum factor (0: plain gradient steps)", config_key="momentum",
                   config_bounds=(("ge", 0.0), ("lt", 1.0))),
    Hyperparameter("dampening", 0.0, "damping of the gradient added to the momentum buffer (torch's dampening)",
                   low=None),
    weight_decay(),
    Hyperparameter("nesterov", False, "Nesterov momentum (needs momentum > 0)", config_key="nesterov"),
    MAXIMIZE,
)


class SGDConfig(config_model("SGD", HYPERPARAMETERS)):   # type: ignore[misc]
    """SGD with optional (Nesterov) momentum (torch.optim.SGD's update, no dampening)."""

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

    ``SGD(params, lr=1e-3, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False, maximize=False)``.
    State per element: ``momentum_buffer`` (when momentum != 0).
    """

    hyperparameters = HYPERPARAMETERS
    update_kernel = Kernel("optim/sgd", "sgd_step")
    state_names = ("momentum_buffer",)

    def check_group(self, group: dict[str, Any]) -> None:
        super().check_group(group)
        momentum, dampening = group["momentum"], group["dampening"]
        if group["nesterov"] and (momentum <= 0.0 or dampening != 0.0):
            raise ValueError(f"nesterov momentum requires momentum > 0 and dampening = 0, got momentum={momentum}, "
                             f"dampening={dampening}")

    def required_states(self) -> set[str]:
        return {"momentum_buffer"} if any(g["momentum"] != 0 for g in self.param_groups) else set()
