"""Which part of which sopt Parameter each torch parameter of a wrapped module is.

A wrapped module's torch parameters are named as its ``state_dict()``'s keys. Usually a key is a Parameter
(``"0.weight"``), seen whole; ``FullyFusedMLP`` keeps one flat Parameter and names per-layer weights and biases,
each a strided window of it (its rows padded to a multiple of 4). :func:`parameter_views` describes every key
as an ``as_strided`` window (shape, strides, first element) of its Parameter's flat values, which applies
equally to the values and to the gradient.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import slangpy as spy
import torch

from sopt.autodiff.parameter import Parameter
from sopt.torch import arrays


@dataclass(frozen=True)
class ParameterView:
    """``key``'s window of ``parameter``: ``flat.as_strided(shape, strides, first)`` of its flat values."""

    key: str
    parameter: Parameter
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    first: int
    # the whole Parameter, contiguous: a plain view (cheaper than as_strided); set from the fields above
    whole: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "whole", self.strides == _contiguous(self.shape) and self.first == 0
                           and math.prod(self.shape) == self.parameter.size)

    def of(self, flat: torch.Tensor) -> torch.Tensor:
        """The window of ``flat`` (a 1-D tensor of the parameter's elements, values or gradient)."""
        if self.whole:
            return flat.view(self.shape)
        return flat.as_strided(self.shape, self.strides, flat.storage_offset() + self.first)


class WindowCache:
    """The torch windows of sopt arrays (a Parameter's values, a side of them, or its gradient), one per view in
    ``views``, made once per array: shared mode only (zero-copy views, see sopt.torch.arrays.torch_view), so they
    stay valid while the array lives, and making them (an ``as_strided`` each) costs host time every step."""

    _MAX = 4   # arrays per cache: an arena's two sides and a gradient, with room for a move

    def __init__(self, views: Sequence[ParameterView]) -> None:
        self.views = list(views)
        self._windows: dict[int, tuple[spy.Tensor, list[torch.Tensor]]] = {}

    def of(self, array: spy.Tensor) -> list[torch.Tensor]:
        """``[view.of(flat view of array) for view in views]``, cached by the array's identity."""
        entry = self._windows.get(id(array))
        if entry is not None and entry[0] is array:
            return entry[1]
        flat = arrays.torch_view(array).view(-1)
        windows = [v.of(flat) for v in self.views]
        if len(self._windows) >= self._MAX:
            self._windows.clear()
        self._windows[id(array)] = (array, windows)
        return windows


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
