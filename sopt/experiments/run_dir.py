"""Run directories: where a run's files go, never overwriting a run a user made.

``runs/<problem>/<YYYYmmdd-HHMMSS>-<6 hex>/`` (or ``--out DIR``, which must be new or empty) holds:
``config.toml`` (the resolved config), ``overrides.txt``, ``metrics.jsonl``, ``summary.json`` (status, steps, final
metrics), ``env.json`` (versions, device, git commit), ``inputs.json`` (the size and sha256 of each file the problem
reads as data, :meth:`~sopt.experiments.problem.Problem.input_files`), ``checkpoint.npz`` and the problem's
pictures; after a failure ``error.txt`` (the traceback). Two hidden files keep a run safe: ``.lock`` (:class:`RunLock`: one process
at a time runs or resumes it) and ``.config.json`` (the resolved config as the run started, so that a resume can
tell an edited ``config.toml``).
"""

from __future__ import annotations

import datetime
import errno
import fcntl
import hashlib
import json
import os
import pathlib
import platform
import socket
import sys
import threading
from typing import Any

from sopt.config.files import write_atomic
from sopt.config.schema import short
from sopt.utils.nesting import text_depth
from sopt.utils.regular_file import NotRegularFileError, name_problem, open_regular, read_bytes

CONFIG_FILE, OVERRIDES_FILE, METRICS_FILE, SUMMARY_FILE, ENV_FILE, CHECKPOINT_FILE, ERROR_FILE = (
    "config.toml", "overrides.txt", "metrics.jsonl", "summary.json", "env.json", "checkpoint.npz", "error.txt")
LOCK_FILE, STARTED_CONFIG_FILE = ".lock", ".config.json"
INPUTS_FILE = "inputs.json"   # the fingerprints (size, sha256) of the files the run reads as data
STATUSES = ("running", "finished", "interrupted", "failed")


class RunDirError(ValueError):
    """A folder that cannot take a new run (exists and is not empty, is a file) or holds no run to resume."""


def new_run_dir(root: str | os.PathLike[str], problem: str, config_text: str) -> pathlib.Path:
    """A new folder ``root/<problem>/<date>-<time>-<6 hex>`` (created; the hex hashes the config and the
    clock, so two runs started in the same second get different folders)."""
    base = pathlib.Path(root) / problem
    for attempt in range(100):
        now = datetime.datetime.now()
        digest = hashlib.sha256(f"{config_text}|{now.isoformat()}|{os.getpid()}|{attempt}".encode()).hexdigest()[:6]
        path = base / f"{now:%Y%m%d-%H%M%S}-{digest}"
        try:
            path.mkdir(parents=True, exist_ok=False)
            return path
        except FileExistsError:
            continue
        except OSError as exc:   # a file where a folder must be, no permission: one line, not a traceback
            raise RunDirError(f"--root {os.fspath(root)!r}: cannot create the run folder {str(path)!r}: "
                              f"{exc.strerror or exc}") from None
    raise RunDirError(f"could not create a new run folder under {str(base)!r}")


def check_name(path: str | os.PathLike[str], what: str) -> None:
    """RunDirError naming ``what`` (``--out``, ``sopt resume``) when no filesystem takes ``path`` as a name (a NUL,
    a name or path too long): one line, before anything is created or a traceback from deep inside."""
    problem = name_problem(path)
    if problem is not None:
        raise RunDirError(f"{what} {short(os.fspath(path), 80)} {problem}")


