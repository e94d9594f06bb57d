"""Learning-rate schedules with torch.optim.lr_scheduler's names, arguments and values, plus WarmupCosineLR.

Each writes ``group["lr"]`` of a sopt optimiser's param groups (OneCycleLR also ``momentum`` / ``betas[0]``);
the optimiser reads it afresh at every step, so no kernel is recompiled.
"""

from sopt.optim.lr_scheduler.base import LRScheduler
from sopt.optim.lr_scheduler.chained import ChainedScheduler
from sopt.optim.lr_scheduler.constant import ConstantLR
from sopt.optim.lr_scheduler.cosine import CosineAnnealingLR
from sopt.optim.lr_scheduler.exponential import ExponentialLR
from sopt.optim.lr_scheduler.linear import LinearLR
from sopt.optim.lr_scheduler.multistep import MultiStepLR
from sopt.optim.lr_scheduler.one_cycle import OneCycleLR
from sopt.optim.lr_scheduler.plateau import ReduceLROnPlateau
from sopt.optim.lr_scheduler.sequential import SequentialLR
from sopt.optim.lr_scheduler.step import StepLR
from sopt.optim.lr_scheduler.warmup_cosine import WarmupCosineLR

__all__ = ["ChainedScheduler", "ConstantLR", "CosineAnnealingLR", "ExponentialLR", "LRScheduler", "LinearLR",
           "MultiStepLR", "OneCycleLR", "ReduceLROnPlateau", "SequentialLR", "StepLR", "WarmupCosineLR"]
