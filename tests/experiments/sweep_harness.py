"""``sopt sweep`` as a process whose trials are fake_trial.py runs: ``python sweep_harness.py SWEEP ARGS...``.

:func:`fake_trial_command` is the trial command the in-process tests give to ``sweep_main`` too."""

from __future__ import annotations

import pathlib
import sys
from typing import Sequence

FAKE_TRIAL = pathlib.Path(__file__).with_name("fake_trial.py")


def fake_trial_command(action: str, trial_dir: pathlib.Path, config: str, overrides: Sequence[str]) -> list[str]:
    """sopt_trial_command's argv with ``-m sopt`` replaced by fake_trial.py."""
    from sopt.experiments.sweep import sopt_trial_command
    argv = sopt_trial_command(action, trial_dir, config, overrides)
    assert argv[1:3] == ["-m", "sopt"]
    return [argv[0], str(FAKE_TRIAL), *argv[3:]]


if __name__ == "__main__":
    from sopt.experiments.sweep import sweep_main
    sys.exit(sweep_main(sys.argv[1:], trial_command=fake_trial_command))