def check_out_dir(out: str | os.PathLike[str]) -> pathlib.Path:
    """``out`` as a path if a new run may go there (it does not exist, or is an empty folder), without creating
    anything; RunDirError for an empty name, a file, a folder under a file or a folder that already holds
    something (nothing is overwritten)."""
    text = os.fspath(out)
    if text.strip() == "":
        raise RunDirError("--out '' is empty; name a new folder")
    check_name(text, "--out")
    path = pathlib.Path(text)
    if path.exists() and not path.is_dir():
        raise RunDirError(f"--out {text!r} is a file, not a folder; name a new folder")
    # a lock file alone is what a run that failed before writing anything leaves: the folder is still free
    if path.is_dir() and any(p.name != LOCK_FILE for p in path.iterdir()):
        hint = (f"; continue that run with: sopt resume {text}" if (path / SUMMARY_FILE).exists()
                else "; name a new folder")
        raise RunDirError(f"--out {text!r} already exists and is not empty (nothing is overwritten){hint}")
    for parent in path.parents:
        if parent.exists() and not parent.is_dir():
            raise RunDirError(f"--out {text!r}: {str(parent)!r} is a file, so no folder can be made under it")
    # the folder, or the nearest folder above it that exists (where it will be made), must take new files
    check_writable(next(p for p in (path, *path.parents) if p.exists()), f"--out {text!r}")
    return path


def check_root_dir(root: str | os.PathLike[str]) -> pathlib.Path:
    """``root`` as a path if run folders can be made below it, without creating anything; RunDirError when it, or
    a folder above it, is a file, or where it would be made takes no new files. Checked before the device opens
    and kernels load, so such a mistake is one line and nothing else."""
    text = os.fspath(root)
    path = pathlib.Path(text)
    for folder in (path, *path.parents):
        if folder.exists() and not folder.is_dir():
            raise RunDirError(f"--root {text!r}: cannot create the run folder under it: {str(folder)!r} is a file")
    check_writable(next(p for p in (path, *path.parents) if p.exists()), f"--root {text!r}")
    return path


def check_writable(folder: pathlib.Path, what: str, files: tuple[str, ...] = ()) -> None:
    """RunDirError unless this process can create and replace files in ``folder`` and write each of ``files`` in
    it that exists (those appended in place): a read-only folder or file system is found before any GPU work,
    not at the first write minutes later."""
    targets = [folder, *(folder / f for f in files if (folder / f).exists())]
    for target in targets:
        mode = os.W_OK | os.X_OK if target.is_dir() else os.W_OK
        if not os.access(target, mode):
            where = "" if target == folder else f": {target.name} cannot be written"
            raise RunDirError(f"{what}: {str(folder)!r} is read-only for this process{where}; make it writable "
                              "(chmod u+w) or use another folder")


def claim_out_dir(out: str | os.PathLike[str]) -> pathlib.Path:
    """``out`` checked (:func:`check_out_dir`) and created for a new run."""
    path = check_out_dir(out)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RunDirError(f"--out {os.fspath(out)!r} cannot be created: {exc.strerror or exc}") from None
    return path


class RunLock:
    """An exclusive, non-blocking lock on a run directory, held while a process runs or resumes the run:
    ``fcntl.flock`` on its ``.lock`` file, which also records the holder's pid for the message a second process
    gets (RunDirError naming it). The kernel drops the lock when the holder exits, however it ends (``kill -9``
    too), so a stale lock cannot block a resume. Re-entrant within a process: the CLI takes it before building the
    problem and :mod:`sopt.experiments.runner` again around the training.
    """

    _held: dict[str, list[int]] = {}   # realpath -> [fd, depth]
    _guard = threading.Lock()

    def __init__(self, run_dir: str | os.PathLike[str], what: str = "the run in",
                 holder: str = "a sopt run or sopt resume of it",
                 advice: str = "wait for it to end or stop it (Ctrl-C or kill, which checkpoints) first") -> None:
        self.run_dir = pathlib.Path(run_dir)
        self.key = os.path.realpath(self.run_dir)
        self.what, self.holder, self.advice = what, holder, advice   # for the messages (a sweep's differ)

    def __enter__(self) -> "RunLock":
        with RunLock._guard:
            held = RunLock._held.get(self.key)
            if held is not None:
                held[1] += 1
                return self
            path = self.run_dir / LOCK_FILE
            try:   # O_NOFOLLOW: a link planted at .lock is refused, not followed
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
            except OSError as exc:
                raise RunDirError(f"cannot lock {self.what} {str(self.run_dir)!r} ({LOCK_FILE}): "
                                  f"{exc.strerror or exc}") from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
                os.close(fd)
                if exc.errno not in (errno.EAGAIN, errno.EWOULDBLOCK):
                    raise RunDirError(f"cannot lock {self.what} {str(self.run_dir)!r} ({LOCK_FILE}): "
                                      f"{exc.strerror or exc}") from None
                raise RunDirError(f"{self.what} {str(self.run_dir)!r} is in use by process {holder} ({self.holder}); "
                                  f"{self.advice}") from None
            try:   # the pid is only for that message: a full disk must not stop the run here
                os.ftruncate(fd, 0)
                os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
            except OSError:
                pass
            RunLock._held[self.key] = [fd, 1]
            return self

    def __exit__(self, *exc: Any) -> None:
        with RunLock._guard:
            held = RunLock._held[self.key]
            held[1] -= 1
            if held[1] == 0:
                del RunLock._held[self.key]
                os.close(held[0])   # releases the lock; the file stays (unlinking it would race a new holder)


