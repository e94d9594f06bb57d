"""Adagrad (Duchi et al. 2011), torch.optim.Adagrad's semantics. Kernel: slang_lib/optim/adagrad.slang."""

from __future__ import annotations

from typing import Any

from sopt.config.registry import register
from sopt.runtime.kernel import Kernel
from sopt.optim.hyperparameter import MAXIMIZE, Hyperparameter, config_model, epsilon, learning_rate, weight_decay
from sopt.optim.optimizer import Optimizer

HYPERPARAMETERS = (
    learning_rate(1e-2, 0.01, "parameter units per step at the first step's gradient"),
    Hyperparameter("lr_decay", 0.0, "the lr at step t is learning_rate / (1 + (t - 1) lr_decay) (per step)",
                   config_key="lr_decay", config_bounds=(("ge", 0.0), ("le", 1e3))),
    weight_decay(),
    Hyperparameter("initial_accumulator_value", 0.0, "start of the sum of squared gradients (gradient units^2)",
                   config_key="initial_accumulator_value", config_bounds=(("ge", 0.0), ("le", 1e30))),
    epsilon(1e-10, "added to the root of the sum (gradient units)"),
    MAXIMIZE,
)


class AdagradConfig(config_model("Adagrad", HYPERPARAMETERS)):   # type: ignore[misc]
    """Adagrad (torch.optim.Adagrad's update)."""


@register("optimizer", "Adagrad", AdagradConfig)
class Adagrad(Optimizer):
    r"""Adagrad, torch.optim.Adagrad's update at step t::

        g   = -g if maximize;  g += weight_decay * p
        clr = lr / (1 + (t - 1) * lr_decay)
        s  += g^2                        (s starts at initial_accumulator_value)
        p  -= clr * g / (sqrt(s) + eps)

    ``Adagrad(params, lr=1e-2, lr_decay=0.0, weight_decay=0.0, initial_accumulator_value=0.0, eps=1e-10,
    maximize=False)``. State per element: ``sum``.
    """

    hyperparameters = HYPERPARAMETERS
    update_kernel = Kernel("optim/adagrad", "adagrad_step")
    state_names = ("sum",)

    def state_fill(self, name: str, group: dict[str, Any]) -> float:
        return float(group["initial_accumulator_value"])
