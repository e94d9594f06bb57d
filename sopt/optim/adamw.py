"""AdamW (Loshchilov & Hutter 2019) with torch.optim.AdamW's semantics. Kernel: slang_lib/optim/adam.slang."""

from __future__ import annotations

from typing import Any, Literal

from sopt.config.registry import register
from sopt.optim.adam import Adam, AdamConfig
from sopt.optim.optimizer import weight_decay_field


class AdamWConfig(AdamConfig):
    """AdamW: Adam with decoupled weight decay."""

    otype: Literal["AdamW"] = "AdamW"   # type: ignore[assignment]
    weight_decay: float = weight_decay_field(1e-2, "decoupled decay: p *= 1 - learning_rate * weight_decay before "
                                                   "each update (per unit of learning_rate)")


@register("optimizer", "AdamW", AdamWConfig)
class AdamW(Adam):
    r"""Adam with decoupled weight decay: ``p *= 1 - lr * weight_decay`` first, then Adam's update without the
    L2 term. Default ``weight_decay=1e-2`` as torch. Shares Adam's kernel (``decoupled = 1``)."""

    decoupled_weight_decay = True

    def __init__(self, params: Any, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 1e-2, amsgrad: bool = False, maximize: bool = False, **options: Any) -> None:
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, amsgrad=amsgrad,
                         maximize=maximize, **options)
