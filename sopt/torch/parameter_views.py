"""Which part of which sopt Parameter each torch parameter of a wrapped module is.

A wrapped module's torch parameters are named as its ``state_dict()``'s keys. Usually a key is a Parameter
(``"0.weight"``), seen whole; ``FullyFusedMLP`` keeps one flat Parameter and names per-layer weights and biases,
each a strided window of it (its rows padded to a multiple of 4). :func:`parameter_views` describes every key
as an ``as_strided`` window (shape, strides, first element) of its Parameter's flat values, which applies
equally to the values and to the gradient.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from sopt.parameter import Parameter


@dataclass(frozen=True)
class ParameterView:
    """``key``'s window of ``parameter``: ``flat.as_strided(shape, strides, first)`` of its flat values."""

    key: str
    parameter: Parameter
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    first: int

    def of(self, flat: torch.Tensor) -> torch.Tensor:
        """The window of ``flat`` (a 1-D tensor of the parameter's elements, values or gradient)."""
        if self.strides == _contiguous(self.shape) and self.first == 0 and flat.numel() == int(np.prod(self.shape)):
            return flat.view(self.shape)
        return flat.as_strided(self.shape, self.strides, flat.storage_offset() + self.first)


def _contiguous(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, step = [], 1
    for s in reversed(shape):
        strides.append(step)
        step *= s
    return tuple(reversed(strides))


def parameter_views(module: Any) -> list[ParameterView]:
    """One view per key of ``module.state_dict()`` (see the module docstring). ValueError for a key that is neither
    a Parameter nor a strided window of one (the module's ``as_state_dict`` of the element indices tells)."""
    named = dict(module.named_parameters())
    keys = list(module.state_dict().keys())
    views = []
    windows = None
    for key in keys:
        p = named.get(key)
        if p is not None:
            views.append(ParameterView(key, p, p.shape, _contiguous(p.shape), 0))
            continue
        if windows is None:
            windows = _windows(module, named)
        if key not in windows:
            raise ValueError(f"sopt.torch: {type(module).__name__}.state_dict() key {key!r} is not one of its "
                             f"Parameters ({sorted(named)}) nor a window of one; it cannot become a torch parameter")
        views.append(windows[key])
    return views


def _windows(module: Any, named: dict[str, Parameter]) -> dict[str, ParameterView]:
    """Keys of a module that names windows of its one flat Parameter (``as_state_dict(flat)``), as strided views."""
    if len(named) != 1 or not hasattr(module, "as_state_dict"):
        return {}
    (p,) = named.values()
    indices = module.as_state_dict(np.arange(p.size, dtype=np.float64))
    out = {}
    for key, idx in indices.items():
        idx = np.asarray(idx, np.int64)
        first = int(idx.flat[0])
        strides = tuple(int(idx[tuple(1 if d == k else 0 for d in range(idx.ndim))] - first) if idx.shape[k] > 1 else 1
                        for k in range(idx.ndim))
        grid = first + sum(np.arange(n).reshape([-1 if d == k else 1 for d in range(idx.ndim)]) * s
                           for k, (n, s) in enumerate(zip(idx.shape, strides)))
        if not np.array_equal(grid, idx):
            continue
        out[key] = ParameterView(key, p, tuple(idx.shape), strides, first)
    return out
