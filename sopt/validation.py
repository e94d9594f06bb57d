"""Argument checks shared by every public entry point: each raises ValueError naming the argument and value."""

from __future__ import annotations

import math
from typing import Any

import numpy as np


def as_float32_array(value: Any, name: str, shape: tuple[int, ...] | None = None, allow_nonfinite: bool = False) -> np.ndarray:
    """``value`` as a C-contiguous float32 array; ValueError if it isn't numeric, finite or of ``shape``."""
    try:
        array = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be convertible to a float array, got {type(value).__name__}: {exc}") from None
    if shape is not None and tuple(array.shape) != tuple(shape):
        raise ValueError(f"{name} has shape {tuple(array.shape)}, expected {tuple(shape)}")
    if not allow_nonfinite and not np.isfinite(array).all():
        bad = int(array.size - np.isfinite(array).sum())
        raise ValueError(f"{name} contains {bad} non-finite value(s) (NaN or Inf); only finite values are allowed")
    return np.ascontiguousarray(array, dtype=np.float32)


def check_float(value: Any, name: str, low: float | None = None, high: float | None = None,
                low_inclusive: bool = True, high_inclusive: bool = True) -> float:
    """``value`` as a finite float within the given bounds, else ValueError naming ``name`` and the allowed range."""
    try:
        result = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number, got {value!r}") from None
    if not math.isfinite(result):
        raise ValueError(f"{name} must be finite, got {value!r}")
    too_low = low is not None and (result < low if low_inclusive else result <= low)
    too_high = high is not None and (result > high if high_inclusive else result >= high)
    if too_low or too_high:
        lo = "-inf" if low is None else f"{low}"
        hi = "inf" if high is None else f"{high}"
        interval = f"{'[' if low_inclusive and low is not None else '('}{lo}, {hi}{']' if high_inclusive and high is not None else ')'}"
        raise ValueError(f"{name} must be in {interval}, got {value!r}")
    return result


def check_int(value: Any, name: str, low: int | None = None) -> int:
    """``value`` as an int >= ``low``, else ValueError."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if low is not None and value < low:
        raise ValueError(f"{name} must be >= {low}, got {value!r}")
    return int(value)


def check_bool(value: Any, name: str) -> bool:
    """``value`` if it is a bool (numpy's included), else ValueError: 0, 1 or "true" are not taken for flags."""
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name} must be True or False, got {value!r}")
    return bool(value)
