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
reloads the checkpoint (parameters, optimiser, schedule, step) before it changes any file, cuts ``metrics.jsonl``
back to the checkpoint's step and trains on; the batches and data are functions of the step and the seed, so it
ends where a run that never stopped ends, with the same metrics.jsonl and summary.json.

Safety: a run or resume holds the run directory's lock (:class:`~sopt.experiments.run_dir.RunLock`) throughout,
so a second one is refused; a resume refuses a ``config.toml`` edited since the run started unless the change is
accepted (then recorded in ``overrides.txt`` and as a ``config_change`` event in ``metrics.jsonl``), and input
files (``Problem.input_files``, fingerprinted in ``inputs.json`` at the start) changed since, the same way
(``--accept-input-change``, an ``input_change`` event). Any exception once training began (a divergence, a full
disk, a bug) becomes a ``failed`` outcome: summary.json says so with a one-line reason (rewritten in place when a
full disk refuses its replacement) and error.txt holds the traceback, as far as the disk allows.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import pathlib
import signal
import time
import traceback
from typing import Any, Callable, Iterable, Sequence

from sopt.utils import atomic_write
from sopt.config.files import dumps_toml, write_atomic
from sopt.experiments.problem import Problem, ProblemConfig
from sopt.experiments.run_dir import (CHECKPOINT_FILE, CONFIG_FILE, ENV_FILE, ERROR_FILE, MAX_RUN_JSON_BYTES,
                                      METRICS_FILE, OVERRIDES_FILE, STARTED_CONFIG_FILE, SUMMARY_FILE, RunDirError,
                                      RunLock, check_out_dir, check_writable, environment, input_changes, now_iso,
                                      read_json, read_metrics, read_summary, run_alive, write_inputs, write_json)
from sopt.experiments.run_records import flatten
from sopt.utils.regular_file import read_bytes
from sopt.train import Callback, Checkpoint, JSONLLogger, NonFiniteError, Trainer
from sopt.train.stop_signals import handling_stop_signals

INTERRUPTED = "interrupted"


@dataclasses.dataclass
class RunOutcome:
    """How a run (or this process's part of it) ended: ``status`` as in summary.json, ``steps`` done in all,
    ``metrics`` the final ones (summary.json's), ``error`` for a failed run (one line), ``lines`` the problem's
    summary."""

    run_dir: pathlib.Path
    status: str
    steps: int
    metrics: dict[str, float]
    error: str | None = None
    lines: list[str] = dataclasses.field(default_factory=list)
    seconds: float = 0.0
    exception: Exception | None = None   # what made a failed run fail (recorded in summary.json and error.txt)


def _numbers(record: dict[str, Any]) -> dict[str, float]:
    """The finite numbers of a metrics record (lists and strings left out): what summary.json keeps."""
    return {k: float(v) for k, v in record.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(float(v))}


def _truncate_metrics(path: pathlib.Path, step: int, at_step: dict[str, Any] | None, keep_at_step: bool,
                      new_events: Sequence[dict[str, Any]] = ()) -> None:
    """Cut ``metrics.jsonl`` back to what the run had logged before ``step`` (the checkpoint's), then ``at_step``
    (the checkpoint's own record of ``step``, which the stopped run may or may not have logged) when
    ``keep_at_step`` -- only when ``step`` is a metrics step of a run that never stopped, not one that a signal
    made one -- then ``new_events``. End events go (the stopped run's); other events up to ``step`` (an accepted
    config or input change) stay."""
    kept, events = [], []
    for record in read_metrics(path, events=True):
        at = record["step"]
        if not isinstance(at, int) or record.get("event") == "end":
            continue
        if at < step:
            kept.append(record)
        elif at == step and "event" in record:
            events.append(record)
    lines = [*kept, *([at_step] if at_step is not None and keep_at_step else []), *events, *new_events]
    write_atomic(path, "".join(json.dumps(r, allow_nan=False) + "\n" for r in lines))


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

    def write(self, status: str, steps: int, metrics: dict[str, float], error: str | None = None,
              in_place: bool = False) -> None:
        """summary.json with ``status``, atomically (``in_place``: over the old file's own bytes, see
        :func:`_record_failure`)."""
        data = {"problem": self.problem, "status": status, "steps": steps, "total_steps": self.total,
                "time_s": self.before + time.perf_counter() - self.started, "metrics": metrics,
                "error": error, "pid": os.getpid(), "updated": now_iso()}
        if in_place:
            atomic_write.overwrite_in_place(self.path, (json.dumps(data, indent=2, allow_nan=False, default=str)
                                                        + "\n").encode("utf-8"))
        else:
            write_json(self.path, data)


