"""ParameterWindow: a named part of another Parameter's elements, itself a Parameter.

A module that keeps several logical parameters in one flat Parameter (FullyFusedMLP and TensorCoreMLP: every
layer's weights and bias in one buffer its kernels read) names each of them by a window of that Parameter, its
*base*: ``(shape, strides, first)`` of the base's flat elements, as ``numpy.lib.stride_tricks.as_strided`` reads
them. The windows are what the module's ``named_parameters()`` gives, so that names, ``state_dict``, ``vjp``,
``gradcheck``, checkpoints, optimiser groups and ``sopt.torch`` all see the same per-layer parameters; the base
stays the storage the kernels, the tape and an optimiser's arena work on.

A window has no storage of its own: its ``values``, ``grad`` and ``tensor`` are strided views of its base's
(current) ones, ``numpy`` / ``load`` / ``set_grad`` / ``zero_grad`` read and write its elements of the base's on
the host, and its ``version`` and ``owner`` are the base's. An optimiser given windows keeps their base in its
arena, once (sopt.optim.arena): all windows of one base (``siblings``) must be given to it together, in one
parameter group, since its update moves every element of the base.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np
import slangpy as spy

from sopt.autodiff.parameter import Parameter
from sopt.utils.validation import as_float32_array


class ParameterWindow(Parameter):
    """``key``'s window of ``base`` (see the module docstring): ``shape`` elements at ``strides`` (in elements)
    from element ``first`` of the base's flat values. ``name`` is the Parameter's label (as a Linear's
    ``"weight"``), ``key`` its name in its module's ``named_parameters()`` (``"0.weight"``). Made by
    :func:`make_windows`, which sets ``siblings``."""

    def __init__(self, base: Parameter, name: str, key: str, shape: Sequence[int], strides: Sequence[int],
                 first: int) -> None:
        # no Parameter.__init__: the storage is the base's
        if not isinstance(base, Parameter) or isinstance(base, ParameterWindow):
            raise ValueError(f"a ParameterWindow's base must be a (non-window) Parameter, got {type(base).__name__}")
        self.base = base
        self.name, self.key = name, key
        self._shape = tuple(int(s) for s in shape)
        self.strides = tuple(int(s) for s in strides)
        self.first = int(first)
        self._size = math.prod(self._shape)
        if len(self.strides) != len(self._shape) or not self._size:
            raise ValueError(f"ParameterWindow {key!r}: shape {self._shape} and strides {self.strides} must be "
                             "non-empty and of one length")
        grid = np.full(self._shape, self.first, np.int64)
        for axis, (n, s) in enumerate(zip(self._shape, self.strides)):
            along = [-1 if d == axis else 1 for d in range(len(self._shape))]
            grid += (np.arange(n, dtype=np.int64) * s).reshape(along)
        if grid.min() < 0 or grid.max() >= base.size or len(np.unique(grid)) != self._size:
            raise ValueError(f"ParameterWindow {key!r}: shape {self._shape}, strides {self.strides} from element "
                             f"{self.first} must name distinct elements of {base.name!r}'s {base.size}")
        self.index = grid   # the base's flat element index of each of this window's elements
        self._last = int(grid.max()) + 1
        self.siblings: tuple[ParameterWindow, ...] = (self,)
        self._views: dict[str, tuple[spy.Tensor, spy.Tensor]] = {}   # what -> (the base's tensor, its view)

    def __repr__(self) -> str:
        return f"ParameterWindow(name={self.name!r}, key={self.key!r}, shape={self._shape}, of={self.base.name!r})"

    # -- the base's state --------------------------------------------------------------------------------------
    @property   # type: ignore[override]
    def owner(self) -> Any:
        """The arena holding the base (None before an optimiser takes it)."""
        return self.base.owner

    @property
    def version(self) -> int:
        return self.base.version

    # -- device views --------------------------------------------------------------------------------------------
    def _view(self, what: str, source: spy.Tensor) -> spy.Tensor:
        """This window of ``source`` (a tensor of the base's shape), cached while the base keeps that tensor."""
        entry = self._views.get(what)
        if entry is None or entry[0] is not source:
            flat = source.view((self.base.size,))
            entry = self._views[what] = (source, flat.view(self._shape, strides=self.strides, offset=self.first))
        return entry[1]

    @property
    def values(self) -> spy.Tensor:
        return self._view("values", self.base.values)

    @property
    def grad(self) -> spy.Tensor:
        return self._view("grad", self.base.grad)

    @property
    def grad_for_adding(self) -> spy.Tensor:
        return self._view("grad_for_adding", self.base.grad_for_adding)

    @property
    def tensor(self) -> spy.Tensor:
        """The window's values with its gradient attached, for ``IDiffTensor`` arguments."""
        values, grad = self.values, self.grad
        entry = self._views.get("tensor")
        if entry is None or entry[0] is not values or entry[1].grad_out is not grad:
            entry = self._views["tensor"] = (values, values.with_grads(grad_in=grad, grad_out=grad, zero=False))
        return entry[1]

    @property
    def grad_zero_from(self) -> int:
        """0 when the base's gradient is known to be +0 over the whole window, else ``size`` (nothing known)."""
        return 0 if self.base.grad_zero_from <= int(self.index.min()) else self._size

    def note_grad_written(self, end: int) -> None:
        if end > 0:
            self.base.note_grad_written(self._last)

    def mark_grad_zero(self) -> None:
        """Nothing: what the base knows of its zeros covers all of it (its arena's step marks the base)."""

    # -- pending gradient terms: a window has none of its own ----------------------------------------------------
    @property
    def pending_grad(self) -> Any:
        return None

    @property
    def accepts_pending(self) -> bool:
        return False

    def leave_pending(self, source: Any) -> None:
        raise RuntimeError(f"Parameter {self.key!r} is a window of {self.base.name!r}: leave pending terms on the base")

    def take_pending(self) -> Any:
        return None

    def flush_grad(self, encoder: spy.CommandEncoder | None = None) -> None:
        self.base.flush_grad(encoder)

    def _rebind(self, sides: list[spy.Tensor], grads: spy.Tensor, owner: Any) -> None:
        raise RuntimeError(f"Parameter {self.key!r} is a window of {self.base.name!r}: an arena holds the base")

    # -- host access ---------------------------------------------------------------------------------------------
    def numpy(self) -> np.ndarray:
        return self.base.numpy().reshape(-1)[self.index]

    def grad_numpy(self) -> np.ndarray:
        return self.base.grad_numpy().reshape(-1)[self.index]

    def load(self, array: Any) -> None:
        values = as_float32_array(array, f"{self.key} values", self._shape)
        flat = self.base.numpy().reshape(-1)
        flat[self.index] = values
        self.base.load(flat.reshape(self.base.shape))

    def set_grad(self, array: Any) -> None:
        self._write_grad(as_float32_array(array, f"{self.key} grad", self._shape, allow_nonfinite=True))

    def zero_grad(self) -> None:
        self._write_grad(np.zeros(self._shape, np.float32))

    def _write_grad(self, array: np.ndarray) -> None:
        flat = self.base.grad_numpy().reshape(-1)
        flat[self.index] = array
        self.base.set_grad(flat.reshape(self.base.shape))


def make_windows(base: Parameter, specs: Sequence[tuple[str, str, Sequence[int], Sequence[int], int]]
                 ) -> list[ParameterWindow]:
    """One ParameterWindow of ``base`` per ``(name, key, shape, strides, first)`` in ``specs``, each knowing the
    others (``siblings``). ValueError when two windows share an element."""
    windows = [ParameterWindow(base, *spec) for spec in specs]
    taken = np.concatenate([w.index.ravel() for w in windows])
    if len(np.unique(taken)) != len(taken):
        raise ValueError(f"the windows {[w.key for w in windows]} of {base.name!r} overlap")
    siblings = tuple(windows)
    for w in windows:
        w.siblings = siblings
    return windows


def storage_of(p: Parameter) -> Parameter:
    """The Parameter holding ``p``'s elements: its base for a window, else ``p``."""
    return p.base if isinstance(p, ParameterWindow) else p
