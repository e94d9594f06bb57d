"""Lion (Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms") with lion-pytorch's conventions.
Kernel: slang_lib/optim/lion.slang."""

from __future__ import annotations

from sopt.config.registry import register
from sopt.runtime.kernel import Kernel
from sopt.optim.hyperparameter import betas, config_model, learning_rate, weight_decay
from sopt.optim.optimizer import Optimizer

HYPERPARAMETERS = (
    learning_rate(1e-4, 1e-4, "parameter units per step (every element moves by exactly lr, plus the decay)"),
    betas((0.9, 0.99), (0.9, 0.99), ("weight of the running mean against the gradient in the update's sign",
                                     "decay per step of the gradient's running mean")),
    weight_decay(0.0, "decoupled decay: p *= 1 - learning_rate * weight_decay before each update (per unit of "
                      "learning_rate)"),
)


class LionConfig(config_model("Lion", HYPERPARAMETERS)):   # type: ignore[misc]
    """Lion (EvoLved Sign Momentum), lion-pytorch's update."""


@register("optimizer", "Lion", LionConfig)
class Lion(Optimizer):
    r"""Lion, the sign of an interpolated momentum, with decoupled weight decay (lion-pytorch's ``Lion``).

    With gradient :math:`g_t` (clipped if ``max_grad_norm``) and running mean :math:`m_{t-1}` (0 at the start),
    a step is

    .. math::

        c_t &= \operatorname{sign}(\beta_1 m_{t-1} + (1 - \beta_1) g_t) \\
        p_t &= p_{t-1} (1 - \eta \lambda) - \eta c_t \\
        m_t &= \beta_2 m_{t-1} + (1 - \beta_2) g_t

    with :math:`\eta` the learning rate ``lr`` and :math:`\lambda` ``weight_decay``. Every element moves by
    exactly ``lr`` (or not at all where the sign is 0), so Lion wants an ``lr`` 3-10x smaller than AdamW's and a
    ``weight_decay`` as many times larger. Its state is one running mean per element (``exp_avg``), half of
    Adam's.

    ``Lion(params, lr=1e-4, betas=(0.9, 0.99), weight_decay=0.0)``; each beta in [0, 1).

    References:
        Chen et al., 2023: https://arxiv.org/abs/2302.06675
    """

    hyperparameters = HYPERPARAMETERS
    update_kernel = Kernel("optim/lion", "lion_step")
    state_names = ("exp_avg",)