class _StopOnSignal:
    """While active, SIGINT and SIGTERM ask the trainer to stop after its current step (a second SIGINT raises
    KeyboardInterrupt, for a user who really wants out)."""

    def __init__(self, trainer: Trainer) -> None:
        self.trainer, self.received = trainer, None
        self._handling = handling_stop_signals(self._handle)

    def _handle(self, signum: int, frame: Any) -> None:
        if self.received is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.received = signal.Signals(signum).name
        self.trainer.stop(f"{INTERRUPTED} by {self.received}", from_outside=True)

    def __enter__(self) -> "_StopOnSignal":
        self._handling.__enter__()   # not the main thread (a Ray worker thread): no handlers
        return self

    def __exit__(self, *exc: Any) -> None:
        self._handling.__exit__(None, None, None)


def start(problem: Problem, run_dir: pathlib.Path, overrides: Iterable[str] = (), *, progress: bool = True,
          device: Any = None, callbacks: Iterable[Callback] = (), data_parallel: Any = None) -> RunOutcome:
    """Train ``problem`` (built from its validated config) from step 0 into the new, empty ``run_dir``, holding
    its lock (:class:`~sopt.experiments.run_dir.RunLock`; RunDirError when another process holds it).
    ``data_parallel``: rank 0's :class:`sopt.distributed.DataParallel` when this is rank 0 of several processes
    (the others train with :mod:`sopt.distributed.replica`, writing nothing)."""
    config = problem.config

    def write_run_files() -> None:
        resolved = config.model_dump(mode="json")
        write_atomic(run_dir / CONFIG_FILE, dumps_toml(resolved))
        write_json(run_dir / STARTED_CONFIG_FILE, resolved)
        write_atomic(run_dir / OVERRIDES_FILE, "".join(f"{o}\n" for o in overrides))
        write_json(run_dir / ENV_FILE, environment(device))
        write_inputs(run_dir, list(problem.input_files()))

    with RunLock(run_dir):
        check_out_dir(run_dir)   # again under the lock: a run that took the same empty folder first has filled it
        return _train(problem, run_dir, resuming=False, progress=progress, callbacks=callbacks,
                      prepare=write_run_files, data_parallel=data_parallel)


def check_resumable(run_dir: pathlib.Path) -> dict[str, Any]:
    """The summary of the run in ``run_dir`` if it can be resumed; RunDirError otherwise (no run there, a
    finished one, one still running, or a folder this process cannot write)."""
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
    steps = summary.get("steps")
    if (status in ("running", INTERRUPTED) and isinstance(steps, int) and steps > 0
            and not os.path.lexists(run_dir / CHECKPOINT_FILE)):
        # those summaries are written only once a checkpoint of their step exists: it was removed since
        raise RunDirError(f"the run in {str(run_dir)!r} stopped after {steps} steps but its {CHECKPOINT_FILE} is "
                          f"missing; restore it (resuming would start over from step 0), or start a new run")
    check_writable(run_dir, "sopt resume", (METRICS_FILE,))
    return summary


