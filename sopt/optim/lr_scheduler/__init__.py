"""Learning-rate schedules with torch.optim.lr_scheduler's names, arguments and values, plus WarmupCosineLR.

Each writes ``group["lr"]`` of a sopt optimiser's param groups (OneCycleLR also ``momentum`` / ``betas[0]``);
the optimiser reads it afresh at every step, so no kernel is recompiled. ConstantLR, ExponentialLR, StepLR and
WarmupCosineLR are registered in the ``"schedule"`` family of :mod:`sopt.config.registry` (otypes ``Constant``,
``Exponential``, ``Step``, ``WarmupCosine``), built with the optimiser and the run's number of steps.
"""

from sopt.optim.lr_scheduler.base import LRScheduler
from sopt.optim.lr_scheduler.chained import ChainedScheduler
from sopt.optim.lr_scheduler.constant import ConstantConfig, ConstantLR
from sopt.optim.lr_scheduler.cosine import CosineAnnealingLR
from sopt.optim.lr_scheduler.exponential import ExponentialConfig, ExponentialLR
from sopt.optim.lr_scheduler.linear import LinearLR
from sopt.optim.lr_scheduler.multistep import MultiStepLR
from sopt.optim.lr_scheduler.one_cycle import OneCycleLR
from sopt.optim.lr_scheduler.plateau import ReduceLROnPlateau
from sopt.optim.lr_scheduler.sequential import SequentialLR
from sopt.optim.lr_scheduler.step import StepConfig, StepLR
from sopt.optim.lr_scheduler.warmup_cosine import WarmupCosineConfig, WarmupCosineLR

__all__ = ["ChainedScheduler", "ConstantConfig", "ConstantLR", "CosineAnnealingLR", "ExponentialConfig", "ExponentialLR",
           "LRScheduler", "LinearLR", "MultiStepLR", "OneCycleLR", "ReduceLROnPlateau", "SequentialLR", "StepConfig",
           "StepLR", "WarmupCosineConfig", "WarmupCosineLR"]
