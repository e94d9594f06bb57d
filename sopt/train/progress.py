"""The training progress bar, whose rate and ETA leave out the time spent compiling kernels.

A first run on the software driver can spend minutes of its first steps compiling; a bar that averaged those in
would promise hours. :class:`TrainingRate` counts only the steps during which no kernel was used for the first
time (``sopt.runtime.device.compile_seconds`` did not move) and no newly compiled kernel ran for the first time, and
:class:`TrainingBar` shows that rate and the ETA it gives (``?`` until such a step was timed), while its elapsed
time stays the wall-clock time.

:class:`TrainingBar` lives in :mod:`sopt.train.progress_bar` and loads on first use (importing tqdm.auto and its
asyncio lengthens a run's start-up); a run without a bar (``sopt run --no-progress``) uses
:class:`HiddenBar` and never imports tqdm.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from typing import TYPE_CHECKING, Any, Callable, ContextManager

from sopt.runtime import device
from sopt.utils.lazy_exports import lazy_exports

__getattr__, __dir__ = lazy_exports(__name__)   # TrainingBar (tqdm) only when a bar is shown

if TYPE_CHECKING:
    from sopt.train.progress_bar import TrainingBar


def _process_age() -> float:
    """Seconds since this process started, from Linux's /proc (the start time in clock ticks since boot against
    the uptime); 0.0 where that cannot be read."""
    try:
        with open("/proc/self/stat", encoding="ascii") as stat:
            fields = stat.read().rpartition(")")[2].split()   # the command's name, in parentheses, may hold spaces
        with open("/proc/uptime", encoding="ascii") as uptime:
            up = float(uptime.read().split()[0])
        return max(0.0, up - int(fields[19]) / os.sysconf("SC_CLK_TCK"))   # field 22 of stat: starttime
    except (OSError, ValueError, IndexError):
        return 0.0


_PROCESS_START = time.perf_counter() - _process_age()   # on perf_counter's clock


def process_seconds() -> float:
    """Seconds since this process started (its command's start: interpreter start-up, imports, building the
    problem, compiling and training included), what ``sopt run`` reports as its time "here"; where the start
    cannot be read (not Linux), since this module was imported."""
    return time.perf_counter() - _PROCESS_START


class TrainingRate:
    """Steps per second over the steps that compiled nothing.

    ``clock`` (wall seconds) and ``compile_clock`` (seconds spent compiling so far) are read at each
    :meth:`tick`; an interval between two ticks in which ``compile_clock`` moved is left out entirely, its steps
    and its time (such a step's other first-use costs, allocations and call setup, are no training rate either),
    and so is every later one up to and including the first in which the host waited for the GPU: a driver may
    finish compiling a kernel only when it first runs (lavapipe does; :func:`sopt.runtime.device.compiling` has that
    happen inside the compile for sopt's kernels), and the host sees such time only when it waits.
    """

    def __init__(self, clock: Callable[[], float] = time.perf_counter,
                 compile_clock: Callable[[], float] = device.compile_seconds) -> None:
        self.clock, self.compile_clock = clock, compile_clock
        self.steps = 0          # steps counted in the rate
        self.seconds = 0.0      # their wall time
        self.excluded = 0       # steps left out because they compiled, or ran new kernels for the first time
        self._last = (clock(), compile_clock())
        self._unsynced_compile = False   # a compile whose kernels the GPU may not have run yet

    def tick(self, steps: int = 1, synced: bool = False) -> None:
        """``steps`` more steps (and whatever ran with them: callbacks) completed since the last tick; ``synced``:
        the host waited for the GPU to finish in that interval (a metrics read)."""
        now, compiled = self.clock(), self.compile_clock()
        last_now, last_compiled = self._last
        moved = compiled != last_compiled
        if moved or self._unsynced_compile:
            self.excluded += steps
            # a compile in the same interval as the wait may have come after it: wait for the next one
            self._unsynced_compile = moved or not synced
        else:
            self.steps += steps
            self.seconds += now - last_now
        self._last = (now, compiled)

    def rate(self) -> float | None:
        """Steps per second of the counted steps; None before any was timed."""
        if self.steps == 0 or self.seconds <= 0.0:
            return None
        return self.steps / self.seconds

    def eta(self, remaining: int) -> float | None:
        """Seconds for ``remaining`` more steps at :meth:`rate`; None when it is not known yet."""
        rate = self.rate()
        return None if rate is None else remaining / rate


class HiddenBar:
    """What a run without a progress bar updates instead of a disabled tqdm bar (``TrainingBar(disable=True)``,
    whose methods return at once): the same calls, doing nothing, without importing tqdm."""

    training_rate: TrainingRate | None = None

    def update(self, n: float = 1) -> None:
        """Nothing (a bar would count ``n`` more steps)."""

    def set_postfix(self, ordered_dict: Any = None, refresh: bool = True, **kwargs: Any) -> None:
        """Nothing (a bar would show these metrics after its counts)."""

    def close(self) -> None:
        """Nothing (a bar would print its last state)."""

    def redirect_logging(self, logger: logging.Logger) -> ContextManager[None]:
        """Nothing to redirect: without a bar, ``logger``'s records go where they always go."""
        return contextlib.nullcontext()


def notice(message: str) -> None:
    """``sopt: MESSAGE ...``, one line on the ``"sopt"`` logger before a phase that may take seconds, saying what
    it computes and how much: on stderr, where the progress bar and the compile notices go (above the bar while a
    Trainer trains). It waits for nothing (no GPU sync)."""
    logging.getLogger("sopt").info("%s ...", message)


def training_bar(total: int, initial: int, rate: TrainingRate, shown: bool) -> "TrainingBar | HiddenBar":
    """The Trainer's bar over ``total`` steps, ``initial`` of them done, showing ``rate``'s steps/s and ETA: a
    TrainingBar when ``shown``, else a HiddenBar (tqdm is then never imported)."""
    if not shown:
        bar: TrainingBar | HiddenBar = HiddenBar()
    else:
        from sopt.train.progress_bar import TrainingBar
        bar = TrainingBar(total=total, initial=initial, unit="step", dynamic_ncols=True)
    bar.training_rate = rate
    return bar
