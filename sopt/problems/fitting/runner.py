"""What a fitting problem adds to a run (sopt.experiments.runner): its optimiser and schedule, per-step parameter
metrics, result.json and pictures; and ``run``/``resume`` for calling it from Python.

``run(Problem, config, out_dir)`` builds the problem, the optimiser and schedule of ``config`` and trains with
:class:`sopt.train.Trainer` (what ``sopt run`` does), writing into ``out_dir`` (which must be new or empty:
nothing is ever overwritten) the run directory of sopt.experiments.run_dir, with:

- ``config.toml``: the resolved config (every key), written before the first step;
- ``metrics.jsonl``: one record per metrics step (``step``, ``loss``, ``lr``, ..., and the problem's
  ``value/<name>`` and ``rel_error/<name>``), then an ``"event": "end"`` record;
- ``checkpoint.npz``: the trained (normalised) parameters, optimiser and schedule every ``checkpoint_every``
  steps and at the end (``sopt.load``);
- ``result.json``: ``{"true", "fitted", "rel_error", "loss", "steps"}``, keyed by parameter name (a number's
  rel_error is |fitted - true| / |true|, an array's ||fitted - true||_2 / ||true||_2; ``loss`` is the loss at
  the fitted parameters);
- ``curves.png`` (loss and each parameter over the steps) and the problem's own pictures.

``resume(Problem, out_dir)`` continues an interrupted run in ``out_dir``: it reloads its ``config.toml`` and
``checkpoint.npz``, cuts ``metrics.jsonl`` back to the checkpoint's step and trains on to the config's
``steps``. The steps, the data (regenerated from the seed) and the optimiser state are those of the run that
never stopped, so its result.json is the same.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import pathlib
from typing import Any, Iterable

import numpy as np

from sopt.config.registry import build
from sopt.experiments import runner
from sopt.experiments.run_dir import CONFIG_FILE, RunDirError, check_out_dir, claim_out_dir, write_json
from sopt.experiments.runner import RunOutcome
from sopt.problems.fitting.config import FitConfig, load_config
from sopt.problems.fitting.plot import plot_history
from sopt.problems.fitting.problem import RESERVED_METRICS, FittingProblem, rel_error
from sopt.train import Callback, NonFiniteError, Trainer

RESULT_FILE, CURVES_FILE = "result.json", "curves.png"
OutputError = RunDirError   # the name this module used before sopt.experiments


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


class ProblemMetrics(Callback):
    """Adds the problem's :meth:`~FittingProblem.progress_metrics` (parameter values and errors) to every metrics
    record, before the loggers and the checkpoint see it."""

    order = 10

    def __init__(self, problem: FittingProblem) -> None:
        super().__init__(None)
        self.problem = problem

    def on_metrics(self, trainer: Trainer, metrics: dict[str, Any]) -> None:
        for key, value in self.problem.progress_metrics().items():
            if key in RESERVED_METRICS:
                raise ValueError(f"{type(self.problem).__name__}.progress_metrics: {key!r} is a Trainer metric")
            metrics[key] = value


def _jsonable(value: Any) -> Any:
    """numpy values as JSON numbers or (nested) lists; NaN/Inf as None (JSON has none)."""
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, np.ndarray):
        return _jsonable(value.tolist())
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (float, np.floating)):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, np.integer):
        return int(value)
    return value


def build_training(config: FitConfig, params: list[Any]) -> tuple[Any, Any]:
    """The optimiser over ``params`` and the learning-rate schedule that ``config`` names (sopt.config.registry)."""
    optimizer = build("optimizer", config.optimizer, params)
    return optimizer, build("schedule", config.schedule, optimizer, config.steps)


def write_result(problem: FittingProblem, out: pathlib.Path, history: list[dict[str, Any]]) -> dict[str, Any]:
    """result.json, curves.png and the problem's pictures in ``out``; returns result.json's content."""
    loss = problem.evaluate()
    fitted, truth = problem.fitted(), problem.true_values()
    result = {"true": truth, "fitted": fitted,
              "rel_error": {name: rel_error(fitted[name], truth[name]) for name in truth if name in fitted},
              "loss": loss, "steps": problem.config.steps}
    write_json(out / RESULT_FILE, _jsonable(result))
    plot_history(history, truth, problem.units(), out / CURVES_FILE, title=problem.name)
    problem.plot(out, history)
    return json.loads(json.dumps(_jsonable(result)))


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
