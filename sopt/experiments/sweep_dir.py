"""The sweep directory: ``sweep.json`` (the sweep and each trial's state), one run directory per trial, logs.

Layout (``runs/<problem>/sweep-<hash>/`` or ``--out DIR``)::

    sweep.json          {"problem", "config", "overrides", "space", "method", "samples", "seed", "metric", "mode",
                         "prune", "backend", "hash", "trials": [{"id", "dir", "params", "overrides", "status",
                         "error", "metrics"}]}, rewritten atomically after every change
    trial-000/          the trial's run directory (sopt run --out), see sopt.experiments.run_dir
    logs/trial-000.out  the trial process's stdout and stderr (appended by each start)
    logs/trial-000.err

The hash names the sweep by what decides its trials: the config file's text, the base overrides, the space, the
method, the samples and the seed. Re-running the same command finds the same directory and resumes it.
A trial's status: pending (not started), running, finished, failed (error: its last stderr line or summary.json's
error), pruned (stopped early by the pruner) or interrupted (stopped by a signal to the sweep; resumed next time).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import pathlib
from typing import Any

from sopt.config.files import write_atomic
from sopt.experiments.run_dir import SUMMARY_FILE, RunLock, read_json, run_alive
from sopt.utils.nesting import text_depth
from sopt.utils.regular_file import FileTooLargeError, NotRegularFileError, read_bytes

STATUSES = ("pending", "running", "finished", "failed", "pruned", "interrupted")
SWEEP_FILE = "sweep.json"
MAX_SWEEP_FILE_BYTES = 64 * 2**20     # 10000 trials (search_space.MAX_TRIALS) of a few KiB each fit
MAX_SWEEP_DEPTH = 64                  # sweep.json nests a trial's metrics 4 deep; json.loads recurses


def sweep_hash(config_text: str, base_overrides: list[str], space: dict[str, str], method: str,
               samples: int | None, seed: int | None) -> str:
    """8 hex digits of a sha256 over what decides a sweep's trials."""
    blob = json.dumps({"config": config_text, "overrides": list(base_overrides), "space": list(space.items()),
                       "method": method, "samples": samples, "seed": seed}, sort_keys=True)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:8]


def write_json_atomic(path: pathlib.Path, data: Any) -> None:
    """``data`` as JSON into ``path``, atomically (sopt.config.files.write_atomic: a reader sees the old or the new
    file, never a part)."""
    write_atomic(path, json.dumps(data, indent=1, allow_nan=False) + "\n")


def _json_safe(value: Any) -> Any:
    """NaN/Inf (not JSON) as strings, so a diverged trial's metrics can be written."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_safe(v) for v in value]
    return value


@dataclasses.dataclass
class Trial:
    """One trial of sweep.json (see the module docstring)."""

    id: str
    dir: str
    params: dict[str, Any]
    overrides: list[str]
    status: str = "pending"
    error: str | None = None
    metrics: dict[str, Any] = dataclasses.field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return _json_safe(dataclasses.asdict(self))


class SweepDir:
    """A sweep directory and its state; :meth:`save` rewrites sweep.json atomically."""

    def __init__(self, path: pathlib.Path, header: dict[str, Any], trials: list[Trial]) -> None:
        self.path = pathlib.Path(path)
        self.header = header
        self.trials = trials
        self._lock: RunLock | None = None

    @property
    def file(self) -> pathlib.Path:
        return self.path / SWEEP_FILE

    def trial_dir(self, trial: Trial) -> pathlib.Path:
        return self.path / trial.dir

    def log_paths(self, trial: Trial) -> tuple[pathlib.Path, pathlib.Path]:
        """(stdout, stderr) log files of ``trial``'s processes."""
        return self.path / "logs" / f"{trial.id}.out", self.path / "logs" / f"{trial.id}.err"

    def save(self) -> None:
        write_json_atomic(self.file, {**self.header, "trials": [t.as_json() for t in self.trials]})

    def lock(self) -> None:
        """Takes the directory's lock (a second sweep process on it is refused with ValueError)."""
        lock = RunLock(self.path, what="sweep directory", holder="another sopt sweep of it",
                       advice="wait for it to end or stop it (Ctrl-C or kill; its trials checkpoint)")
        lock.__enter__()   # RunDirError (a ValueError) when another process holds it
        self._lock = lock

    def unlock(self) -> None:
        if self._lock is not None:
            self._lock.__exit__()
            self._lock = None

    def counts(self) -> dict[str, int]:
        """How many trials are in each status (statuses with none left out)."""
        out: dict[str, int] = {}
        for t in self.trials:
            out[t.status] = out.get(t.status, 0) + 1
        return out

    @classmethod
    def open(cls, path: pathlib.Path, header: dict[str, Any], trials: list[Trial]) -> "SweepDir":
        """The sweep directory at ``path``: created with ``header`` and ``trials`` (all pending) if new or empty,
        else its sweep.json read back (the trials' states kept; the header's metric, mode, prune and backend
        updated to this command's). ValueError when ``path`` holds something else or another sweep."""
        path = pathlib.Path(path).absolute()      # trials may run in other working directories (Ray)
        if path.exists() and not path.is_dir():
            raise ValueError(f"--out {path}: exists and is not a directory")
        file = path / SWEEP_FILE
        if os.path.lexists(file):
            data = _read_sweep_file(file)
            if data.get("hash") != header["hash"]:
                raise ValueError(f"sweep directory {path}: holds another sweep (hash {data.get('hash')}, this one "
                                 f"is {header['hash']}: other config text, overrides, space, samples or seed); "
                                 f"choose another --out")
            sweep = cls(path, {**{k: v for k, v in data.items() if k != "trials"}, **header},
                        _recorded_trials(file, data.get("trials"), trials))
        else:
            if path.is_dir() and any(path.iterdir()):
                raise ValueError(f"--out {path}: not empty and holds no {SWEEP_FILE}; choose a new or empty folder")
            path.mkdir(parents=True, exist_ok=True)
            sweep = cls(path, header, trials)
        (path / "logs").mkdir(exist_ok=True)
        return sweep