def _git_commit() -> str | None:
    """The commit sopt runs from: asked of git in a source checkout, else the one recorded when it was installed
    (``sopt._build_info``, written by ``pip install .`` from a checkout; None for a copy built without git)."""
    from sopt import _build_info
    return _build_info.git_commit(pathlib.Path(__file__).resolve().parents[2]) or _build_info.GIT_COMMIT


def environment(device: Any = None) -> dict[str, Any]:
    """What env.json records: versions, the device, the git commit, the command line and the host."""
    import numpy
    import slangpy

    import sopt
    info: dict[str, Any] = {"sopt": sopt.__version__, "slangpy": slangpy.__version__, "numpy": numpy.__version__,
                            "python": platform.python_version(), "platform": platform.platform(),
                            "host": socket.gethostname(), "argv": sys.argv, "git_commit": _git_commit(),
                            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")}
    if device is not None:
        info["device"] = {"kind": sopt.device_kind(), "adapter": device.info.adapter_name}
    return info


def write_json(path: pathlib.Path, data: Any) -> None:
    """``data`` as indented JSON at ``path``, atomically."""
    write_atomic(path, json.dumps(data, indent=2, allow_nan=False, default=str) + "\n")


MAX_RUN_JSON_BYTES = 16 * 2**20   # summary.json, env.json, .config.json: a few KiB each
MAX_METRICS_BYTES = 2**30         # metrics.jsonl: ~300 bytes a record, at most 10^7 steps of them
MAX_RUN_JSON_DEPTH = 64           # the files a run writes nest a few levels; json.loads recurses


def parse_json(text: str | bytes, where: str) -> Any:
    """The JSON value in ``text`` (a file or a line of one that sopt wrote in a run, which anyone may have edited):
    ValueError, never RecursionError, when it nests beyond MAX_RUN_JSON_DEPTH or is no JSON."""
    if isinstance(text, bytes):
        text = text.decode("utf-8")   # UnicodeDecodeError is a ValueError
    depth = text_depth(text)
    if depth > MAX_RUN_JSON_DEPTH:
        raise ValueError(f"{where} is nested {depth} levels deep; sopt writes at most {MAX_RUN_JSON_DEPTH}")
    return json.loads(text)


def read_json(path: pathlib.Path) -> Any:
    """The JSON value of ``path``, a file a run holds, read bounded: only a regular file (a FIFO or a device put in
    its place is refused, never waited on or read without end) of at most MAX_RUN_JSON_BYTES; OSError
    (FileNotFoundError for a missing file) or ValueError otherwise."""
    return parse_json(read_bytes(path, MAX_RUN_JSON_BYTES), str(path))


def read_summary(run_dir: pathlib.Path) -> dict[str, Any]:
    """The run's summary.json ({} when missing or unreadable: a run killed before writing it)."""
    try:
        summary = read_json(run_dir / SUMMARY_FILE)
    except (OSError, ValueError):
        return {}
    return summary if isinstance(summary, dict) else {}


def metrics_record(line: str | bytes, events: bool = False) -> dict[str, Any] | None:
    """The record on one line of a metrics.jsonl (a JSON object with a ``step``), or None for an event (unless
    ``events``) and for a line that is no such object (the partial last line of a killed run)."""
    try:
        record = parse_json(line, "a metrics.jsonl line")
    except ValueError:
        return None
    if isinstance(record, dict) and (events or "event" not in record) and "step" in record:
        return record
    return None


def read_metrics(path: pathlib.Path, events: bool = False) -> list[dict[str, Any]]:
    """The metrics records of a metrics.jsonl (:func:`metrics_record` of each line, read bounded as
    :func:`read_json` reads, up to MAX_METRICS_BYTES); [] when the file is missing."""
    try:
        text = read_bytes(path, MAX_METRICS_BYTES).decode("utf-8", "replace")
    except (FileNotFoundError, NotADirectoryError):
        return []
    records = (metrics_record(line, events) for line in text.splitlines())
    return [r for r in records if r is not None]


def run_alive(run_dir: pathlib.Path, pid: Any) -> bool:
    """Whether the run in ``run_dir`` still has a live process: ``pid`` (its summary's) runs on this host, which is
    the run's (env.json names it; a run of another host cannot be checked from here and counts as not running), and
    is not this process."""
    try:
        host = read_json(run_dir / ENV_FILE).get("host")
    except (OSError, ValueError, AttributeError):
        host = None
    if host is not None and host != socket.gethostname():
        return False
    if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0 or pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


_HASH_CHUNK = 1 << 20


def fingerprint(path: str | os.PathLike[str]) -> dict[str, Any]:
    """What ``inputs.json`` records of one input file: ``{"path", "size", "sha256"}`` (the whole file hashed, read
    in chunks), or ``{"path", "missing": true}`` / ``{"path", "not_a_file": true}`` (a FIFO or a device is not
    read, never waited on)."""
    shown = os.fspath(path)
    try:
        f = open_regular(path)
    except (FileNotFoundError, NotADirectoryError):
        return {"path": shown, "missing": True}
    except NotRegularFileError:
        return {"path": shown, "not_a_file": True}
    with f:
        digest, size = hashlib.sha256(), 0
        while chunk := f.read(_HASH_CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return {"path": shown, "size": size, "sha256": digest.hexdigest()}


def _described(entry: dict[str, Any] | None) -> str:
    if entry is None:
        return "(not an input)"
    if entry.get("missing"):
        return "missing"
    if entry.get("not_a_file"):
        return "not a regular file"
    return f"{entry.get('size')} bytes, sha256 {str(entry.get('sha256'))[:12]}"


def write_inputs(run_dir: pathlib.Path, files: list[pathlib.Path]) -> list[dict[str, Any]]:
    """Fingerprint ``files`` (:func:`fingerprint`) into ``run_dir``'s inputs.json, atomically; returns them."""
    entries = [fingerprint(f) for f in files]
    write_json(run_dir / INPUTS_FILE, {"files": entries})
    return entries


def input_changes(run_dir: pathlib.Path) -> list[str]:
    """The input files of the run in ``run_dir`` that differ now from its inputs.json (size or sha256; one gone,
    or no regular file any more) as ``path: before -> now``; [] for a run without inputs.json (one that predates
    it). RunDirError when inputs.json cannot be read."""
    try:
        recorded = read_json(run_dir / INPUTS_FILE)
        entries = recorded["files"]
        if not isinstance(entries, list) or not all(isinstance(e, dict) and isinstance(e.get("path"), str)
                                                    for e in entries):
            raise ValueError("its 'files' is not a list of {path, size, sha256}")
    except FileNotFoundError:
        return []
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise RunDirError(f"{str(run_dir / INPUTS_FILE)!r} (the fingerprints of the run's input files) cannot be "
                          f"read ({' '.join(str(exc).split())}); delete it to resume without checking the input "
                          "files") from None
    changes = []
    for entry in entries:
        now = fingerprint(entry["path"])
        keys = ("size", "sha256", "missing", "not_a_file")
        if any(entry.get(k) != now.get(k) for k in keys):
            changes.append(f"{entry['path']}: {_described(entry)} -> {_described(now)}")
    return changes


def now_iso() -> str:
    return datetime.datetime.now().isoformat(timespec="seconds")