def config_changes(run_dir: pathlib.Path, config: ProblemConfig) -> list[str]:
    """The dotted keys where ``config`` (the validated config.toml of the run in ``run_dir``) differs from the
    config the run started with, as ``key: old -> new`` ([] for a run that predates the record of it)."""
    try:
        started = read_json(run_dir / STARTED_CONFIG_FILE)
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as exc:
        raise RunDirError(f"{str(run_dir / STARTED_CONFIG_FILE)!r} (the config the run started with) cannot be "
                          f"read ({' '.join(str(exc).split())}); delete it to resume without checking for an "
                          f"edited {CONFIG_FILE}") from None
    before, now = flatten(started) if isinstance(started, dict) else {}, flatten(config.model_dump(mode="json"))

    def shown(table: dict[str, Any], key: str) -> str:
        return json.dumps(table[key]) if key in table else "(unset)"

    return [f"{key}: {shown(before, key)} -> {shown(now, key)}" for key in sorted(before.keys() | now.keys())
            if key not in before or key not in now or before[key] != now[key]]


def check_config_unchanged(run_dir: pathlib.Path, config: ProblemConfig, accept: bool) -> list[str]:
    """:func:`config_changes`, refused (RunDirError listing them) unless ``accept``: a run resumed with an edited
    config would mix two objectives under one label."""
    changes = config_changes(run_dir, config)
    if changes and not accept:
        raise RunDirError(f"{CONFIG_FILE} in {str(run_dir)!r} was edited after the run started ({'; '.join(changes)});"
                          " restore it, or resume with --accept-config-change to continue with the new values "
                          "(the change is recorded in the run)")
    return changes


def check_inputs_unchanged(run_dir: pathlib.Path, accept: bool) -> list[str]:
    """The input files of the run in ``run_dir`` changed since it started (:func:`~sopt.experiments.run_dir.
    input_changes`, read from the paths inputs.json records), refused (RunDirError listing them) unless
    ``accept``: a run resumed on other data would fit two datasets under one label. Reads the files, nothing
    else: called before the problem is built."""
    changes = input_changes(run_dir)
    if changes and not accept:
        raise RunDirError(f"the input files of the run in {str(run_dir)!r} changed after it started "
                          f"({'; '.join(changes)}); restore them, or resume with --accept-input-change to continue "
                          "with the new files (the change is recorded in the run)")
    return changes


def resume(problem: Problem, run_dir: pathlib.Path, *, progress: bool = True, callbacks: Iterable[Callback] = (),
           accept_config_change: bool = False, accept_input_change: bool = False,
           data_parallel: Any = None) -> RunOutcome:
    """Continue the run in ``run_dir`` (``problem`` built from its config.toml) from its checkpoint (or from step
    0 when it was stopped before writing one) to the config's ``steps``, holding its lock. RunDirError when it
    cannot be resumed (see :func:`check_resumable`, :func:`check_config_unchanged`,
    :func:`check_inputs_unchanged`), CheckpointError when its checkpoint does not load: both before anything in
    ``run_dir`` changes."""
    with RunLock(run_dir):
        check_resumable(run_dir)   # again under the lock: a resume that won the race may have finished it
        changes = check_config_unchanged(run_dir, problem.config, accept_config_change)
        inputs = check_inputs_unchanged(run_dir, accept_input_change)
        return _train(problem, run_dir, resuming=True, progress=progress, callbacks=callbacks, changes=changes,
                      input_changes=inputs, data_parallel=data_parallel)


def _record_failure(run_dir: pathlib.Path, summary: "_SummaryWriter", step: int, exc: Exception) -> str:
    """The one-line reason for ``exc``, recorded as far as the disk allows: summary.json status failed first,
    then the traceback in error.txt (not for a divergence, whose message says it all). On a full disk replacing
    summary.json fails (its new copy needs room while the old one still holds its blocks): it is then rewritten
    in place, over its own blocks. A summary that still cannot be written stays ``running`` with this process's
    pid, which ``sopt resume`` and ``sopt report`` take for a stopped run once the process is gone."""
    message = " ".join(str(exc).split())
    if not isinstance(exc, NonFiniteError):
        message = f"{type(exc).__name__}: {message}"
    try:
        summary.write("failed", step, {}, message)
    except OSError:
        with contextlib.suppress(OSError):
            summary.write("failed", step, {}, message, in_place=True)
    if not isinstance(exc, NonFiniteError):
        with contextlib.suppress(OSError):
            write_atomic(run_dir / ERROR_FILE, "".join(traceback.format_exception(exc)))
    return message


