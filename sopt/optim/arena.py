"""ParameterArena: every parameter of one optimiser, its gradient and the optimiser's state in one buffer.

Layout, in blocks of ``n_vec`` float4 vectors each::

    [gradients | values | state slot 0 | state slot 1 | ...]                      single-buffered
    [gradients | values | slot 0 | ... || values | slot 0 | ...]                   double-buffered

Parameters follow one another group by group, each starting at a multiple of 4 elements so a kernel can
move whole ``float4`` vectors; padding elements hold zero value and zero gradient, and every update rule
maps (p=0, g=0, state=0) to itself, so they stay zero. Each Parameter's values and gradient are views into
the arena, so one dispatch updates every parameter.

A double-buffered arena keeps the values and state twice ("sides"): an update may read one side and write
the other, so a step found afterwards to have had non-finite gradients is undone by copying the side it
read back over the side it wrote (see Optimizer). ``side`` is the one holding the current values; the
Parameters' views follow it.
"""

from __future__ import annotations

import numpy as np
import slangpy as spy

from sopt.device import get_device
from sopt.parameter import Parameter

VECTOR = 4  # elements per float4
_MAX_ELEMENTS = 2**31 - 1  # SlangPy tensor indices are 32-bit


class ParameterArena:
    """Flat storage for ``groups`` (a list of parameter lists) and the optimiser's state slots.

    ``group_end_vec[k]`` is the exclusive end of group k, in float4 vectors. ``double`` allocates the second
    side of values and state (see the module docstring).
    """

    def __init__(self, groups: list[list[Parameter]], slot_fills: list[np.ndarray] | None = None,
                 double: bool = False) -> None:
        seen: set[int] = set()
        for group in groups:
            for p in group:
                if id(p) in seen:
                    raise ValueError(f"parameter {p.name!r} appears more than once in the optimiser's params")
                if p.owner is not None:
                    raise ValueError(f"parameter {p.name!r} already belongs to another optimiser; a Parameter can be "
                                     "updated by one optimiser only")
                seen.add(id(p))
        self.params: list[Parameter] = [p for group in groups for p in group]
        self.offsets: list[int] = []
        self.group_end_vec: list[int] = []
        cursor = 0
        for group in groups:
            for p in group:
                self.offsets.append(cursor)
                cursor += -(-p.size // VECTOR) * VECTOR
            self.group_end_vec.append(cursor // VECTOR)
        self.n_vec = max(cursor // VECTOR, 1)
        self.side = 0
        values = self.join([p.numpy() for p in self.params])
        grads = self.join([p.grad_numpy() for p in self.params])
        self._allocate(grads, [values] + list(slot_fills or []), double)

    def _allocate(self, grads: np.ndarray, side: list[np.ndarray], double: bool) -> None:
        """New storage: ``grads``, then the blocks of one side (values, slots), twice when ``double``."""
        blocks = [grads] + side * (2 if double else 1)
        total = len(blocks) * self.n_elements
        if total > _MAX_ELEMENTS:
            raise ValueError(f"the optimiser's arena would hold {total} floats ({len(blocks)} buffers of "
                             f"{self.n_elements}); at most {_MAX_ELEMENTS} are allowed (32-bit tensor indices): "
                             "split the parameters over several optimisers"
                             + (" or use double_buffer=False" if double else ""))
        self.storage = spy.Tensor.from_numpy(get_device(), np.concatenate(blocks))
        self.n_slots = len(side) - 1
        self.double = double
        self.side = 0
        for p, off in zip(self.params, self.offsets):
            sides = [self.storage.view(p.shape, offset=(self.n_vec + self.side_offset(s)) * VECTOR + off)
                     for s in range(2 if double else 1)]
            p._rebind(sides, self.storage.view(p.shape, offset=off), self)

    @property
    def n_elements(self) -> int:
        """Elements of one block (values, gradients or a state slot), padding included: 4 * n_vec."""
        return self.n_vec * VECTOR

    @property
    def buffer(self) -> spy.Buffer:
        return self.storage.storage

    def side_offset(self, side: int) -> int:
        """First float4 vector of side ``side`` minus that of side 0: what the kernels' src/dst_side hold."""
        return side * (1 + self.n_slots) * self.n_vec

    def block(self, index: int, side: int | None = None) -> spy.Tensor:
        """Block ``index`` of a side (default: the current one) as a flat view: 0 values, 1 + s state slot s."""
        side = self.side if side is None else side
        first = self.n_vec + self.side_offset(side) + index * self.n_vec
        return self.storage.view((self.n_elements,), offset=first * VECTOR)

    @property
    def grads(self) -> spy.Tensor:
        return self.storage.view((self.n_elements,), offset=0)

    @property
    def values(self) -> spy.Tensor:
        return self.block(0)

    def slot(self, s: int) -> spy.Tensor:
        return self.block(1 + s)

    def _current_side(self) -> list[np.ndarray]:
        flat = self.storage.to_numpy().reshape(-1, self.n_elements)
        first = 1 + self.side * (1 + self.n_slots)
        return list(flat[first:first + 1 + self.n_slots])

    def add_slot(self, fill: np.ndarray) -> int:
        """Append a state slot holding the flat array ``fill``; returns its index. Re-binds parameter views."""
        grads = self.grads.to_numpy()
        self._allocate(grads, self._current_side() + [np.asarray(fill, np.float32)], self.double)
        return self.n_slots - 1

    def set_double(self, double: bool) -> None:
        """Allocate (or drop) the second side; the current values and state are kept. Re-binds parameter views."""
        if double != self.double:
            self._allocate(self.grads.to_numpy(), self._current_side(), double)

    def flip(self) -> None:
        """Make the other side current (after an update that wrote it)."""
        self.side ^= 1

    def split(self, flat: np.ndarray) -> list[np.ndarray]:
        """A flat host array of one block cut into one array per parameter (its shape)."""
        return [flat[off:off + p.size].reshape(p.shape).copy() for p, off in zip(self.params, self.offsets)]

    def join(self, arrays: list[np.ndarray], fill: float = 0.0) -> np.ndarray:
        """Inverse of :meth:`split`: per-parameter arrays into one flat host block (padding = ``fill``)."""
        flat = np.full(self.n_elements, fill, np.float32)
        for p, off, a in zip(self.params, self.offsets, arrays):
            flat[off:off + p.size] = np.asarray(a, np.float32).ravel()
        return flat
