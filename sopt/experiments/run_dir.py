"""Run directories: where a run's files go, never overwriting a run a user made.

``runs/<problem>/<YYYYmmdd-HHMMSS>-<6 hex>/`` (or ``--out DIR``, which must be new or empty) holds:
``config.toml`` (the resolved config), ``overrides.txt``, ``metrics.jsonl``, ``summary.json`` (status, steps, final
metrics), ``env.json`` (versions, device, git commit), ``checkpoint.npz`` and the problem's pictures; after a
failure ``error.txt`` (the traceback). Two hidden files keep a run safe: ``.lock`` (:class:`RunLock`: one process
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
import subprocess
import sys
import threading
from typing import Any

from sopt.config.files import write_atomic

CONFIG_FILE, OVERRIDES_FILE, METRICS_FILE, SUMMARY_FILE, ENV_FILE, CHECKPOINT_FILE, ERROR_FILE = (
    "config.toml", "overrides.txt", "metrics.jsonl", "summary.json", "env.json", "checkpoint.npz", "error.txt")
LOCK_FILE, STARTED_CONFIG_FILE = ".lock", ".config.json"
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


def check_out_dir(out: str | os.PathLike[str]) -> pathlib.Path:
    """``out`` as a path if a new run may go there (it does not exist, or is an empty folder), without creating
    anything; RunDirError for an empty name, a file, a folder under a file or a folder that already holds
    something (nothing is overwritten)."""
    text = os.fspath(out)
    if text.strip() == "":
        raise RunDirError("--out '' is empty; name a new folder")
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

    def __init__(self, run_dir: str | os.PathLike[str]) -> None:
        self.run_dir = pathlib.Path(run_dir)
        self.key = os.path.realpath(self.run_dir)

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
                raise RunDirError(f"cannot lock the run in {str(self.run_dir)!r} ({LOCK_FILE}): "
                                  f"{exc.strerror or exc}") from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
                os.close(fd)
                if exc.errno not in (errno.EAGAIN, errno.EWOULDBLOCK):
                    raise RunDirError(f"cannot lock the run in {str(self.run_dir)!r} ({LOCK_FILE}): "
                                      f"{exc.strerror or exc}") from None
                raise RunDirError(f"the run in {str(self.run_dir)!r} is in use by process {holder} (a sopt run or "
                                  "sopt resume of it); wait for it to end or stop it (Ctrl-C or kill, which "
                                  "checkpoints) first") from None
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
    """The commit of the sopt source tree when it is a git checkout (None for an installed wheel)."""
    root = pathlib.Path(__file__).resolve().parents[2]
    if not (root / ".git").exists():
        return None
    try:
        out = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5)
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    return out.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


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


def read_summary(run_dir: pathlib.Path) -> dict[str, Any]:
    """The run's summary.json ({} when missing or unreadable: a run killed before writing it)."""
    try:
        return json.loads((run_dir / SUMMARY_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def read_metrics(path: pathlib.Path, events: bool = False) -> list[dict[str, Any]]:
    """The metrics records of a metrics.jsonl (one JSON object per line with a ``step``): events (unless
    ``events``), and a line that is no such object (the partial last line of a killed run), left out; [] when the
    file is missing."""
    try:
        text = path.read_text(encoding="utf-8")
    except (FileNotFoundError, NotADirectoryError):
        return []
    records = []
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and (events or "event" not in record) and "step" in record:
            records.append(record)
    return records


def run_alive(run_dir: pathlib.Path, pid: Any) -> bool:
    """Whether the run in ``run_dir`` still has a live process: ``pid`` (its summary's) runs on this host, which is
    the run's (env.json names it; a run of another host cannot be checked from here and counts as not running), and
    is not this process."""
    try:
        host = json.loads((run_dir / ENV_FILE).read_text(encoding="utf-8")).get("host")
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


def now_iso() -> str:
    return datetime.datetime.now().isoformat(timespec="seconds")
