"""sopt.losses: loss functions that reduce on the GPU and seed the backward pass (kernels in slang_lib/losses/);
registered in the ``"loss"`` family of :mod:`sopt.config.registry` (otypes L2, L1, Huber, RelativeL2)."""

from sopt.losses.regression import (HuberConfig, HuberLoss, L1Config, L1Loss, L2Config, Loss, MSELoss, RelativeL2Config,
                                   RelativeL2Loss)
from sopt.losses.value import LossValue

__all__ = ["HuberConfig", "HuberLoss", "L1Config", "L1Loss", "L2Config", "Loss", "LossValue", "MSELoss", "RelativeL2Config",
           "RelativeL2Loss"]
