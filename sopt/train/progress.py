"""The training progress bar, whose rate and ETA leave out the time spent compiling kernels.

A first run on the software driver can spend minutes of its first steps compiling; a bar that averaged those in
would promise hours. :class:`TrainingRate` counts only the steps during which no kernel was used for the first
time (``sopt.device.compile_seconds`` did not move) and no newly compiled kernel ran for the first time, and
:class:`TrainingBar` shows that rate and the ETA it gives (``?`` until such a step was timed), while its elapsed
time stays the wall-clock time.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from tqdm.auto import tqdm

from sopt import device


class TrainingRate:
    """Steps per second over the steps that compiled nothing.

    ``clock`` (wall seconds) and ``compile_clock`` (seconds spent compiling so far) are read at each
    :meth:`tick`; an interval between two ticks in which ``compile_clock`` moved is left out entirely, its steps
    and its time (such a step's other first-use costs, allocations and call setup, are no training rate either),
    and so is every later one up to and including the first in which the host waited for the GPU: a driver may
    finish compiling a kernel only when it first runs (lavapipe does, for tens of seconds), and the host sees that
    time only when it waits.
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


class TrainingBar(tqdm):   # type: ignore[misc]  # tqdm.auto's class: the terminal one, or a notebook's
    """A tqdm bar over steps whose rate (and so ETA) is ``self.training_rate``'s, not tqdm's own average.

    tqdm computes the remaining time from the rate in :attr:`format_dict`; a rate of 0 shows ``?`` for both."""

    training_rate: TrainingRate | None = None

    @property
    def format_dict(self) -> dict[str, Any]:
        info = super().format_dict
        if self.training_rate is not None:
            info["rate"] = self.training_rate.rate() or 0.0   # 0: unknown (None would fall back to tqdm's average)
        return info
