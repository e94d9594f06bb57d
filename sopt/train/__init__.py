"""Training loops on the GPU: a Trainer recording each step into one command buffer, a GPU batch sampler,
and callbacks (evaluation, JSONL metrics, early stopping, atomic checkpoints). Names load on first use
(:mod:`sopt.utils.lazy_exports`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sopt.utils.lazy_exports import lazy_exports


__getattr__, __dir__ = lazy_exports(__name__)

if TYPE_CHECKING:
    from sopt.train.batch_sampler import Batch, BatchSampler
    from sopt.train.callback import Callback
    from sopt.train.checkpointing import Checkpoint
    from sopt.train.early_stopping import EarlyStopping
    from sopt.train.evaluate import Evaluate
    from sopt.train.jsonl_logger import JSONLLogger
    from sopt.train.trainer import NonFiniteError, SupervisedObjective, Trainer, TrainResult, loss_scalar
