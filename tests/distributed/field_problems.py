"""Problems for the data-parallel tests: the neural field under names of their own, one that interrupts its run
from inside (rank 0 sends SIGTERM to the launcher on a given metrics step, as a user's kill would) and one whose
rank 1 fails on a given metrics step. Run as ``--problem tests.distributed.field_problems:Class`` with the
checkout on PYTHONPATH."""

from __future__ import annotations

import os
import signal
from typing import Any

from problems.neural_field_image.config import NeuralFieldImageConfig
from problems.neural_field_image.problem import NeuralFieldImage
from sopt.train import Callback

STOP_AT = "FIELD_STOP_AT"   # metrics step on which rank 0 sends SIGTERM to its launcher
FAIL_AT = "FIELD_FAIL_AT"   # metrics step on which rank 1 raises


class _AtStep(Callback):
    order = 95   # after the checkpoint and the summary of its step

    def __init__(self, variable: str, rank: int, act: Any) -> None:
        super().__init__(None)
        self.step = int(os.environ.get(variable, "0"))
        self.rank, self.act = rank, act

    def on_metrics(self, trainer: Any, metrics: dict[str, Any]) -> None:
        if trainer.step == self.step and int(os.environ.get("RANK", "0")) == self.rank:
            self.act()


def _signal_launcher() -> None:
    os.kill(os.getppid(), signal.SIGTERM)


def _fail() -> None:
    raise RuntimeError("rank 1 broke on purpose")


class SignallingFieldConfig(NeuralFieldImageConfig, problem="signalling_field"):
    pass


class SignallingField(NeuralFieldImage):
    """neural_field_image whose rank 0 sends SIGTERM to its launcher on metrics step $FIELD_STOP_AT."""

    schema = SignallingFieldConfig
    description = "neural_field_image, interrupted from inside (tests)"

    def trainer_parts(self) -> dict[str, Any]:
        parts = super().trainer_parts()
        return {**parts, "callbacks": [*parts["callbacks"], _AtStep(STOP_AT, 0, _signal_launcher)]}


class FailingFieldConfig(NeuralFieldImageConfig, problem="failing_field"):
    pass


class FailingField(NeuralFieldImage):
    """neural_field_image whose rank 1 raises on metrics step $FIELD_FAIL_AT."""

    schema = FailingFieldConfig
    description = "neural_field_image whose rank 1 fails (tests)"

    def trainer_parts(self) -> dict[str, Any]:
        parts = super().trainer_parts()
        return {**parts, "callbacks": [*parts["callbacks"], _AtStep(FAIL_AT, 1, _fail)]}
