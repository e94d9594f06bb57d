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


def assert_bad_config_refused(problem: type, override: dict, expected: str, tmp_path: pathlib.Path,
                              capsys: pytest.CaptureFixture) -> None:
    """``override`` as a config file through ``sopt run``: exit 2, one stderr line starting ``error: config`` that
    contains ``expected``, and no output folder."""
    config_file = tmp_path / "bad.json"
    config_file.write_text(json.dumps(override), encoding="utf-8")
    code, _, stderr = run_problem(problem, [str(config_file), "--out", str(tmp_path / "out")], capsys)
    assert code == 2
    lines = stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: config") and expected in lines[0], lines
    assert not (tmp_path / "out").exists()


def assert_resume_equals_uninterrupted(problem: type, config_file: pathlib.Path, tmp_path: pathlib.Path,
                                       capsys: pytest.CaptureFixture, at: int) -> None:
    """``config_file`` run whole with ``sopt run``, and run again stopped on metrics step ``at`` (an exception, as a
    crash) then finished with ``sopt resume``: the same result.json text and metrics records."""
    from problems.fitting import load_config, run
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    code, _, stderr = run_problem(problem, [str(config_file), "--out", str(whole), "--no-progress"], capsys)
    assert code == 0, stderr
    with pytest.raises(KeyboardInterrupt):
        run(problem, load_config(problem.schema, config_file), cut, progress=False, callbacks=[Interrupt(at)])
    code, _, stderr = run_cli(["resume", str(cut), "--no-progress"], capsys)
    assert code == 0, stderr
    assert (cut / "result.json").read_text(encoding="utf-8") == (whole / "result.json").read_text(encoding="utf-8")
    assert records(cut / "metrics.jsonl") == records(whole / "metrics.jsonl")
