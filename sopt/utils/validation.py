"""Argument checks shared by every public entry point: each raises ValueError naming the argument and value."""

from __future__ import annotations

import math
import numbers
import os
import re
from typing import Any, Iterable

import numpy as np

_FLOAT32_MAX = float(np.finfo(np.float32).max)
_FLOAT32_TINY = float(np.finfo(np.float32).tiny)   # the smallest normal float32


def float32_problem(value: float, key: str) -> str | None:
    """Why a number the GPU reads as float32 would not mean what it says there, or None when it does.

    The kernels read every hyperparameter as float32: a nonzero ``value`` that float32 rounds to 0 or to a
    subnormal (which GPUs may flush to 0) silently turns off what it scales (``lr=1e-50`` never moves a
    parameter), and one it rounds to Inf spoils every update. 0 itself, and every value float32 stores as a
    normal number (judged after rounding, as ``numpy.float32`` rounds), are fine. ``key`` names the value in
    the allowed range of the message.
    """
    if value == 0.0 or not math.isfinite(value):   # NaN/Inf are the finite-value checks' business
        return None
    with np.errstate(over="ignore", under="ignore"):
        stored = float(np.float32(value))
    if math.isinf(stored):
        problem = "float32 stores it as inf"
    elif stored == 0.0:
        problem = "float32 stores it as 0 (subnormal or zero)"
    elif abs(stored) < _FLOAT32_TINY:
        problem = f"float32 stores it as the subnormal {stored:.7g}, which the GPU may flush to 0"
    else:
        return None
    shown = key if re.fullmatch(r"[\w.\[\]]+", key) else "value"   # |lr|, |betas[0]|; not a whole phrase
    return f"{problem}; allowed: 0 or {_FLOAT32_TINY:.8g} <= |{shown}| <= {_FLOAT32_MAX:.8g}"


def check_float32(value: float, key: str, owner: str = "") -> float:
    """``value`` if it is 0 or a normal float32 (see :func:`float32_problem`), else ValueError in one line:
    ``"<owner> <key> = <value>: float32 stores it as ...; allowed: 0 or 1.1754944e-38 <= |key| <= 3.4028235e+38"``."""
    problem = float32_problem(value, key)
    if problem is not None:
        raise ValueError(f"{owner + ' ' if owner else ''}{key} = {value!r}: {problem}")
    return value


def as_real_array(value: Any, name: str) -> np.ndarray:
    """``value`` as a float64 array (any shape), ValueError unless it is a (nested) sequence or array of real
    numbers: None, strings, complex values and other objects are rejected rather than converted or truncated."""
    if value is None:
        raise ValueError(f"{name} must be an array of numbers, got None")
    if isinstance(value, (str, bytes)):
        raise ValueError(f"{name} must be an array of numbers, got the string {value!r}")
    try:
        raw = np.asarray(value)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be convertible to a float array, got {type(value).__name__}: {exc}") from None
    kind = raw.dtype.kind
    if kind == "c":
        # np.asarray(complex, float64) only warns and drops the imaginary part
        raise ValueError(f"{name} must hold real numbers, got complex values (dtype {raw.dtype}); pass .real or "
                         "abs() explicitly")
    if kind == "O":
        bad = [x for x in raw.ravel() if not isinstance(x, numbers.Real)][:1]
        if bad:
            raise ValueError(f"{name} must be an array of real numbers, got {type(value).__name__} holding "
                             f"{type(bad[0]).__name__} {bad[0]!r}")
    elif kind not in "biuf":
        raise ValueError(f"{name} must be convertible to a float array, got {type(value).__name__} of dtype "
                         f"{raw.dtype}")
    try:
        return np.asarray(raw, dtype=np.float64)
    except (TypeError, ValueError, OverflowError) as exc:
        raise ValueError(f"{name} must be convertible to a float array, got {type(value).__name__}: {exc}") from None