def _read_sweep_file(file: pathlib.Path) -> dict[str, Any]:
    """sweep.json's object: only a regular file of at most MAX_SWEEP_FILE_BYTES is read (a FIFO or a device put in
    its place is refused at once, never read), and nesting too deep for the parser is refused; ValueError (one
    line) otherwise."""
    where = f"sweep directory {file.parent}: {SWEEP_FILE}"
    try:
        data = read_bytes(file, MAX_SWEEP_FILE_BYTES)
    except NotRegularFileError as exc:
        raise ValueError(f"{where} is {exc.kind}, not a regular file; restore the file or choose another --out") \
            from None
    except FileTooLargeError:
        raise ValueError(f"{where} is over {MAX_SWEEP_FILE_BYTES // 2**20} MiB, more than any sweep writes; restore "
                         f"it or choose another --out") from None
    except OSError as exc:
        raise ValueError(f"{where} cannot be read ({exc.strerror or exc})") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"sweep directory {file.parent}: unreadable {SWEEP_FILE} ({exc})") from None
    if text_depth(text) > MAX_SWEEP_DEPTH:   # json.loads recurses: bounded before it runs
        raise ValueError(f"{where} is nested too deep to be a sweep's") from None
    try:
        value = json.loads(text)
    except ValueError as exc:     # not JSON
        raise ValueError(f"sweep directory {file.parent}: unreadable {SWEEP_FILE} ({exc})") from None
    if not isinstance(value, dict):
        raise ValueError(f"sweep directory {file.parent}: unreadable {SWEEP_FILE} (not a JSON object)")
    return value


def _recorded_trials(file: pathlib.Path, recorded: Any, trials: list[Trial]) -> list[Trial]:
    """``trials`` (this command's, which decide every directory and override) with the status, error and metrics
    that sweep.json recorded for each; ValueError when its trials are not these (an edited file must not point a
    trial at another directory) or a state is malformed."""
    where = f"sweep directory {file.parent}: {SWEEP_FILE}"
    if not isinstance(recorded, list) or len(recorded) != len(trials):
        raise ValueError(f"{where} does not list this sweep's {len(trials)} trials; restore it or choose another "
                         f"--out")
    out = []
    for trial, entry in zip(trials, recorded):
        mine = {"id": trial.id, "dir": trial.dir, "params": trial.params, "overrides": trial.overrides}
        if not isinstance(entry, dict) or any(entry.get(k) != v for k, v in mine.items()):
            raise ValueError(f"{where}: the entry of {trial.id} is not this sweep's trial {trial.id} "
                             f"({' '.join(trial.overrides)} in {trial.dir}); restore it or choose another --out")
        status, error, metrics = entry.get("status"), entry.get("error"), entry.get("metrics")
        if (status not in STATUSES or not (error is None or isinstance(error, str)) or not isinstance(metrics, dict)
                or not all(v is None or isinstance(v, (int, float, str)) for v in metrics.values())):
            raise ValueError(f"{where}: {trial.id} has status {str(status)[:40]!r}, error and metrics of the wrong "
                             f"kinds (a status of {', '.join(STATUSES)}, an error text, metrics of numbers); restore "
                             f"it or choose another --out")
        out.append(dataclasses.replace(trial, status=status, error=error, metrics=metrics))
    return out


