"""``run``/``resume``: a fitting problem run from Python as ``sopt run``/``sopt resume`` run it
(sopt.experiments.runner; what the problem adds to the run, its optimiser, schedule, per-step parameter metrics,
result.json and pictures, is problems.fitting.problem's).

``run(Problem, config, out_dir)`` builds the problem, the optimiser and schedule of ``config`` and trains with
:class:`sopt.train.Trainer` (what ``sopt run`` does), writing into ``out_dir`` (which must be new or empty:
nothing is ever overwritten) the run directory of sopt.experiments.run_dir, with:

- ``config.toml``: the resolved config (every key), written before the first step;
- ``metrics.jsonl``: one record per metrics step (``step``, ``loss``, ``lr``, ..., and the problem's
  ``value/<name>`` and ``rel_error/<name>``), then an ``"event": "end"`` record;
- ``checkpoint.npz``: the trained (normalised) parameters, optimiser and schedule every ``checkpoint_every``
  steps and at the end (``sopt.load``);
- ``result.json``: ``{"true", "fitted", "uncertainty", "rel_error", "loss", "steps"}``, keyed by parameter name
  (``uncertainty``: one Gauss-Newton standard deviation per fitted value, for a problem with a forward model,
  FittingProblem.predict; a number's rel_error is |fitted - true| / |true|, an array's ||fitted - true||_2 /
  ||true||_2; ``loss`` is the loss at the fitted parameters);
- ``curves.png`` (loss and each parameter over the steps) and the problem's own pictures.

``resume(Problem, out_dir)`` continues an interrupted run in ``out_dir``: it reloads its ``config.toml`` and
``checkpoint.npz``, cuts ``metrics.jsonl`` back to the checkpoint's step and trains on to the config's
``steps``. The steps, the data (regenerated from the seed) and the optimiser state are those of the run that
never stopped, so its result.json is the same.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
from typing import Any, Iterable

from sopt.experiments import runner
from sopt.experiments.run_dir import CONFIG_FILE, check_out_dir, claim_out_dir
from sopt.experiments.runner import RunOutcome
from problems.fitting.config import FitConfig, load_config
from problems.fitting.problem import FittingProblem
from sopt.train import Callback, NonFiniteError


@dataclasses.dataclass
class RunResult:
    """``result``: what result.json holds (None unless finished); ``status``: summary.json's; ``steps`` done;
    ``seconds``: this process's training time; ``problem``: the problem object."""

    result: dict[str, Any] | None
    out_dir: pathlib.Path
    status: str
    steps: int
    seconds: float
    problem: FittingProblem


def _outcome(problem: FittingProblem, outcome: RunOutcome) -> RunResult:
    if outcome.status == "failed":   # recorded in the run; raised here as it was raised in training
        raise outcome.exception or NonFiniteError(outcome.error or "the run failed", outcome.steps, None)
    result = getattr(problem, "result", None) if outcome.status == "finished" else None
    return RunResult(result, outcome.run_dir, outcome.status, outcome.steps, outcome.seconds, problem)


def run(problem_cls: type[FittingProblem], config: FitConfig, out_dir: str | os.PathLike[str], *,
        progress: bool = True, callbacks: Iterable[Callback] = ()) -> RunResult:
    """Fit ``problem_cls`` with ``config`` (a validated ``problem_cls.schema``) into the new folder ``out_dir``
    (sopt.experiments.runner.start; what ``sopt run`` does). ``callbacks``: extra Trainer callbacks.

    Raises RunDirError for an unusable folder, ValueError for a problem the config cannot build (both before any
    file is written), sopt.train.NonFiniteError when the fit diverges."""
    if not isinstance(config, problem_cls.schema):
        raise ValueError(f"run: config must be a {problem_cls.schema.__name__}, got {type(config).__name__}")
    check_out_dir(out_dir)   # before the problem is built (its data can take minutes)
    problem = problem_cls(config)    # builds the simulator and the data: any ValueError before a file is written
    out = claim_out_dir(out_dir)
    return _outcome(problem, runner.start(problem, out, progress=progress, callbacks=callbacks))


def resume(problem_cls: type[FittingProblem], out_dir: str | os.PathLike[str], *, progress: bool = True,
           callbacks: Iterable[Callback] = ()) -> RunResult:
    """Continue the interrupted run in ``out_dir`` to its config's end (what ``sopt resume`` does)."""
    out = pathlib.Path(out_dir)
    runner.check_resumable(out)
    config = load_config(problem_cls.schema, out / CONFIG_FILE)
    problem = problem_cls(config)
    return _outcome(problem, runner.resume(problem, out, progress=progress, callbacks=callbacks))