def as_float32_array(value: Any, name: str, shape: tuple[int, ...] | None = None, allow_nonfinite: bool = False) -> np.ndarray:
    """``value`` as a C-contiguous float32 array of at least one element.

    ValueError, before anything is converted, when ``value`` is None, a string, complex, not numeric, empty,
    not of ``shape``, holds NaN/Inf, or holds finite values beyond float32's range (|x| > 3.4028235e38, which
    float32 would store as Inf). With ``allow_nonfinite`` NaN/Inf are kept and out-of-range values become
    +-Inf, as a float32 cast makes them.
    """
    array = as_real_array(value, name)
    if shape is not None and tuple(array.shape) != tuple(shape):
        raise ValueError(f"{name} has shape {tuple(array.shape)}, expected {tuple(shape)}")
    if array.size == 0:
        raise ValueError(f"{name} has 0 elements (shape {tuple(array.shape)}); at least one is needed")
    finite = np.isfinite(array)
    if not allow_nonfinite:
        if not finite.all():
            bad = int(array.size - finite.sum())
            raise ValueError(f"{name} contains {bad} non-finite value(s) (NaN or Inf); only finite values are allowed")
        # float32 rounds |x| below max + half an ulp down to max, so test the cast itself
        with np.errstate(over="ignore"):
            overflow = np.isinf(array.astype(np.float32))
        if overflow.any():
            largest = float(np.abs(array[overflow]).max())
            raise ValueError(f"{name} contains {int(overflow.sum())} value(s) too large for float32 (largest "
                             f"magnitude {largest:.6g} > {_FLOAT32_MAX:.8g}); they would be stored as Inf")
    with np.errstate(over="ignore"):
        # astype keeps a 0-d array 0-d (np.ascontiguousarray would make it 1-D)
        return array.astype(np.float32, order="C")


def check_float(value: Any, name: str, low: float | None = None, high: float | None = None,
                low_inclusive: bool = True, high_inclusive: bool = True, float32: bool = False) -> float:
    """``value`` as a finite float within the given bounds, else ValueError naming ``name`` and the allowed range;
    with ``float32`` (a value a kernel reads) it must also be 0 or a normal float32 (:func:`check_float32`).

    Accepts real numbers (int, float, numpy integers and floats, 0-d numeric arrays); bools, strings, None and
    anything else are rejected rather than converted (``float("0.01")`` and ``float(True)`` would succeed).
    """
    if isinstance(value, np.ndarray) and value.ndim == 0 and value.dtype.kind in "iuf":
        value = value[()]
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a number, got {value!r}")
    result = float(value)
    if not math.isfinite(result):
        raise ValueError(f"{name} must be finite, got {value!r}")
    too_low = low is not None and (result < low if low_inclusive else result <= low)
    too_high = high is not None and (result > high if high_inclusive else result >= high)
    if too_low or too_high:
        lo = "-inf" if low is None else f"{low}"
        hi = "inf" if high is None else f"{high}"
        interval = f"{'[' if low_inclusive and low is not None else '('}{lo}, {hi}{']' if high_inclusive and high is not None else ')'}"
        raise ValueError(f"{name} must be in {interval}, got {value!r}")
    return check_float32(result, name) if float32 else result


def check_int(value: Any, name: str, low: int | None = None) -> int:
    """``value`` as an int >= ``low``, else ValueError (bools and floats such as 3.0 are rejected)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if low is not None and value < low:
        raise ValueError(f"{name} must be >= {low}, got {value!r}")
    return int(value)


def check_bool(value: Any, name: str) -> bool:
    """``value`` as a bool, else ValueError: only True/False (and numpy bools), not 0/1, 1.0 or "yes"."""
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name} must be True or False, got {value!r}")
    return bool(value)


def check_choice(value: Any, name: str, allowed: Iterable[str]) -> str:
    """``value`` if it is one of the strings ``allowed``, else ValueError listing them."""
    options = tuple(allowed)
    if not isinstance(value, str) or value not in options:
        listed = " or ".join(map(repr, options)) if len(options) <= 2 else f"one of {', '.join(map(repr, options))}"
        raise ValueError(f"{name} must be {listed}, got {value!r}")
    return value


def check_path(value: Any, name: str) -> str:
    """``value`` (a str or os.PathLike naming a file) as a non-empty str, else ValueError."""
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str) or not value:
        raise ValueError(f"{name} must be a file path (str or os.PathLike), got {value!r}")
    return value
