"""A run's metric curve read from its ``metrics.jsonl`` while the run writes it.

Each line of metrics.jsonl is one JSON record ``{"step": int, "loss": float, ...}``; records with an ``"event"``
key are events, not metrics. :class:`MetricCurve` reads the lines appended since its last read (a line still being
written is kept for the next read) and keeps ``(step, value)`` for the records holding the chosen metric as a
number. A NaN value (a diverged run) counts as the worst possible value, so it never looks good to a pruner.
"""

from __future__ import annotations

import math
import os
import pathlib

from sopt.experiments.run_dir import metrics_record
from sopt.utils.regular_file import open_regular


def worst_value(mode: str) -> float:
    """The value worse than any other: +inf when minimising, -inf when maximising."""
    return math.inf if mode == "min" else -math.inf


def better(a: float, b: float, mode: str) -> bool:
    """Whether ``a`` is strictly better than ``b`` under ``mode`` ("min" or "max")."""
    return a < b if mode == "min" else a > b


class MetricCurve:
    """The ``(step, value)`` points of one metric in a growing metrics.jsonl (``path``), in file order."""

    def __init__(self, path: pathlib.Path, metric: str, mode: str) -> None:
        if mode not in ("min", "max"):
            raise ValueError(f"mode {mode!r}: allowed 'min' or 'max'")
        self.path = pathlib.Path(path)
        self.metric = metric
        self.mode = mode
        self.points: list[tuple[int, float]] = []
        self._offset = 0
        self._partial = b""

    def read(self) -> list[tuple[int, float]]:
        """Reads the lines appended since the last call; returns the new points (also appended to ``points``)."""
        try:
            with open_regular(self.path) as f:   # a FIFO put there is refused, never waited on
                if os.fstat(f.fileno()).st_size < self._offset:    # rewritten shorter (a resume): start over
                    self.points, self._offset, self._partial = [], 0, b""
                f.seek(self._offset)
                chunk = f.read()
        except FileNotFoundError:
            return []
        self._offset += len(chunk)
        lines = (self._partial + chunk).split(b"\n")
        self._partial = lines.pop()        # no newline yet: the writer is still on it
        new = []
        for line in lines:
            point = self._point(line)
            if point is not None:
                new.append(point)
        self.points.extend(new)
        return new

    def _point(self, line: bytes) -> tuple[int, float] | None:
        record = metrics_record(line)
        if record is None:
            return None
        step, value = record.get("step"), record.get(self.metric)
        if isinstance(step, bool) or not isinstance(step, int):
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return None
        value = float(value)
        return step, (worst_value(self.mode) if math.isnan(value) else value)

    @property
    def last_step(self) -> int | None:
        return self.points[-1][0] if self.points else None

    def reached(self, step: int) -> bool:
        """Whether the run has logged a record at ``step`` or later."""
        return bool(self.points) and self.points[-1][0] >= step

    def value_at(self, step: int) -> float | None:
        """The value of the last record at or before ``step`` (None before the first record)."""
        value = None
        for s, v in self.points:
            if s > step:
                break
            value = v
        return value

    def best_until(self, step: int) -> float | None:
        """The best value of the records at or before ``step`` (None before the first record)."""
        best = None
        for s, v in self.points:
            if s > step:
                break
            if best is None or better(v, best, self.mode):
                best = v
        return best

    def first_at_or_after(self, step: int) -> tuple[int, float] | None:
        """The first point at ``step`` or later (None if the run has not reached it)."""
        for point in self.points:
            if point[0] >= step:
                return point
        return None
