"""Reading run and sweep directories for ``sopt report``: one :class:`RunRecord` per run.

A run directory (written by ``sopt run``) holds ``config.toml`` (the resolved config), ``summary.json``
(``{"status", "steps", "total_steps", "time_s", "metrics": {name: number}, "error", ...}``) and ``metrics.jsonl``
(one ``{"step": int, "loss": float, ...}`` per metrics step; records with an ``"event"`` key are events). A sweep
directory (``sopt sweep``) holds ``sweep.json`` whose ``trials`` name run directories inside it and whose ``space``
names the swept keys. :func:`collect_runs` accepts either, or a folder holding them (searched recursively).

The reader is tolerant of runs in any state: a run still running (or killed) may lack metrics.jsonl or have a
partial last line, a failed run has an error and maybe no metrics, a pending sweep trial has no directory yet.
What cannot be read becomes a note on the record, never an exception; only "no runs at all" is an error.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import pathlib
from typing import Any

from sopt.config.files import read_config
from sopt.config.schema import ConfigError, short
from sopt.experiments.run_dir import CONFIG_FILE, read_json, read_metrics, run_alive
from sopt.utils.regular_file import name_problem

# Files that make a folder a run directory or a sweep directory.
RUN_MARKERS = ("summary.json", "config.toml")
SWEEP_MARKER = "sweep.json"
# Sweep verdicts that override what the trial's own summary.json says (the sweep decided after the run ended).
SWEEP_FINAL_STATUSES = ("failed", "pruned")
# How deep collect_runs looks below a folder for run and sweep directories (runs/<problem>/<run> is depth 2).
MAX_SEARCH_DEPTH = 4


class NoRunsError(ValueError):
    """A DIR argument that is missing or holds no run; the message is one line."""


@dataclasses.dataclass
class RunRecord:
    """One run as the report sees it.

    ``path``: the run directory (a pending sweep trial's may not exist). ``name``: set by :func:`collect_runs`,
    the path relative to the runs' common parent. ``config``: config.toml flattened to dotted keys
    (``{"optimizer.learning_rate": 0.01}``; None when the run has no readable config.toml). ``metrics``: final
    metrics, name -> float (summary.json's, NaN for a null; the last metrics record's when the summary has none
    yet). ``params``: the sweep trial's parameters (empty outside a sweep). ``notes``: what could not be read.
    """

    path: pathlib.Path
    name: str = ""
    status: str = "unknown"
    config: dict[str, Any] | None = None
    metrics: dict[str, float] = dataclasses.field(default_factory=dict)
    steps_done: int | None = None
    total_steps: int | None = None
    time_s: float | None = None
    error: str | None = None
    params: dict[str, Any] = dataclasses.field(default_factory=dict)
    sweep: pathlib.Path | None = None
    notes: list[str] = dataclasses.field(default_factory=list)
    _history: list[dict[str, Any]] | None = dataclasses.field(default=None, repr=False)

    def value(self, key: str) -> Any:
        """The run's value of a dotted config key: config.toml's, else the sweep trial's parameter, else None."""
        if self.config is not None and key in self.config:
            return self.config[key]
        return self.params.get(key)

    def history(self) -> list[dict[str, Any]]:
        """metrics.jsonl's metrics records (events left out), read once; [] when the file is missing, and with a
        note when it cannot be read (a FIFO or device put there, a file over the reader's limit)."""
        if self._history is None:
            try:
                self._history = read_metrics(self.path / "metrics.jsonl")
            except OSError as exc:
                self.notes.append(f"metrics.jsonl: unreadable ({' '.join(str(exc).split())})")
                self._history = []
        return self._history

    def series(self, metric: str) -> tuple[list[int], list[float]]:
        """(steps, values) of one scalar metric over the run; records without it, or with a non-number (a list,
        or null for a non-finite value), are left out."""
        steps, values = [], []
        for record in self.history():
            step, value = record.get("step"), record.get(metric)
            if _is_number(step) and _is_number(value):
                steps.append(int(step))
                values.append(float(value))
        return steps, values

    def last_logged(self, metric: str) -> float | None:
        """The value of ``metric`` in metrics.jsonl's last record holding it as a number: where the run's curve
        of it ends (None when no record has it). summary.json's final value may differ: a problem's ``finish``
        may evaluate the metric anew (a fitting problem: its loss at the fitted values, after the last step)."""
        values = self.series(metric)[1]
        return values[-1] if values else None


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def format_key_value(value: Any) -> str:
    """A config value as a legend or table shows it: TOML-like booleans, 6 significant digits, lists as JSON."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, (list, dict)):
        return json.dumps(value)
    return str(value)


def flatten(table: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested dicts as dotted keys: ``{"a": {"b": 1}, "c": 2}`` -> ``{"a.b": 1, "c": 2}`` (lists stay values)."""
    out: dict[str, Any] = {}
    for key, value in table.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, dotted + "."))
        else:
            out[dotted] = value
    return out


