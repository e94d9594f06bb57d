"""Which part of which sopt Parameter each torch parameter of a wrapped module is.

A wrapped module's torch parameters are named as its ``named_parameters()`` (``"0.weight"``). Usually a name is a
Parameter, seen whole; ``FullyFusedMLP`` and ``TensorCoreMLP`` name per-layer weights and biases that are windows
of their one flat Parameter (sopt.autodiff.parameter_window: strided, their rows padded to a multiple of 4).
:func:`parameter_views` describes every name as an ``as_strided`` window (shape, strides, first element) of the
Parameter holding it, which applies equally to the values and to the gradient.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Sequence

import slangpy as spy
import torch

from sopt.autodiff.parameter import Parameter
from sopt.autodiff.parameter_window import ParameterWindow
from sopt.torch import arrays


@dataclass(frozen=True)
class ParameterView:
    """``key``'s window of ``parameter``: ``flat.as_strided(shape, strides, first)`` of its flat values. ``source``:
    the sopt Parameter named ``key`` (a ParameterWindow of ``parameter``, or ``parameter``; None: ``parameter``)."""

    key: str
    parameter: Parameter
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    first: int
    source: Parameter | None = field(default=None, repr=False, compare=False)
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
    """One view per ``module.named_parameters()`` entry (see the module docstring): a ParameterWindow as its window
    of its base, any other Parameter whole."""
    views = []
    for key, p in module.named_parameters():
        if isinstance(p, ParameterWindow):
            views.append(ParameterView(key, p.base, p.shape, p.strides, p.first, p))
        else:
            views.append(ParameterView(key, p, p.shape, _contiguous(p.shape), 0))
    return views
