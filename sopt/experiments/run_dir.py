"""Run directories: where a run's files go, never overwriting a run a user made.

``runs/<problem>/<YYYYmmdd-HHMMSS>-<6 hex>/`` (or ``--out DIR``, which must be new or empty) holds:
``config.toml`` (the resolved config), ``overrides.txt``, ``metrics.jsonl``, ``summary.json`` (status, steps, final
metrics), ``env.json`` (versions, device, git commit), ``checkpoint.npz`` and the problem's pictures.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import pathlib
import platform
import socket
import subprocess
import sys
from typing import Any

from sopt.config.files import write_atomic

CONFIG_FILE, OVERRIDES_FILE, METRICS_FILE, SUMMARY_FILE, ENV_FILE, CHECKPOINT_FILE, ERROR_FILE = (
    "config.toml", "overrides.txt", "metrics.jsonl", "summary.json", "env.json", "checkpoint.npz", "error.txt")
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
    if path.is_dir() and any(path.iterdir()):
        hint = (f"; continue that run with: sopt resume {text}" if (path / SUMMARY_FILE).exists()
                else "; name a new folder")
        raise RunDirError(f"--out {text!r} already exists and is not empty (nothing is overwritten){hint}")
    for parent in path.parents:
        if parent.exists() and not parent.is_dir():
            raise RunDirError(f"--out {text!r}: {str(parent)!r} is a file, so no folder can be made under it")
    return path


def claim_out_dir(out: str | os.PathLike[str]) -> pathlib.Path:
    """``out`` checked (:func:`check_out_dir`) and created for a new run."""
    path = check_out_dir(out)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RunDirError(f"--out {os.fspath(out)!r} cannot be created: {exc.strerror or exc}") from None
    return path


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


def read_metrics(path: pathlib.Path) -> list[dict[str, Any]]:
    """The metrics records of a metrics.jsonl (one JSON object per line with a ``step``): events, and a line that
    is no such object (the partial last line of a killed run), left out; [] when the file is missing."""
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
        if isinstance(record, dict) and "event" not in record and "step" in record:
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
