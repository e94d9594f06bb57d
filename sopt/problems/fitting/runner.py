"""The shared run of a fitting problem: Trainer, metrics, checkpoints, resume, result.json and pictures.

``run(Problem, config, out_dir)`` builds the problem, the optimiser and schedule of ``config`` (through
neural_field_image's ``build_optimizer`` / ``build_scheduler``) and trains with :class:`sopt.train.Trainer`,
writing into ``out_dir`` (which must be new or empty: nothing is ever overwritten):

- ``config.json``: the resolved config (every key), written before the first step;
- ``metrics.jsonl``: one record per metrics step (``step``, ``loss``, ``lr``, ..., and the problem's
  ``value/<name>`` and ``rel_error/<name>``), then an ``"event": "end"`` record;
- ``checkpoint.npz``: the trained (normalised) parameters, optimiser and schedule every ``checkpoint_every``
  steps and at the end (``sopt.load``);
- ``result.json``: ``{"true", "fitted", "rel_error", "loss", "steps"}``, keyed by parameter name (a number's
  rel_error is |fitted - true| / |true|, an array's ||fitted - true||_2 / ||true||_2; ``loss`` is the loss at
  the fitted parameters);
- ``curves.png`` (loss and each parameter over the steps) and the problem's own pictures.

``resume(Problem, out_dir)`` continues an interrupted run in ``out_dir``: it reloads its ``config.json`` and
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
import time
from typing import Any, Iterable

import numpy as np

from sopt.config.schema import ConfigError
from sopt.problems.fitting.config import FitConfig, load_config
from sopt.problems.fitting.plot import plot_history
from sopt.problems.fitting.problem import RESERVED_METRICS, FittingProblem, rel_error
from sopt.problems.neural_field_image.build import build_optimizer, build_scheduler
from sopt.train import Callback, Checkpoint, JSONLLogger, Trainer, TrainResult

CONFIG_FILE, METRICS_FILE, CHECKPOINT_FILE, RESULT_FILE, CURVES_FILE = (
    "config.json", "metrics.jsonl", "checkpoint.npz", "result.json", "curves.png")


class OutputError(ValueError):
    """An output folder that cannot be used (not empty, a file, nothing to resume)."""


@dataclasses.dataclass
class RunResult:
    """``result``: what result.json holds; ``files``: every file written; ``train``: the Trainer's result of
    this process's part of the run; ``seconds``: its training time; ``problem``: the problem object."""

    result: dict[str, Any]
    out_dir: pathlib.Path
    files: list[pathlib.Path]
    train: TrainResult
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


