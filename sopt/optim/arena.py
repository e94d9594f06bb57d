"""ParameterArena: every parameter of one optimiser, its gradient and the optimiser's state in one buffer.

Layout, in blocks of ``n_vec`` float4 vectors each::

    [gradients | values | state slot 0 | state slot 1 | ...]                      single-buffered
    [gradients | values | slot 0 | ... || values | slot 0 | ...]                   double-buffered

Parameters follow one another group by group, each starting at a multiple of 4 elements so a kernel can
move whole ``float4`` vectors; padding elements hold zero value and zero gradient, and every update rule
maps (p=0, g=0, state=0) to itself, so they stay zero. Each Parameter's values and gradient are views into
the arena, so one dispatch updates every parameter. A ParameterWindow (sopt.autodiff.parameter_window: a
named part of another Parameter, as FullyFusedMLP's per-layer weights are of its one flat buffer) takes no room of
its own: its base is laid out once, where its first window is, and the window's state is its elements of the
base's (``split`` / ``join``); all of a base's windows must be given, in one group.

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
from sopt.autodiff.parameter_window import ParameterWindow, storage_of

VECTOR = 4  # elements per float4
_MAX_ELEMENTS = 2**31 - 1  # SlangPy tensor indices are 32-bit


class ParameterArena:
    """Flat storage for ``groups`` (a list of parameter lists) and the optimiser's state slots.

    ``group_end_vec[k]`` is the exclusive end of group k, in float4 vectors. ``double`` allocates the second
    side of values and state (see the module docstring).
    """

    def __init__(self, groups: list[list[Parameter]], double: bool = False) -> None:
        self.params: list[Parameter] = [p for group in groups for p in group]
        # what the storage holds: each Parameter, and each ParameterWindow's base once, where its first window is
        self.storage_params: list[Parameter] = []
        self._storage_offsets: list[int] = []
        self.offsets: list[int] = []   # each parameter's first element (a window's: its base's plus its own first)
        self._indices: list[np.ndarray | None] = []   # a window's elements in a block (None: offsets[i] onwards)
        self.group_end_vec: list[int] = []
        self._place(groups)
        self.version = 0   # optimiser steps recorded on this arena (Parameter.version adds it)
        # whether modules may leave gradient terms pending on these Parameters (the optimiser folds them into its
        # update: sopt.autodiff.grad_source), and the Parameters that have some now
        self.accepts_pending = False
        self.pending: list[Parameter] = []
        self.n_slots = 0
        self.double = double
        self.side = 0
        values = self._storage_block([p.numpy() for p in self.storage_params])
        grads = self._storage_block([p.grad_numpy() for p in self.storage_params])
        self._check_size(0, double)
        self.storage = spy.Tensor.from_numpy(get_device(), np.concatenate([grads] + [values] * self.n_sides))
        self._bind_views()

    def _place(self, groups: list[list[Parameter]]) -> None:
        """Lay the parameters out group by group (see the module docstring), a window's base once; ValueError for
        a parameter given twice or already another optimiser's, and for a base's windows given only in part, in
        several groups, or beside the base itself."""
        seen: set[int] = set()
        placed: dict[int, tuple[int, int]] = {}   # id(storage parameter) -> (its offset, its group)
        given_windows: dict[int, set[int]] = {}
        cursor = 0
        for k, group in enumerate(groups):
            for p in group:
                if id(p) in seen:
                    raise ValueError(f"parameter {p.name!r} appears more than once in the optimiser's params")
                seen.add(id(p))
                sp = storage_of(p)
                if sp.owner is not None:
                    raise ValueError(f"parameter {p.name!r} already belongs to another optimiser; a Parameter can be "
                                     "updated by one optimiser only")
                if id(sp) not in placed:
                    placed[id(sp)] = (cursor, k)
                    self.storage_params.append(sp)
                    self._storage_offsets.append(cursor)
                    cursor += -(-sp.size // VECTOR) * VECTOR
                base_offset, base_group = placed[id(sp)]
                if isinstance(p, ParameterWindow):
                    if base_group != k:
                        raise ValueError(f"parameter {p.key!r} is in param group {k} and its sibling window(s) of "
                                         f"{sp.name!r} in group {base_group}; one Parameter's windows share one "
                                         "update: put them in one group")
                    given_windows.setdefault(id(sp), set()).add(id(p))
                    self.offsets.append(base_offset + p.first)
                    self._indices.append(base_offset + p.index)
                else:
                    self.offsets.append(base_offset)
                    self._indices.append(None)
            self.group_end_vec.append(cursor // VECTOR)
        checked: set[int] = set()
        for p in self.params:
            if isinstance(p, ParameterWindow) and id(p.base) not in checked:
                checked.add(id(p.base))
                if id(p.base) in seen:
                    raise ValueError(f"parameter {p.base.name!r} is given both whole and as its window {p.key!r}")
                missing = [w.key for w in p.siblings if id(w) not in given_windows[id(p.base)]]
                if missing:
                    raise ValueError(f"the optimiser was given parameter {p.key!r} but not {missing}, which share "
                                     f"one buffer ({p.base.name!r}) with it; a step updates all of them: pass them "
                                     "all")
        self.n_vec = max(cursor // VECTOR, 1)

    def _storage_block(self, arrays: list[np.ndarray]) -> np.ndarray:
        """One block of the storage holding each storage parameter's flat ``arrays`` (padding zero)."""
        flat = np.zeros(self.n_elements, np.float32)
        for p, off, a in zip(self.storage_params, self._storage_offsets, arrays):
            flat[off:off + p.size] = np.asarray(a, np.float32).ravel()
        return flat

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
        """Point every storage Parameter at its values on each side and its gradient in the current storage (a
        window follows its base)."""
        for p, off in zip(self.storage_params, self._storage_offsets):
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
        """A flat host array of one block cut into one array per parameter (its shape; a window's elements)."""
        return [flat[off:off + p.size].reshape(p.shape).copy() if index is None else flat[index]
                for p, off, index in zip(self.params, self.offsets, self._indices)]

    def join(self, arrays: list[np.ndarray], fill: float = 0.0) -> np.ndarray:
        """Inverse of :meth:`split`: per-parameter arrays into one flat host block (padding, and a base's elements
        outside its windows, = ``fill``)."""
        flat = np.full(self.n_elements, fill, np.float32)
        for p, off, index, a in zip(self.params, self.offsets, self._indices, arrays):
            if index is None:
                flat[off:off + p.size] = np.asarray(a, np.float32).ravel()
            else:
                flat[index] = np.asarray(a, np.float32).reshape(p.shape)
        return flat
