"""Optimisers with torch.optim's names, defaults and update rules, each a Slang kernel over one flat arena.

Each is registered in the ``"optimizer"`` family of :mod:`sopt.config.registry` with its config model
(tiny-cuda-nn's keys: ``{"otype": "Adam", "learning_rate": ..., "beta1": ...}``). Names load on first use
(:mod:`sopt.utils.lazy_exports`): ``from sopt.optim import Adam`` imports no other optimiser."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sopt.utils.lazy_exports import lazy_exports


__getattr__, __dir__ = lazy_exports(__name__)

if TYPE_CHECKING:
    from sopt.optim import lr_scheduler
    from sopt.optim.adagrad import Adagrad, AdagradConfig
    from sopt.optim.adam import Adam, AdamConfig
    from sopt.optim.adamw import AdamW, AdamWConfig
    from sopt.optim.lion import Lion, LionConfig
    from sopt.optim.optimizer import Optimizer
    from sopt.optim.rmsprop import RMSprop, RMSpropConfig
    from sopt.optim.sgd import SGD, SGDConfig
