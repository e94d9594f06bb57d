"""Optimisers with torch.optim's names, defaults and update rules, each a Slang kernel over one flat arena.

Each is registered in the ``"optimizer"`` family of :mod:`sopt.config.registry` with its config model
(tiny-cuda-nn's keys: ``{"otype": "Adam", "learning_rate": ..., "beta1": ...}``). Names load on first use
(:mod:`sopt.utils.lazy_exports`): ``from sopt.optim import Adam`` imports no other optimiser."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sopt.utils.lazy_exports import lazy_exports

_EXPORTS = {
    "lr_scheduler": "sopt.optim.lr_scheduler", "Adagrad": "sopt.optim.adagrad", "AdagradConfig": "sopt.optim.adagrad",
    "Adam": "sopt.optim.adam", "AdamConfig": "sopt.optim.adam", "AdamW": "sopt.optim.adamw",
    "AdamWConfig": "sopt.optim.adamw", "Lion": "sopt.optim.lion", "LionConfig": "sopt.optim.lion",
    "Optimizer": "sopt.optim.optimizer", "RMSprop": "sopt.optim.rmsprop", "RMSpropConfig": "sopt.optim.rmsprop",
    "SGD": "sopt.optim.sgd", "SGDConfig": "sopt.optim.sgd",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

if TYPE_CHECKING:
    from sopt.optim import lr_scheduler
    from sopt.optim.adagrad import Adagrad, AdagradConfig
    from sopt.optim.adam import Adam, AdamConfig
    from sopt.optim.adamw import AdamW, AdamWConfig
    from sopt.optim.lion import Lion, LionConfig
    from sopt.optim.optimizer import Optimizer
    from sopt.optim.rmsprop import RMSprop, RMSpropConfig
    from sopt.optim.sgd import SGD, SGDConfig
