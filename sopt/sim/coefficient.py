"""Coefficient: a physical quantity a simulator reads, constant or trainable, shared or per element."""

from __future__ import annotations

from typing import Any

import numpy as np
import slangpy as spy

from sopt.runtime.device import get_device
from sopt.autodiff.parameter import Parameter
from sopt.utils.validation import as_float32_array


class Coefficient:
    """A float32 quantity on the GPU: a constant (a number or an array) or a :class:`sopt.Parameter`.

    ``shape`` is the per-element shape (e.g. ``(n_springs,)`` for stiffness, ``(n, 3)`` for initial
    positions); a value of shape ``(1,)`` (or a number) is *shared* by every element when ``shareable``.
    Kernels read ``values`` and add dL/dvalue into ``grad``: the Parameter's gradient, or, for a constant,
    a scratch buffer nobody reads. Constants, and a Parameter's values when given, are checked against
    ``low`` (e.g. a mass must be > 0) and for NaN/Inf before any GPU work (ValueError naming ``name``).
    """

    def __init__(self, value: Any, name: str, shape: tuple[int, ...], *, shareable: bool = True,
                 low: float | None = None, low_inclusive: bool = True, unit: str = "") -> None:
        self.name, self.unit = name, unit
        shape = tuple(int(s) for s in shape)
        allowed = [shape] + ([(1,)] if shareable and shape != (1,) else [])
        want = " or ".join(str(s) for s in allowed)
        if isinstance(value, Parameter):
            if value.shape not in allowed:
                raise ValueError(f"{name}: the Parameter has shape {value.shape}, expected {want}")
            array = value.numpy()
            self.parameter: Parameter | None = value
        else:
            array = as_float32_array(value, name)
            if array.ndim == 0 and shareable:
                array = array.reshape(1)
            if tuple(array.shape) not in allowed:
                raise ValueError(f"{name}: got shape {tuple(array.shape)}, expected {want}"
                                 + (" or a number" if shareable else ""))
            self.parameter = None
        if low is not None:
            bad = array < low if low_inclusive else array <= low
            if bad.any():
                first = float(array.ravel()[np.flatnonzero(bad.ravel())[0]])
                rel = ">=" if low_inclusive else ">"
                raise ValueError(f"{name} must be {rel} {low:g}{' ' + unit if unit else ''}, got {first:g} "
                                 f"({int(bad.sum())} value(s) out of range)")
        self.shape = tuple(array.shape)
        self.shared = self.shape != shape
        if self.parameter is None:
            device = get_device()
            self._values = spy.Tensor.from_numpy(device, np.ascontiguousarray(array, np.float32))
            self._scratch = spy.Tensor.zeros(device, self.shape, "float")

    @property
    def trainable(self) -> bool:
        return self.parameter is not None

    @property
    def values(self) -> spy.Tensor:
        """The values now (a Parameter's view moves between an optimiser's sides: fetch per call)."""
        return self.parameter.values if self.parameter is not None else self._values

    @property
    def grad(self) -> spy.Tensor:
        return self.parameter.grad if self.parameter is not None else self._scratch

    def numpy(self) -> np.ndarray:
        """The values as float64 (waits for the GPU)."""
        src = self.parameter.numpy() if self.parameter is not None else self._values.to_numpy().reshape(self.shape)
        return np.asarray(src, np.float64)

    def __repr__(self) -> str:
        kind = f"Parameter {self.parameter.name!r}" if self.parameter is not None else "constant"
        return f"Coefficient({self.name}, {kind}, shape={self.shape}{', shared' if self.shared else ''})"
