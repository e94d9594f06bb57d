"""AdamW (Loshchilov & Hutter 2019) with torch.optim.AdamW's semantics. Kernel: slang_lib/optim/adam.slang."""

from __future__ import annotations

from sopt.config.registry import register
from sopt.optim.adam import HYPERPARAMETERS as ADAM_HYPERPARAMETERS
from sopt.optim.adam import Adam, AdamConfig
from sopt.optim.hyperparameter import config_model, replace

HYPERPARAMETERS = replace(ADAM_HYPERPARAMETERS, "weight_decay", default=1e-2,
                          doc="decoupled decay: p *= 1 - learning_rate * weight_decay before each update (per unit "
                              "of learning_rate)")


class AdamWConfig(config_model("AdamW", HYPERPARAMETERS, base=AdamConfig)):   # type: ignore[misc]
    """AdamW: Adam with decoupled weight decay."""


@register("optimizer", "AdamW", AdamWConfig)
class AdamW(Adam):
    r"""Adam with decoupled weight decay: ``p *= 1 - lr * weight_decay`` first, then Adam's update without the
    L2 term. Default ``weight_decay=1e-2`` as torch. Shares Adam's kernel (``decoupled = true``)."""

    hyperparameters = HYPERPARAMETERS
    decoupled_weight_decay = True
