"""Suite-wide: SIGTERM (``timeout``, CI, a job scheduler) stops the suite within seconds.

Python's handler raises KeyboardInterrupt, which pytest turns into a clean stop with its summary. A test that runs
sopt in this process may have sopt's own handler installed at that moment (a run finishes its step and checkpoints,
then hands the signal on to this one), or may be stuck in a long native call where no Python handler runs; so a
watchdog thread, woken by the C-level signal handler through Python's wakeup fd, ends the process GRACE_S seconds
after a SIGTERM whatever the main thread is doing. Tests that send SIGTERM to their own process on purpose use the
``own_sigterm`` fixture.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import threading
import time
from typing import Iterator

import pytest

GRACE_S = 8.0
_SENTINEL = 255   # a byte no signal number is: written after a test's own SIGTERMs, read back by the watchdog
_own_sigterm = threading.Event()   # set while a test sends SIGTERM to this process itself
_drained = threading.Event()       # the watchdog has read every byte up to the last sentinel
_wakeup: list[socket.socket] = []  # the writing end of the wakeup fd, once installed


def _on_sigterm(signum: int, frame: object) -> None:
    if _own_sigterm.is_set():
        return
    raise KeyboardInterrupt("SIGTERM")


def _watchdog(wakeup: socket.socket) -> None:
    # bytes arrive in signal order, so a test's own SIGTERMs are all read (while _own_sigterm is set) before the
    # sentinel its end writes
    while True:
        data = wakeup.recv(256)
        if not data:
            return
        for byte in data:
            if byte == _SENTINEL:
                _drained.set()
            elif byte == signal.SIGTERM and not _own_sigterm.is_set():
                time.sleep(GRACE_S)
                os._exit(128 + signal.SIGTERM)


def pytest_configure(config: pytest.Config) -> None:
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, None):
        return   # someone else (a plugin, an embedding runner) already handles it
    reader, writer = socket.socketpair()
    writer.setblocking(False)
    signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
    signal.signal(signal.SIGTERM, _on_sigterm)
    threading.Thread(target=_watchdog, args=(reader,), name="sigterm-watchdog", daemon=True).start()
    config._sopt_sigterm_sockets = (reader, writer)   # kept alive for the session
    _wakeup.append(writer)


@contextlib.contextmanager
def sending_own_sigterm() -> Iterator[None]:
    """While active, SIGTERM is the test's own business: neither the suite's handler nor its watchdog acts on it,
    and sopt's runner, finding the default handler beneath its own, does not hand it on."""
    previous = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _own_sigterm.set()
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
        if _wakeup:   # let the watchdog read this test's SIGTERMs while they are still its own
            _drained.clear()
            _wakeup[0].send(bytes([_SENTINEL]))
            _drained.wait(10.0)
        _own_sigterm.clear()


@pytest.fixture
def own_sigterm() -> Iterator[None]:
    """For a test that raises SIGTERM in its own process (to stop an in-process run as a user's kill would)."""
    with sending_own_sigterm():
        yield


@pytest.fixture(scope="module")
def own_sigterm_module() -> Iterator[None]:
    """:func:`own_sigterm` for a module-scoped fixture."""
    with sending_own_sigterm():
        yield