def _train(problem: Problem, run_dir: pathlib.Path, *, resuming: bool, progress: bool,
           callbacks: Iterable[Callback], prepare: Callable[[], None] | None = None,
           changes: Sequence[str] = (), input_changes: Sequence[str] = (), data_parallel: Any = None) -> RunOutcome:
    config: ProblemConfig = problem.config
    parts = dict(problem.trainer_parts())
    own = list(parts.pop("callbacks", []))
    metrics_path, checkpoint_path = run_dir / METRICS_FILE, run_dir / CHECKPOINT_FILE
    time_before = float(read_summary(run_dir).get("time_s", 0.0)) if resuming else 0.0
    summary = _SummaryWriter(run_dir, problem.name, config.steps, time.perf_counter(), time_before)
    trainer = Trainer(**parts, callbacks=[*own, JSONLLogger(metrics_path, append=resuming),
                                          Checkpoint(checkpoint_path, every=config.checkpoint_every),
                                          _Summary(summary, config.checkpoint_every), *callbacks],
                      log_every=config.log_every, progress=progress, data_parallel=data_parallel,
                      cuda_graph=config.cuda_graph and data_parallel is None)
    at_step = None
    if resuming and os.path.lexists(checkpoint_path):   # a dangling link there is a CheckpointError, not step 0
        # a checkpoint that does not load raises here (CheckpointError), before any file of the run changes
        at_step = dict(trainer.restore(str(checkpoint_path), steps=config.steps).get("metrics") or {}) or None
    begin = time.perf_counter()
    try:
        if prepare is not None:
            prepare()
        if resuming:
            events = [{"step": trainer.step, "event": kind, "changes": list(found)}
                      for kind, found in (("config_change", changes), ("input_change", input_changes)) if found]
            _truncate_metrics(metrics_path, trainer.step, at_step,
                              trainer.is_metrics_step(trainer.step, final=trainer.step >= config.steps), events)
            if changes or input_changes:   # recorded; the next resume compares with the new config and files
                overrides = run_dir / OVERRIDES_FILE
                text = (read_bytes(overrides, MAX_RUN_JSON_BYTES).decode("utf-8", "replace")
                        if os.path.lexists(overrides) else "")
                write_atomic(overrides, text + "".join(
                    [*(f"# resumed at step {trainer.step} with an edited {CONFIG_FILE}: {c}\n" for c in changes),
                     *(f"# resumed at step {trainer.step} with a changed input file: {c}\n" for c in input_changes)]))
                if changes:
                    write_json(run_dir / STARTED_CONFIG_FILE, config.model_dump(mode="json"))
                write_inputs(run_dir, list(problem.input_files()))
        summary.write("running", trainer.step, {})
        with _StopOnSignal(trainer):
            result = trainer.fit(config.steps)
        # a resume of a run stopped at its last step trains no step: its last metrics are the checkpoint's
        last = _numbers(result.metrics or at_step or {})
        if result.stop_reason.startswith(INTERRUPTED):
            summary.write(INTERRUPTED, trainer.step, last)
            return RunOutcome(run_dir, INTERRUPTED, trainer.step, last, seconds=time.perf_counter() - begin)
        history = read_metrics(metrics_path)
        final = {**last, **{k: float(v) for k, v in problem.finish(run_dir, history).items()}}
        summary.write("finished", trainer.step, final)
        return RunOutcome(run_dir, "finished", trainer.step, final, lines=problem.summary(),
                          seconds=time.perf_counter() - begin)
    except Exception as exc:   # noqa: BLE001 -- any failure (divergence, a full disk, a bug) is recorded in the run
        step = exc.step if isinstance(exc, NonFiniteError) else trainer.step
        message = _record_failure(run_dir, summary, step, exc)
        return RunOutcome(run_dir, "failed", step, {}, message, seconds=time.perf_counter() - begin, exception=exc)