def _final_metrics(raw: Any) -> dict[str, float]:
    """The scalar numbers of a metrics dict as floats (null -> NaN: JSON's stand-in for a non-finite value)."""
    if not isinstance(raw, dict):
        return {}
    out = {}
    for key, value in raw.items():
        if value is None:
            out[str(key)] = math.nan
        elif _is_number(value):
            out[str(key)] = float(value)
    return out


def _read_json_object(path: pathlib.Path, notes: list[str]) -> dict[str, Any] | None:
    try:
        data = read_json(path)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        notes.append(f"{path.name}: unreadable ({' '.join(str(exc).split())})")
        return None
    if not isinstance(data, dict):
        notes.append(f"{path.name}: not a JSON object")
        return None
    return data


def read_run(path: pathlib.Path) -> RunRecord:
    """One run directory as a :class:`RunRecord` (``name`` left empty)."""
    record = RunRecord(path=path)
    try:
        if (path / CONFIG_FILE).exists() or (path / CONFIG_FILE).is_symlink():
            record.config = flatten(read_config(path / CONFIG_FILE))   # bounded: a FIFO there must not hang a report
    except ConfigError as exc:
        record.notes.append(f"{CONFIG_FILE}: unreadable ({' '.join(exc.lines)})")
    summary = _read_json_object(path / "summary.json", record.notes)
    if summary is not None:
        record.status = str(summary.get("status", "unknown"))
        if record.status == "running" and not run_alive(path, summary.get("pid")):
            # its process is gone without marking the run (kill -9, or a disk too full to write the summary)
            record.status = "interrupted"
            record.notes.append(f"summary.json says running, but its process {summary.get('pid')} is gone: "
                                "stopped, sopt resume continues it")
        record.metrics = _final_metrics(summary.get("metrics"))
        steps, total, time_s = summary.get("steps"), summary.get("total_steps"), summary.get("time_s")
        record.steps_done = int(steps) if _is_number(steps) else None
        record.total_steps = int(total) if _is_number(total) else None
        record.time_s = float(time_s) if _is_number(time_s) else None
        record.error = summary.get("error") if isinstance(summary.get("error"), str) else None
    if not record.metrics:
        # A run that has not reached its first checkpoint: its summary has no metrics yet, its log may.
        history = record.history()
        if history:
            record.metrics = _final_metrics(history[-1])
            record.metrics.pop("step", None)
    return record