# -- a trial's outcome from its run directory ---------------------------------------------------------------------
def read_summary(run_dir: pathlib.Path) -> dict[str, Any] | None:
    """A run directory's summary.json, or None when it is missing or unreadable."""
    try:
        data = read_json(pathlib.Path(run_dir) / SUMMARY_FILE)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def last_line(path: pathlib.Path) -> str | None:
    """The last non-blank line of a text file (None if there is none)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 65536))
            tail = f.read().decode("utf-8", "replace")
    except OSError:
        return None
    lines = [line.strip() for line in tail.splitlines() if line.strip()]
    return lines[-1] if lines else None


def trial_outcome(run_dir: pathlib.Path, stderr_log: pathlib.Path, returncode: int | None,
                  stopped_for: str | None) -> tuple[str, str | None, dict[str, Any]]:
    """(status, error, final metrics) of a trial whose process has exited, from its run directory.

    ``returncode``: the process's exit status (None if unknown, e.g. run by Ray); ``stopped_for``: why the sweep
    sent it SIGTERM: None, "interrupt" (the sweep was interrupted) or "prune" (the pruner stopped it)."""
    summary = read_summary(run_dir) or {}
    run_status = summary.get("status")
    metrics = summary.get("metrics") if isinstance(summary.get("metrics"), dict) else {}
    if run_status == "finished" and returncode in (0, None):
        return "finished", None, metrics
    if run_status == "failed" or (returncode not in (0, None) and stopped_for is None):
        error = summary.get("error") if run_status == "failed" else None
        error = error or last_line(stderr_log) or (
            f"exit status {returncode}" if returncode is not None else "the trial failed")
        return "failed", " ".join(str(error).split()), metrics
    if stopped_for == "prune":
        return "pruned", None, metrics
    if stopped_for == "interrupt" or run_status == "interrupted":
        return "interrupted", None, metrics
    return "failed", last_line(stderr_log) or f"the trial exited (status {returncode}) with summary.json status " \
                                              f"{run_status!r}", metrics


def _runs_in(pid: int, run_dir: pathlib.Path) -> bool:
    """Whether process ``pid``'s command line names ``run_dir`` (as a trial's ``--out DIR`` or ``resume DIR``
    does), so a pid reused by another process is not taken for the trial's; True where /proc cannot tell."""
    try:
        argv = pathlib.Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return not pathlib.Path("/proc/self").exists()
    return os.fsencode(str(run_dir)) in argv


def live_trial_pid(run_dir: pathlib.Path) -> int | None:
    """The pid of the process still running the trial in ``run_dir`` (its summary.json says "running", and the
    pid it names is alive on this host and runs this directory), or None."""
    summary = read_summary(run_dir) or {}
    pid = summary.get("pid")
    if summary.get("status") == "running" and run_alive(run_dir, pid) and _runs_in(pid, run_dir):
        return pid
    return None


def _move_aside(run_dir: pathlib.Path) -> pathlib.Path:
    """Renames ``run_dir`` to the first free ``<name>.old-N`` (nothing is deleted); returns the new path."""
    n = 1
    while run_dir.with_name(f"{run_dir.name}.old-{n}").exists():
        n += 1
    target = run_dir.with_name(f"{run_dir.name}.old-{n}")
    run_dir.rename(target)
    return target


def start_action(sweep: SweepDir, trial: Trial, retry_failed: bool) -> str | None:
    """What starting ``trial`` takes: "run" (a new run into its directory), "resume" (``sopt resume`` of its
    interrupted run) or None (nothing: its run directory shows it already finished or failed, or its process
    still runs, left by a killed sweep; ``trial`` is updated from it). A run directory that cannot be resumed (no
    summary.json) or a failed trial's directory when ``retry_failed`` is moved aside to ``trial-NNN.old-N``
    first."""
    run_dir = sweep.trial_dir(trial)
    if trial.status in ("finished", "pruned") or (trial.status == "failed" and not retry_failed):
        return None
    summary = read_summary(run_dir)
    if trial.status != "failed" and summary is not None:
        status = summary.get("status")
        metrics = summary.get("metrics") if isinstance(summary.get("metrics"), dict) else {}
        if status == "finished":                 # finished while no sweep process watched it
            trial.status, trial.error, trial.metrics = "finished", None, metrics
            return None
        if status == "failed":
            trial.status, trial.metrics = "failed", metrics
            trial.error = " ".join(str(summary.get("error") or "the run failed").split())
            if not retry_failed:
                return None
        elif status == "running" and live_trial_pid(run_dir) is not None:
            # an earlier sweep process was killed and left this trial running: not started twice
            trial.status = "running"
            trial.error = (f"still running (process {summary.get('pid')}) from an earlier sweep process; "
                           f"run the sweep again once it has ended")
            return None
        else:
            return "resume"
    if run_dir.exists() and (not run_dir.is_dir() or any(run_dir.iterdir())):
        _move_aside(run_dir)
    return "run"