def write_json(path: pathlib.Path, data: Any) -> None:
    """``data`` as indented JSON at ``path``, written to a temporary file and renamed (never half written)."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(_jsonable(data), indent=2, allow_nan=False) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def read_history(path: pathlib.Path) -> list[dict[str, Any]]:
    """The metrics records of ``metrics.jsonl`` (event records left out)."""
    if not path.exists():
        return []
    records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [r for r in records if "event" not in r]


def truncate_metrics(path: pathlib.Path, step: int, at_step: dict[str, Any] | None) -> None:
    """Cut ``metrics.jsonl`` back to the records of steps < ``step`` (events dropped) and append ``at_step`` (the
    checkpoint's own record of ``step``, which the interrupted run may or may not have logged)."""
    kept = [r for r in read_history(path) if r["step"] < step]
    if at_step is not None:
        kept.append(at_step)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text("".join(json.dumps(_jsonable(r), allow_nan=False) + "\n" for r in kept), encoding="utf-8")
    os.replace(tmp, path)


def check_new_output(out_dir: pathlib.Path) -> None:
    """OutputError unless ``out_dir`` does not exist or is an empty folder."""
    if out_dir.exists() and not out_dir.is_dir():
        raise OutputError(f"--out {str(out_dir)!r} is a file, not a folder; name a new folder")
    if out_dir.is_dir() and any(out_dir.iterdir()):
        raise OutputError(f"--out {str(out_dir)!r} is not empty; use --resume {str(out_dir)!r} to continue the run "
                          "there, or name a new folder (nothing is overwritten)")


def _train(problem_cls: type[FittingProblem], config: FitConfig, out: pathlib.Path, *, resuming: bool,
           progress: bool, callbacks: Iterable[Callback]) -> RunResult:
    problem = problem_cls(config)    # builds the simulator and the data: any ValueError before a file is written
    params = problem.parameters()
    built = config.builder_dict()
    optimizer = build_optimizer(built, list(params.values()))
    scheduler = build_scheduler(built, optimizer)
    metrics_path, checkpoint_path = out / METRICS_FILE, out / CHECKPOINT_FILE
    trainer = Trainer(objective=problem, optimizer=optimizer, parameters=params, scheduler=scheduler,
                      callbacks=[ProblemMetrics(problem), JSONLLogger(metrics_path, append=resuming),
                                 Checkpoint(checkpoint_path, every=config.checkpoint_every), *callbacks],
                      log_every=config.log_every, progress=progress)
    if resuming:
        at_step = None
        if checkpoint_path.exists():
            extra = trainer.restore(str(checkpoint_path))
            at_step = dict(extra.get("metrics") or {}) or None
        truncate_metrics(metrics_path, trainer.step, at_step)
    else:
        out.mkdir(parents=True, exist_ok=True)
        write_json(out / CONFIG_FILE, config.model_dump(mode="json"))
    start = time.perf_counter()
    train = trainer.fit(config.steps)
    seconds = time.perf_counter() - start
    loss = problem.evaluate()
    fitted, truth = problem.fitted(), problem.true_values()
    result = {"true": truth, "fitted": fitted,
              "rel_error": {name: rel_error(fitted[name], truth[name]) for name in truth if name in fitted},
              "loss": loss, "steps": trainer.step}
    write_json(out / RESULT_FILE, result)
    history = read_history(metrics_path)
    plot_history(history, truth, problem.units(), out / CURVES_FILE, title=problem.name)
    files = [out / f for f in (CONFIG_FILE, METRICS_FILE, CHECKPOINT_FILE, RESULT_FILE, CURVES_FILE)]
    files += problem.plot(out, history)
    return RunResult(json.loads(json.dumps(_jsonable(result))), out, files, train, seconds, problem)


def run(problem_cls: type[FittingProblem], config: FitConfig, out_dir: str | os.PathLike[str], *,
        progress: bool = True, callbacks: Iterable[Callback] = ()) -> RunResult:
    """Fit ``problem_cls`` with ``config`` (a validated ``problem_cls.schema``) into the new folder ``out_dir``.

    ``callbacks``: extra Trainer callbacks (after the runner's own). Raises OutputError for an unusable folder,
    ValueError for a problem the config cannot build, sopt.train.NonFiniteError when the fit diverges.
    """
    if not isinstance(config, problem_cls.schema):
        raise ValueError(f"run: config must be a {problem_cls.schema.__name__}, got {type(config).__name__}")
    out = pathlib.Path(out_dir)
    check_new_output(out)
    return _train(problem_cls, config, out, resuming=False, progress=progress, callbacks=callbacks)


def resume(problem_cls: type[FittingProblem], out_dir: str | os.PathLike[str], *, progress: bool = True,
           callbacks: Iterable[Callback] = ()) -> RunResult:
    """Continue the interrupted run in ``out_dir`` to its config's end (from step 0 when it wrote no checkpoint).

    OutputError when ``out_dir`` holds no run (no config.json) or a finished one (result.json); ConfigError when
    its config.json does not validate; sopt.CheckpointError for a damaged checkpoint.
    """
    out = pathlib.Path(out_dir)
    if not (out / CONFIG_FILE).is_file():
        raise OutputError(f"--resume {str(out_dir)!r} holds no run to continue (no {CONFIG_FILE})")
    if (out / RESULT_FILE).exists():
        raise OutputError(f"--resume {str(out_dir)!r} holds a finished run ({RESULT_FILE} exists); nothing to continue")
    try:
        config = load_config(problem_cls.schema, out / CONFIG_FILE)
    except ConfigError as exc:
        raise ConfigError([f"{line} (in {str(out / CONFIG_FILE)!r})" for line in exc.lines]) from None
    return _train(problem_cls, config, out, resuming=True, progress=progress, callbacks=callbacks)
