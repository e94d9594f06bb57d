"""RMSprop (Hinton), torch.optim.RMSprop's semantics. Kernel: slang_lib/optim/rmsprop.slang."""

from __future__ import annotations

from typing import Any

from sopt.config.registry import register
from sopt.runtime.kernel import Kernel
from sopt.optim.hyperparameter import MAXIMIZE, Hyperparameter, config_model, epsilon, learning_rate, weight_decay
from sopt.optim.optimizer import Optimizer

HYPERPARAMETERS = (
    learning_rate(1e-2, 0.01, "parameter units per step at a steady gradient"),
    Hyperparameter("alpha", 0.99, "decay per step of the squared gradient's running mean", config_key="alpha",
                   config_bounds=(("ge", 0.0), ("lt", 1.0))),
    epsilon(1e-8, "added to the root of the running mean (gradient units)"),
    weight_decay(),
    Hyperparameter("momentum", 0.0, "momentum factor (0: none)", config_key="momentum",
                   config_bounds=(("ge", 0.0), ("lt", 1.0))),
    Hyperparameter("centered", False, "divide by the gradient's running variance instead of its mean square",
                   config_key="centered"),
    MAXIMIZE,
)


class RMSpropConfig(config_model("RMSprop", HYPERPARAMETERS)):   # type: ignore[misc]
    """RMSprop (torch.optim.RMSprop's update)."""


@register("optimizer", "RMSprop", RMSpropConfig)
class RMSprop(Optimizer):
    r"""RMSprop, torch.optim.RMSprop's update::

        g   = -g if maximize;  g += weight_decay * p
        s   = alpha * s + (1 - alpha) * g^2
        avg = sqrt(s - ga^2) + eps  with ga = alpha * ga + (1 - alpha) * g   (centered)
        avg = sqrt(s) + eps                                                  (otherwise)
        buf = momentum * buf + g / avg;  p -= lr * buf     (momentum > 0)
        p  -= lr * g / avg                                 (otherwise)

    ``RMSprop(params, lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0.0, momentum=0.0, centered=False,
    maximize=False)``. State per element: ``square_avg``, ``momentum_buffer`` (momentum > 0), ``grad_avg``
    (centered).
    """

    hyperparameters = HYPERPARAMETERS
    update_kernel = Kernel("optim/rmsprop", "rmsprop_step")
    state_names = ("square_avg", "momentum_buffer", "grad_avg")

    def required_states(self) -> set[str]:
        needed = {"square_avg"}
        if any(g["momentum"] > 0 for g in self.param_groups):
            needed.add("momentum_buffer")
        if any(g["centered"] for g in self.param_groups):
            needed.add("grad_avg")
        return needed

    def kernel_fields(self, group: dict[str, Any]) -> dict[str, float | bool]:
        return {**super().kernel_fields(group), "one_minus_alpha": 1.0 - group["alpha"]}   # in double precision
