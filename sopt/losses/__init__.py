"""sopt.losses: loss functions that reduce on the GPU and seed the backward pass (kernels in slang_lib/losses/)."""

from sopt.losses.regression import HuberLoss, L1Loss, Loss, MSELoss, RelativeL2Loss
from sopt.losses.value import LossValue

__all__ = ["HuberLoss", "L1Loss", "Loss", "LossValue", "MSELoss", "RelativeL2Loss"]
