"""Adam (Kingma & Ba 2015) with torch.optim.Adam's semantics. Kernel: slang_lib/optim/adam.slang."""

from __future__ import annotations

import math
from typing import Any

from sopt.config.registry import register
from sopt.runtime.kernel import Kernel
from sopt.optim.hyperparameter import (MAXIMIZE, Hyperparameter, betas, config_model, epsilon, learning_rate,
                                       weight_decay)
from sopt.optim.optimizer import Optimizer

HYPERPARAMETERS = (
    learning_rate(1e-3, 0.05, "parameter units per step at a steady gradient"),
    betas((0.9, 0.999), (0.9, 0.99), ("decay per step of the gradient's running mean",
                                      "decay per step of the squared gradient's running mean")),
    epsilon(1e-8, "added to the root of the second moment (gradient units)"),
    weight_decay(),
    Hyperparameter("amsgrad", False, "divide by the largest second moment so far (AMSGrad)", config_key="amsgrad"),
    MAXIMIZE,
    Hyperparameter("lazy", False, "leave elements whose gradient is exactly 0 this step untouched (values and moments; "
                   "torch.optim.SparseAdam's rule): a step then reads little more than the gradients of a hash "
                   "grid's table, most of whose rows a batch does not touch", config_key="lazy",
                   absent_from_old_state_dicts=True),
)


class AdamConfig(config_model("Adam", HYPERPARAMETERS)):   # type: ignore[misc]
    """Adam (torch.optim.Adam's update) with tiny-cuda-nn's keys."""


def log_beta(beta: float) -> float:
    """log(beta) in double precision for the kernels' bias corrections (a huge negative for beta = 0)."""
    return math.log(beta) if beta > 0.0 else -1e30


@register("optimizer", "Adam", AdamConfig)
class Adam(Optimizer):
    r"""Adam, torch.optim.Adam's update at step t (g clipped if ``max_grad_norm``)::

        g    = -g if maximize;  g += weight_decay * p
        m    = beta1 * m + (1 - beta1) * g
        v    = beta2 * v + (1 - beta2) * g^2
        vmax = max(vmax, v)                          (amsgrad; raw second moment, as torch)
        p   -= lr / (1 - beta1^t) * m / (sqrt(v or vmax) / sqrt(1 - beta2^t) + eps)

    ``Adam(params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, amsgrad=False, maximize=False,
    lazy=False)``. State per element: ``exp_avg`` (m), ``exp_avg_sq`` (v), ``max_exp_avg_sq`` (vmax, with amsgrad).

    ``lazy`` (per param group; config key ``lazy``): an element whose (clipped) gradient is exactly 0 this step
    keeps p, m, v and vmax as they were: no moment decay and no weight decay, L2 or decoupled. Every other
    element takes the update above with the global step t (steps applied by this optimiser) in the bias
    corrections: torch.optim.SparseAdam's rule, and tiny-cuda-nn's ``skip_zero_grad_non_matrix_params``
    except that tiny-cuda-nn counts steps per element. For tables of which a step touches few rows (a hash
    grid's): updated in place (``double_buffer=False`` or ``skip_nonfinite=False``), a float4 of four zero
    gradients is then not read beyond its gradient, nor written; double-buffered, it is copied to the other
    side. Make only the table lazy with a param group::

        Adam([{"params": grid.parameters(), "lazy": True}, {"params": mlp.parameters()}], lr=1e-2)
    """

    hyperparameters = HYPERPARAMETERS
    update_kernel = Kernel("optim/adam", "adam_step")
    has_lazy_kernels = True
    has_fold_kernels = True   # adam_step*_fold: HashGridEncoding's float16 sums converted in the update
    state_names = ("exp_avg", "exp_avg_sq", "max_exp_avg_sq")
    decoupled_weight_decay = False

    def required_states(self) -> set[str]:
        needed = {"exp_avg", "exp_avg_sq"}
        if any(g["amsgrad"] for g in self.param_groups):
            needed.add("max_exp_avg_sq")
        return needed

    def kernel_fields(self, group: dict[str, Any]) -> dict[str, float | bool]:
        # 1 - beta and log(beta) in double precision: the kernel's bias corrections need them exact
        beta1, beta2 = group["betas"]
        return {**super().kernel_fields(group), "one_minus_beta1": 1.0 - beta1, "one_minus_beta2": 1.0 - beta2,
                "log_beta1": log_beta(beta1), "log_beta2": log_beta(beta2),
                "decoupled": self.decoupled_weight_decay}
