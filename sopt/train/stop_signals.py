"""SIGINT and SIGTERM handled for the length of a run, then handed back to whoever had them.

Training loops, sweeps and the multi-process launcher all turn a stop signal into "finish the step, checkpoint,
stop". While they do, the process's own handlers are set aside; when they are done, a signal that arrived is
delivered again to a handler the program itself installed (a Python function other than Python's default
KeyboardInterrupt one), so an embedding program, or the test suite's SIGTERM handler, still learns that it was asked
to stop. With the default handlers (``sopt run``) nothing is re-delivered: the run stopped cleanly and exits 0.
"""

from __future__ import annotations

import contextlib
import signal
from typing import Any, Callable, Iterator

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _program_handler(handler: Any) -> bool:
    """Whether ``handler`` is a Python handler the program installed (not SIG_DFL, SIG_IGN or Python's default)."""
    return callable(handler) and handler is not signal.default_int_handler


@contextlib.contextmanager
def handling_stop_signals(on_signal: Callable[[int, Any], None]) -> Iterator[list[int]]:
    """Calls ``on_signal(signum, frame)`` for SIGINT and SIGTERM while the block runs (only in the main thread:
    elsewhere Python allows no handlers and the block runs without them). Yields the list of signals received;
    on exit the previous handlers are restored and each received signal whose previous handler was the program's
    own is raised again, once."""
    received: list[int] = []

    def handle(signum: int, frame: Any) -> None:
        received.append(signum)
        on_signal(signum, frame)

    saved: dict[int, Any] = {}
    for sig in STOP_SIGNALS:
        try:
            saved[sig] = signal.signal(sig, handle)
        except ValueError:   # not the main thread
            pass
    try:
        yield received
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
        for sig in dict.fromkeys(received):
            if _program_handler(saved.get(sig)):
                signal.raise_signal(sig)
