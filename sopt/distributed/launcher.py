"""launch: N local processes of one sopt command, one per GPU, as ``torchrun --nproc-per-node N`` would start them.

Each process gets torch.distributed's ``env://`` variables (``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``,
``LOCAL_WORLD_SIZE``, ``MASTER_ADDR=127.0.0.1``, a free ``MASTER_PORT``) and :data:`~sopt.distributed.environment.
MULTICAST_OFF`; it picks GPU ``LOCAL_RANK`` itself (:func:`sopt.distributed.data_parallel.start`).

- Rank 0 writes to this terminal (its progress bar, its result, its one-line error); the other ranks' output goes
  to temporary files, read only when one of them fails.
- The processes run in a session of their own, so a Ctrl-C in the terminal reaches the launcher alone, which
  passes SIGINT or SIGTERM on to every rank once per signal (a rank acts on it after the same step as the others,
  rank 0 checkpoints, and the run can be resumed); each rank also gets SIGTERM if the launcher dies.
- When a rank fails (exits non-zero) the launcher stops the others (SIGTERM, then SIGKILL after
  :data:`GRACE_SECONDS`: a rank waiting in a collective for the failed one cannot act on a signal), prints the
  failed rank's one-line error unless it was rank 0's (already printed) and returns its exit status.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from typing import IO, Sequence

from sopt.distributed.environment import keep_multicast_off
from sopt.train.stop_signals import handling_stop_signals

GRACE_SECONDS = 5.0   # after SIGTERM, before SIGKILL, for ranks stopped because another failed
_PR_SET_PDEATHSIG = 1


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (the OS's choice), for rank 0's rendezvous."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rank_environments(nproc: int, port: int, base: dict[str, str] | None = None) -> list[dict[str, str]]:
    """The environment of each of ``nproc`` local ranks: ``base`` (this process's by default) plus the
    ``env://`` variables and MULTICAST_OFF."""
    envs = []
    for rank in range(nproc):
        env = dict(os.environ if base is None else base)
        env.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(nproc), LOCAL_WORLD_SIZE=str(nproc),
                   GROUP_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        keep_multicast_off(env)
        envs.append(env)
    return envs


def _die_with_parent() -> None:
    """In the child, before exec: SIGTERM when the launcher dies (Linux), and a session of its own."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def last_error_line(text: str) -> str:
    """The one-line error of a rank's output: its last ``error: ...`` line, else its last non-empty line (a
    traceback's exception), else a note that it printed nothing."""
    lines = [line.strip() for line in text.replace("\r", "\n").splitlines() if line.strip()]
    for line in reversed(lines):
        if line.startswith("error: "):
            return line[len("error: "):]
    return lines[-1] if lines else "it printed nothing"


def launch(nproc: int, command: Sequence[str], *, out: IO[str] | None = None) -> int:
    """Run ``command`` (argv, e.g. ``[sys.executable, "-m", "sopt", "run", ...]``) as ``nproc`` ranks and wait
    for them; returns 0 when every rank succeeded, else the exit status of the first rank that failed (see the
    module docstring). ``out``: where the launcher's own error lines go (stderr)."""
    out = out if out is not None else sys.stderr
    port = free_port()
    envs = rank_environments(nproc, port)
    logs = [tempfile.TemporaryFile(mode="w+", prefix=f"sopt-rank{r}-") if r else None for r in range(nproc)]
    procs: list[subprocess.Popen] = []
    forwarded: list[int] = []

    def forward(signum: int, frame: object) -> None:
        forwarded.append(signum)
        for p in procs:
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    p.send_signal(signum)

    stop_signals = handling_stop_signals(forward)
    stop_signals.__enter__()
    try:
        for rank in range(nproc):
            log = logs[rank]
            procs.append(subprocess.Popen(list(command), env=envs[rank], start_new_session=True,
                                          preexec_fn=_die_with_parent, stdin=subprocess.DEVNULL,
                                          stdout=log if log is not None else None,
                                          stderr=log if log is not None else None))
        failed: tuple[int, int] | None = None   # (rank, status) of the first rank that failed
        while True:
            codes = [p.poll() for p in procs]
            if failed is None:
                bad = [(r, c) for r, c in enumerate(codes) if c not in (None, 0)]
                if bad:
                    failed = bad[0]
                    _stop_all(procs)
            if all(c is not None for c in codes):
                break
            time.sleep(0.05)
        if failed is None:
            return 0
        rank, status = failed
        if rank != 0:
            logs[rank].seek(0)
            print(f"error: rank {rank} of {nproc} failed (exit status {status}): {last_error_line(logs[rank].read())}",
                  file=out)
        return status if status > 0 else 2   # a rank killed by a signal: -signum
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        for log in logs:
            if log is not None:
                log.close()
        stop_signals.__exit__(None, None, None)   # last: it may hand a signal on to the program's own handler


def _stop_all(procs: list[subprocess.Popen]) -> None:
    """SIGTERM to every rank still running, SIGKILL to those still there after GRACE_SECONDS."""
    for p in procs:
        if p.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                p.terminate()
    deadline = time.monotonic() + GRACE_SECONDS
    while time.monotonic() < deadline and any(p.poll() is None for p in procs):
        time.sleep(0.05)
    for p in procs:
        if p.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                p.kill()
