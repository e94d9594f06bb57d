"""Training loops on the GPU: a Trainer recording each step into one command buffer, a GPU batch sampler,
and callbacks (evaluation, JSONL metrics, early stopping, atomic checkpoints)."""

from sopt.train.batch_sampler import Batch, BatchSampler
from sopt.train.callback import Callback
from sopt.train.checkpointing import Checkpoint
from sopt.train.early_stopping import EarlyStopping
from sopt.train.evaluate import Evaluate
from sopt.train.jsonl_logger import JSONLLogger
from sopt.train.trainer import NonFiniteError, SupervisedObjective, Trainer, TrainResult, loss_scalar

__all__ = ["Batch", "BatchSampler", "Callback", "Checkpoint", "EarlyStopping", "Evaluate", "JSONLLogger",
           "NonFiniteError", "SupervisedObjective", "TrainResult", "Trainer", "loss_scalar"]
