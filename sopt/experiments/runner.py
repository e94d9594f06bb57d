"""Running a problem into a run directory: train, checkpoint, stop cleanly on SIGINT/SIGTERM, resume, summarise.

:func:`start` trains a new run (its folder made by :mod:`sopt.experiments.run_dir`), :func:`resume` continues an
interrupted or killed one to the same end. Both build the problem first (a config the problem cannot use is a
ValueError before any file is written), then train it with :class:`sopt.train.Trainer` and these callbacks:

- the metrics logger (``metrics.jsonl``, one record per metrics step),
- :class:`~sopt.train.Checkpoint` every ``checkpoint_every`` steps (atomic: a ``kill -9`` loses at most the steps
  since the last one, never the checkpoint itself),
- ``summary.json`` refreshed at every checkpoint (status ``running``, steps done, the latest metrics).

SIGINT and SIGTERM ask the Trainer to stop after the step it is running: that step writes its metrics and a
checkpoint, the summary says ``interrupted`` and the process exits 0 with the resume command. A resumed run
reloads the checkpoint (parameters, optimiser, schedule, step), cuts ``metrics.jsonl`` back to the checkpoint's
step and trains on; the batches and data are functions of the step and the seed, so it ends where a run that
never stopped ends.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import pathlib
import signal
import time
import traceback
from typing import Any, Iterable

from sopt.config.files import dumps_toml, write_atomic
from sopt.experiments.problem import Problem, ProblemConfig
from sopt.experiments.run_dir import (CHECKPOINT_FILE, CONFIG_FILE, ENV_FILE, ERROR_FILE, METRICS_FILE,
                                      OVERRIDES_FILE, SUMMARY_FILE, RunDirError, environment, now_iso,
                                      read_metrics, read_summary, run_alive, write_json)
from sopt.train import Callback, Checkpoint, JSONLLogger, NonFiniteError, Trainer

INTERRUPTED = "interrupted"


@dataclasses.dataclass
class RunOutcome:
    """How a run (or this process's part of it) ended: ``status`` as in summary.json, ``steps`` done in all,
    ``metrics`` the final ones (summary.json's), ``error`` for a failed run, ``lines`` the problem's summary."""

    run_dir: pathlib.Path
    status: str
    steps: int
    metrics: dict[str, float]
    error: str | None = None
    lines: list[str] = dataclasses.field(default_factory=list)
    seconds: float = 0.0


def _numbers(record: dict[str, Any]) -> dict[str, float]:
    """The finite numbers of a metrics record (lists and strings left out): what summary.json keeps."""
    return {k: float(v) for k, v in record.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(float(v))}


def _truncate_metrics(path: pathlib.Path, step: int, at_step: dict[str, Any] | None) -> None:
    """Cut ``metrics.jsonl`` back to the records of steps < ``step`` and append ``at_step`` (the checkpoint's
    own record of ``step``, which the interrupted run may or may not have logged)."""
    kept = [r for r in read_metrics(path) if r["step"] < step]
    if at_step is not None:
        kept.append(at_step)
    write_atomic(path, "".join(json.dumps(r, allow_nan=False) + "\n" for r in kept))


class _Summary(Callback):
    """Keeps summary.json current: status running, steps done, the latest metrics, at every checkpoint."""

    order = 80   # after the Checkpoint (70): the summary names a step whose checkpoint exists

    def __init__(self, writer: "_SummaryWriter", every: int) -> None:
        super().__init__(every)
        self.writer = writer

    def on_metrics(self, trainer: Trainer, metrics: dict[str, Any]) -> None:
        self.writer.write("running", trainer.step, _numbers(metrics))


class _SummaryWriter:
    def __init__(self, run_dir: pathlib.Path, problem: str, total_steps: int, started: float,
                 time_before: float) -> None:
        self.path, self.problem, self.total, self.started, self.before = (run_dir / SUMMARY_FILE, problem,
                                                                           total_steps, started, time_before)

    def write(self, status: str, steps: int, metrics: dict[str, float], error: str | None = None) -> None:
        write_json(self.path, {"problem": self.problem, "status": status, "steps": steps, "total_steps": self.total,
                               "time_s": self.before + time.perf_counter() - self.started, "metrics": metrics,
                               "error": error, "pid": os.getpid(), "updated": now_iso()})


class _StopOnSignal:
    """While active, SIGINT and SIGTERM ask the trainer to stop after its current step (a second SIGINT raises
    KeyboardInterrupt, for a user who really wants out)."""

    def __init__(self, trainer: Trainer) -> None:
        self.trainer, self.received, self.saved = trainer, None, {}

    def _handle(self, signum: int, frame: Any) -> None:
        if self.received is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.received = signal.Signals(signum).name
        self.trainer.stop(f"{INTERRUPTED} by {self.received}")

    def __enter__(self) -> "_StopOnSignal":
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                self.saved[sig] = signal.signal(sig, self._handle)
            except ValueError:   # not the main thread: no handlers (a Ray worker thread)
                pass
        return self

    def __exit__(self, *exc: Any) -> None:
        for sig, handler in self.saved.items():
            signal.signal(sig, handler)


def start(problem: Problem, run_dir: pathlib.Path, overrides: Iterable[str] = (), *, progress: bool = True,
          device: Any = None, callbacks: Iterable[Callback] = ()) -> RunOutcome:
    """Train ``problem`` (built from its validated config) from step 0 into the new, empty ``run_dir``."""
    config = problem.config
    write_atomic(run_dir / CONFIG_FILE, dumps_toml(config.model_dump(mode="json")))
    write_atomic(run_dir / OVERRIDES_FILE, "".join(f"{o}\n" for o in overrides))
    write_json(run_dir / ENV_FILE, environment(device))
    return _train(problem, run_dir, resuming=False, progress=progress, callbacks=callbacks)


def check_resumable(run_dir: pathlib.Path) -> dict[str, Any]:
    """The summary of the run in ``run_dir`` if it can be resumed; RunDirError otherwise (no run there, a
    finished one, or one still running)."""
    if not (run_dir / CONFIG_FILE).is_file():
        raise RunDirError(f"{str(run_dir)!r} holds no run to resume (no {CONFIG_FILE})")
    summary = read_summary(run_dir)
    status = summary.get("status")
    if status == "finished":
        raise RunDirError(f"the run in {str(run_dir)!r} has finished ({summary.get('steps')} steps); nothing to "
                          "resume")
    if status == "running" and run_alive(run_dir, summary.get("pid")):
        raise RunDirError(f"the run in {str(run_dir)!r} is still running (process {summary.get('pid')}); stop it "
                          "first (Ctrl-C or kill, which checkpoints)")
    return summary


def resume(problem: Problem, run_dir: pathlib.Path, *, progress: bool = True,
           callbacks: Iterable[Callback] = ()) -> RunOutcome:
    """Continue the run in ``run_dir`` (``problem`` built from its config.toml) from its checkpoint (or from step
    0 when it was stopped before writing one) to the config's ``steps``."""
    check_resumable(run_dir)
    return _train(problem, run_dir, resuming=True, progress=progress, callbacks=callbacks)


def _train(problem: Problem, run_dir: pathlib.Path, *, resuming: bool, progress: bool,
           callbacks: Iterable[Callback]) -> RunOutcome:
    config: ProblemConfig = problem.config
    parts = dict(problem.trainer_parts())
    own = list(parts.pop("callbacks", []))
    metrics_path, checkpoint_path = run_dir / METRICS_FILE, run_dir / CHECKPOINT_FILE
    time_before = float(read_summary(run_dir).get("time_s", 0.0)) if resuming else 0.0
    summary = _SummaryWriter(run_dir, problem.name, config.steps, time.perf_counter(), time_before)
    trainer = Trainer(**parts, callbacks=[*own, JSONLLogger(metrics_path, append=resuming),
                                          Checkpoint(checkpoint_path, every=config.checkpoint_every),
                                          _Summary(summary, config.checkpoint_every), *callbacks],
                      log_every=config.log_every, progress=progress)
    if resuming:
        at_step = None
        if checkpoint_path.exists():
            extra = trainer.restore(str(checkpoint_path))
            at_step = dict(extra.get("metrics") or {}) or None
        _truncate_metrics(metrics_path, trainer.step, at_step)
    summary.write("running", trainer.step, {})
    begin = time.perf_counter()
    try:
        with _StopOnSignal(trainer):
            result = trainer.fit(config.steps)
    except NonFiniteError as exc:
        message = " ".join(str(exc).split())
        summary.write("failed", exc.step, {}, message)
        return RunOutcome(run_dir, "failed", exc.step, {}, message, seconds=time.perf_counter() - begin)
    except Exception as exc:   # noqa: BLE001 -- any failure is recorded in the run before it propagates
        write_atomic(run_dir / ERROR_FILE, traceback.format_exc())
        summary.write("failed", trainer.step, {}, f"{type(exc).__name__}: {' '.join(str(exc).split())}")
        raise
    seconds = time.perf_counter() - begin
    last = _numbers(result.metrics)
    if result.stop_reason.startswith(INTERRUPTED):
        summary.write(INTERRUPTED, trainer.step, last)
        return RunOutcome(run_dir, INTERRUPTED, trainer.step, last, seconds=seconds)
    history = read_metrics(metrics_path)
    final = {**last, **{k: float(v) for k, v in problem.finish(run_dir, history).items()}}
    summary.write("finished", trainer.step, final)
    return RunOutcome(run_dir, "finished", trainer.step, final, lines=problem.summary(), seconds=seconds)
