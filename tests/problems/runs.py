"""What the problem tests share: interrupting a run, reading its metrics, calling the ``sopt`` command in-process."""

from __future__ import annotations

import json
import pathlib
from typing import Any

import pytest

from sopt.experiments.cli import main
from sopt.train import Callback


class Interrupt(Callback):
    """Stops a run (an exception, as a crash would) on the metrics step ``at``, after its checkpoint and loggers."""

    order = 90

    def __init__(self, at: int) -> None:
        super().__init__(None)
        self.at = at

    def on_metrics(self, trainer: Any, metrics: dict[str, Any]) -> None:
        if trainer.step == self.at:
            raise KeyboardInterrupt


def records(path: pathlib.Path) -> list[dict]:
    """metrics.jsonl's records without their timings."""
    timing = ("time_s", "steps_per_s")
    return [{k: v for k, v in json.loads(line).items() if k not in timing}
            for line in path.read_text(encoding="utf-8").splitlines()]


def run_cli(argv: list[str], capsys: pytest.CaptureFixture) -> tuple[int, str, str]:
    """``sopt ARGV`` (sopt.experiments.cli.main) in this process: (exit status, stdout, stderr); argparse's exits
    count."""
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def run_problem(problem: type, argv: list[str], capsys: pytest.CaptureFixture) -> tuple[int, str, str]:
    """``sopt run --problem NAME ARGV`` in this process (a config file in ``argv`` needs no ``problem`` key)."""
    return run_cli(["run", "--problem", problem.name, *argv], capsys)
