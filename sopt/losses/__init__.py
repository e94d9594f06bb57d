"""sopt.losses: loss functions that reduce on the GPU and seed the backward pass (kernels in slang_lib/losses/);
registered in the ``"loss"`` family of :mod:`sopt.config.registry` (otypes L2, L1, Huber, RelativeL2). Names load
on first use (:mod:`sopt.utils.lazy_exports`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sopt.utils.lazy_exports import lazy_exports


__getattr__, __dir__ = lazy_exports(__name__)

if TYPE_CHECKING:
    from sopt.losses.regression import (HuberConfig, HuberLoss, L1Config, L1Loss, L2Config, Loss, MSELoss,
                                        RelativeL2Config, RelativeL2Loss)
    from sopt.losses.value import LossValue
