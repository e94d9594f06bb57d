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

Adding a state slot or the second side moves everything into a new buffer with device-to-device copies,
recorded into the caller's command encoder when there is one, so that gradients a backward pass recorded
earlier into that encoder reach the new buffer.
"""

from __future__ import annotations

import numpy as np
import slangpy as spy

from sopt.runtime.device import create_command_encoder, get_device, invalidate_graphs, submit
from sopt.autodiff.parameter import Parameter

VECTOR = 4  # elements per float4
_MAX_ELEMENTS = 2**31 - 1  # SlangPy tensor indices are 32-bit


class ParameterArena:
    """Flat storage for ``groups`` (a list of parameter lists) and the optimiser's state slots.

    ``group_end_vec[k]`` is the exclusive end of group k, in float4 vectors. ``double`` allocates the second
    side of values and state (see the module docstring).
    """

    def __init__(self, groups: list[list[Parameter]], double: bool = False) -> None:
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
        self.version = 0   # optimiser steps recorded on this arena (Parameter.version adds it)
        # whether modules may leave gradient terms pending on these Parameters (the optimiser folds them into its
        # update: sopt.autodiff.grad_source), and the Parameters that have some now
        self.accepts_pending = False
        self.pending: list[Parameter] = []
        self.offsets: list[int] = []
        self.group_end_vec: list[int] = []
        cursor = 0
        for group in groups:
            for p in group:
                self.offsets.append(cursor)
                cursor += -(-p.size // VECTOR) * VECTOR
            self.group_end_vec.append(cursor // VECTOR)
        self.n_vec = max(cursor // VECTOR, 1)
        self.n_slots = 0
        self.double = double
        self.side = 0
        values = self.join([p.numpy() for p in self.params])
        grads = self.join([p.grad_numpy() for p in self.params])
        self._check_size(0, double)
        self.storage = spy.Tensor.from_numpy(get_device(), np.concatenate([grads] + [values] * self.n_sides))
        self._bind_views()

    @staticmethod
    def _n_blocks(n_slots: int, double: bool) -> int:
        """Blocks of a storage: the gradients, then values and ``n_slots`` state slots per side."""
        return 1 + (1 + n_slots) * (2 if double else 1)

    def _check_size(self, n_slots: int, double: bool) -> None:
        blocks = self._n_blocks(n_slots, double)
        total = blocks * self.n_elements
        if total > _MAX_ELEMENTS:
            raise ValueError(f"the optimiser's arena would hold {total} floats ({blocks} buffers of "
                             f"{self.n_elements}); at most {_MAX_ELEMENTS} are allowed (32-bit tensor indices): "
                             "split the parameters over several optimisers"
                             + (" or use double_buffer=False" if double else ""))

    def _reallocate(self, fills: list[np.ndarray], double: bool, encoder: spy.CommandEncoder | None) -> None:
        """Move into a new buffer: the gradients and the current side, plus state slots holding ``fills``, on one
        side or (``double``) two. Copies run on the GPU, recorded into ``encoder`` (or submitted now)."""
        n_slots = self.n_slots + len(fills)
        self._check_size(n_slots, double)
        invalidate_graphs("an optimiser's parameter arena moved to a new buffer")
        device = get_device()
        own = encoder is None
        if own:
            encoder = create_command_encoder()
        old, block_bytes, vector_bytes = self.storage, self.n_elements * 4, VECTOR * 4
        old_side = self.values_vec(self.side) * vector_bytes
        self.n_slots, self.double, self.side = n_slots, double, 0
        self.storage = spy.Tensor.empty(device, (self._n_blocks(n_slots, double) * self.n_elements,), "float")
        new = self.storage.storage
        encoder.copy_buffer(new, 0, old.storage, 0, block_bytes)
        kept = (1 + n_slots - len(fills)) * block_bytes   # values and the slots already there
        for side in range(self.n_sides):
            first = self.values_vec(side) * vector_bytes
            encoder.copy_buffer(new, first, old.storage, old_side, kept)
            for k, fill in enumerate(fills):
                encoder.upload_buffer_data(new, first + kept + k * block_bytes, np.asarray(fill, np.float32))
        if own:
            submit(encoder)
        self._bind_views()

    def _bind_views(self) -> None:
        """Point every Parameter at its values on each side and its gradient in the current storage."""
        for p, off in zip(self.params, self.offsets):
            sides = [self.storage.view(p.shape, offset=self.values_vec(s) * VECTOR + off) for s in range(self.n_sides)]
            p._rebind(sides, self.storage.view(p.shape, offset=off), self)

    @property
    def n_elements(self) -> int:
        """Elements of one block (values, gradients or a state slot), padding included: 4 * n_vec."""
        return self.n_vec * VECTOR

    @property
    def buffer(self) -> spy.Buffer:
        return self.storage.storage

    @property
    def n_sides(self) -> int:
        return 2 if self.double else 1

    def side_offset(self, side: int) -> int:
        """First float4 vector of side ``side`` minus that of side 0: what the kernels' src/dst_side hold."""
        return side * (1 + self.n_slots) * self.n_vec

    def values_vec(self, side: int) -> int:
        """First float4 vector of side ``side``'s values (its state slots follow, a block each)."""
        return self.n_vec + self.side_offset(side)

    def block(self, index: int) -> spy.Tensor:
        """Block ``index`` of the current side as a flat view: 0 values, 1 + s state slot s."""
        first = self.values_vec(self.side) + index * self.n_vec
        return self.storage.view((self.n_elements,), offset=first * VECTOR)

    @property
    def grads(self) -> spy.Tensor:
        return self.storage.view((self.n_elements,), offset=0)

    @property
    def values(self) -> spy.Tensor:
        return self.block(0)

    def slot(self, s: int) -> spy.Tensor:
        return self.block(1 + s)

    def add_slot(self, fill: np.ndarray, encoder: spy.CommandEncoder | None = None) -> int:
        """Append a state slot holding the flat array ``fill``; returns its index. Re-binds parameter views; the
        move is recorded into ``encoder`` when given (see the module docstring)."""
        self._reallocate([fill], self.double, encoder)
        return self.n_slots - 1

    def set_double(self, double: bool, encoder: spy.CommandEncoder | None = None) -> None:
        """Allocate (or drop) the second side; the current values and state are kept. Re-binds parameter views;
        the move is recorded into ``encoder`` when given (see the module docstring)."""
        if double != self.double:
            self._reallocate([], double, encoder)

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
