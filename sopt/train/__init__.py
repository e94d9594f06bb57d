"""Training loops on the GPU: a Trainer recording each step into one command buffer, a GPU batch sampler,
and callbacks (evaluation, JSONL metrics, early stopping, atomic checkpoints). Names load on first use
(:mod:`sopt.utils.lazy_exports`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sopt.utils.lazy_exports import lazy_exports

_EXPORTS = {
    "Batch": "sopt.train.batch_sampler", "BatchSampler": "sopt.train.batch_sampler", "Callback": "sopt.train.callback",
    "Checkpoint": "sopt.train.checkpointing", "EarlyStopping": "sopt.train.early_stopping",
    "Evaluate": "sopt.train.evaluate", "JSONLLogger": "sopt.train.jsonl_logger",
    "NonFiniteError": "sopt.train.trainer", "SupervisedObjective": "sopt.train.trainer",
    "Trainer": "sopt.train.trainer", "TrainResult": "sopt.train.trainer", "loss_scalar": "sopt.train.trainer",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

if TYPE_CHECKING:
    from sopt.train.batch_sampler import Batch, BatchSampler
    from sopt.train.callback import Callback
    from sopt.train.checkpointing import Checkpoint
    from sopt.train.early_stopping import EarlyStopping
    from sopt.train.evaluate import Evaluate
    from sopt.train.jsonl_logger import JSONLLogger
    from sopt.train.trainer import NonFiniteError, SupervisedObjective, Trainer, TrainResult, loss_scalar