def read_sweep(path: pathlib.Path) -> tuple[list[RunRecord], dict[str, Any]]:
    """A sweep directory's trials as RunRecords (in sweep.json's order) and sweep.json itself (``{}`` when it
    is unreadable: its runs are then found as plain run directories)."""
    notes: list[str] = []
    sweep = _read_json_object(path / SWEEP_MARKER, notes)
    trials = sweep.get("trials") if sweep is not None else None
    if not isinstance(trials, list):
        return [], {}
    records = []
    for index, trial in enumerate(trials):
        if not isinstance(trial, dict):
            continue
        trial_dir = path / str(trial.get("dir") or trial.get("id") or f"trial-{index:03d}")
        if trial_dir.is_dir():
            record = read_run(trial_dir)
        else:
            record = RunRecord(path=trial_dir, metrics=_final_metrics(trial.get("metrics")))
        sweep_status = trial.get("status")
        if isinstance(sweep_status, str) and (sweep_status in SWEEP_FINAL_STATUSES or record.status == "unknown"):
            record.status = sweep_status
        if record.error is None and isinstance(trial.get("error"), str):
            record.error = trial["error"]
        if isinstance(trial.get("params"), dict):
            record.params = dict(trial["params"])
        record.sweep = path
        records.append(record)
    return records, sweep


def _is_run_dir(path: pathlib.Path) -> bool:
    return any((path / marker).is_file() for marker in RUN_MARKERS)


@dataclasses.dataclass
class Collection:
    """What :func:`collect_runs` found. ``runs``: named, in the order found. ``sweeps``: sweep directory ->
    its sweep.json. ``space_keys``: the sweeps' swept keys in the order their spaces give them."""

    runs: list[RunRecord]
    sweeps: dict[pathlib.Path, dict[str, Any]]

    @property
    def space_keys(self) -> list[str]:
        keys: list[str] = []
        for sweep in self.sweeps.values():
            space = sweep.get("space")
            for key in space if isinstance(space, dict) else []:
                if key not in keys:
                    keys.append(str(key))
        return keys


def _search(folder: pathlib.Path, depth: int, runs: list[RunRecord],
            sweeps: dict[pathlib.Path, dict[str, Any]]) -> None:
    if (folder / SWEEP_MARKER).is_file():
        records, sweep = read_sweep(folder)
        if sweep:
            runs.extend(records)
            sweeps[folder] = sweep
            return
    if _is_run_dir(folder):
        runs.append(read_run(folder))
        return
    if depth >= MAX_SEARCH_DEPTH:
        return
    try:
        children = sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))
    except OSError:
        return
    for child in children:
        if not child.is_symlink():
            _search(child, depth + 1, runs, sweeps)


def collect_runs(dirs: list[str | os.PathLike[str]]) -> Collection:
    """Every run under ``dirs`` (run directories, sweep directories or folders holding them), each run once,
    named by its path relative to the runs' common parent.

    Raises NoRunsError (one line) for a DIR that does not exist, is not a folder, or holds no run.
    """
    runs: list[RunRecord] = []
    sweeps: dict[pathlib.Path, dict[str, Any]] = {}
    for given in dirs:
        folder = pathlib.Path(given)
        problem = name_problem(given)
        if problem is not None:
            raise NoRunsError(f"{short(os.fspath(given), 80)} {problem}")
        if not folder.exists():
            raise NoRunsError(f"{str(given)!r}: no such folder")
        if not folder.is_dir():
            raise NoRunsError(f"{str(given)!r}: not a folder (give a run directory, a sweep directory or a "
                              f"folder holding them)")
        found: list[RunRecord] = []
        _search(folder.resolve(), 0, found, sweeps)
        if not found:
            raise NoRunsError(f"{str(given)!r}: no run directory (summary.json or config.toml) or sweep "
                              f"directory (sweep.json) in it")
        runs.extend(found)
    unique: dict[pathlib.Path, RunRecord] = {}
    for record in runs:
        unique.setdefault(record.path, record)   # a run given twice (itself and its folder) counts once
    records = list(unique.values())
    parent = pathlib.Path(os.path.commonpath([str(r.path.parent) for r in records]))
    for record in records:
        record.name = record.path.relative_to(parent).as_posix()
    return Collection(runs=records, sweeps=sweeps)
