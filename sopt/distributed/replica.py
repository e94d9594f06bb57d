"""Training on a rank other than 0: the same problem, Trainer and steps as rank 0, and no files.

Rank 0 runs a run as one process does (:mod:`sopt.experiments.runner`: the run directory, its lock, metrics,
checkpoints, pictures, summary). Every other rank builds the same problem from the same config, restores the same
checkpoint when the run is resumed, and trains in step with rank 0 through the Trainer's data-parallel hook;
it keeps the problem's own callbacks (an evaluation, early stopping), whose results are the same on every rank as
the parameters are, so every rank takes the same decisions.
"""

from __future__ import annotations

import os
import pathlib
import signal
from typing import Any

from sopt.train import Trainer
from sopt.train.stop_signals import handling_stop_signals


def train_replica(problem: Any, data_parallel: Any, checkpoint: pathlib.Path | None = None) -> Any:
    """Train ``problem`` (a ``sopt run`` Problem built from its validated config) to ``config.steps`` on this rank,
    from ``checkpoint`` (rank 0's, when the run is resumed and has one) or step 0; returns the TrainResult.

    SIGINT and SIGTERM ask for a stop, which every rank makes after the same step (the stop agreement)."""
    config = problem.config
    parts = dict(problem.trainer_parts())
    own = list(parts.pop("callbacks", []))
    trainer = Trainer(**parts, callbacks=own, log_every=config.log_every, progress=False,
                      data_parallel=data_parallel)
    if checkpoint is not None and os.path.lexists(checkpoint):
        trainer.restore(str(checkpoint), steps=config.steps)

    def ask_stop(signum: int, frame: Any) -> None:
        trainer.stop(f"interrupted by {signal.Signals(signum).name}", from_outside=True)

    with handling_stop_signals(ask_stop):
        return trainer.fit(config.steps)
