"""What the sweep tests share: fake_trial.py as the trial command, ``sopt sweep`` in this process or as its own
process (``python sweep_harness.py ARGS...``), and readers of the fake trials' event log and of sweep.json."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import time
from typing import Sequence

FAKE_TRIAL = pathlib.Path(__file__).with_name("fake_trial.py")
ROOT = pathlib.Path(__file__).resolve().parents[2]     # the checkout whose sopt the trial processes import


def fake_trial_command(action: str, trial_dir: pathlib.Path, config: str, overrides: Sequence[str]) -> list[str]:
    """sopt_trial_command's argv with ``-m sopt`` replaced by fake_trial.py."""
    from sopt.experiments.sweep import sopt_trial_command
    argv = sopt_trial_command(action, trial_dir, config, overrides)
    assert argv[1:3] == ["-m", "sopt"]
    return [argv[0], str(FAKE_TRIAL), *argv[3:]]


def fake_config(path: pathlib.Path, **keys) -> pathlib.Path:
    """A fake_trial.py config (TOML) at ``path`` with ``problem = "fake"`` and ``keys``."""
    lines = ['problem = "fake"'] + [f"{k} = {json.dumps(v)}" for k, v in keys.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def sweep(argv: Sequence[str]) -> tuple[int, list[str]]:
    """``sopt sweep ARGV`` in this process with fake trials: (exit status, the lines it logged)."""
    from sopt.experiments.sweep import sweep_main
    lines: list[str] = []
    code = sweep_main(list(argv), trial_command=fake_trial_command, check_trial=None, log=lines.append)
    return code, lines


def sweep_process(argv: Sequence[str], env: dict[str, str]) -> subprocess.Popen:
    """``sopt sweep ARGV`` with fake trials as a process of its own (stdout and stderr piped, text)."""
    return subprocess.Popen([sys.executable, __file__, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, **env})


def wait_for(predicate, timeout_s: float, what: str):
    """``predicate()``'s first true value, polled every 50 ms; AssertionError naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def events(log: pathlib.Path) -> list[dict]:
    """The fake trials' start/end events (FAKE_TRIAL_LOG)."""
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def starts(log: pathlib.Path) -> dict[str, list[str]]:
    """Trial directory name -> the actions ("run"/"resume") it was started with, in order."""
    out: dict[str, list[str]] = {}
    for e in events(log):
        if e["event"] == "start":
            out.setdefault(pathlib.Path(e["dir"]).name, []).append(e["action"])
    return out


def read_sweep(path: pathlib.Path) -> dict:
    return json.loads((path / "sweep.json").read_text())


def table(lines: Sequence[str]) -> list[str]:
    """The summary table's lines (from its header to the best line) out of a sweep's logged lines."""
    start = next(i for i, line in enumerate(lines) if line.startswith("id "))
    block = "\n".join(lines[start:]).splitlines()
    end = next((i for i, line in enumerate(block) if line.startswith("best:")), len(block) - 1)
    return block[:end + 1]


def loss(x: float, y: float, step: int) -> float:
    """fake_trial.py's loss at ``step``."""
    return (x + y) * 0.97 ** step


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    from sopt.experiments.sweep import sweep_main
    sys.exit(sweep_main(sys.argv[1:], trial_command=fake_trial_command, check_trial=None))
