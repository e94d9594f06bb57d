"""ParameterArena: every parameter of one optimiser, its gradient and the optimiser's state in one buffer.

Layout, in float4 vectors of ``n_vec`` each: ``[values | gradients | state slot 0 | state slot 1 | ...]``.
Parameters follow one another group by group, each starting at a multiple of 4 elements so a kernel can
move whole ``float4`` vectors; padding elements hold zero value and zero gradient, and every update rule
maps (p=0, g=0, state=0) to itself, so they stay zero. Each Parameter's values and gradient become views
into the arena, so one dispatch updates every parameter.
"""

from __future__ import annotations

import numpy as np
import slangpy as spy

from sopt.device import get_device
from sopt.parameter import Parameter

VECTOR = 4  # elements per float4
_MAX_ELEMENTS = 2**31 - 1  # SlangPy tensor indices are 32-bit


class ParameterArena:
    """Flat storage for ``groups`` (a list of parameter lists) and ``n_slots`` optimiser state slots.

    ``group_end_vec[k]`` is the exclusive end of group k, in float4 vectors.
    """

    def __init__(self, groups: list[list[Parameter]], slot_fills: list[np.ndarray] | None = None) -> None:
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
        values = self.join([p.numpy() for p in self.params])
        grads = self.join([p.grad_numpy() for p in self.params])
        self._allocate([values, grads] + list(slot_fills or []))

    def _allocate(self, blocks: list[np.ndarray]) -> None:
        total = len(blocks) * self.n_elements
        if total > _MAX_ELEMENTS:
            raise ValueError(f"the optimiser's arena would hold {total} floats ({len(blocks)} buffers of "
                             f"{self.n_elements}); at most {_MAX_ELEMENTS} are allowed (32-bit tensor indices): "
                             "split the parameters over several optimisers")
        self.storage = spy.Tensor.from_numpy(get_device(), np.concatenate(blocks))
        self.n_slots = len(blocks) - 2
        for p, off in zip(self.params, self.offsets):
            p._rebind(self.storage.view(p.shape, offset=off), self.storage.view(p.shape, offset=self.n_elements + off))
            p.owner = self

    @property
    def n_elements(self) -> int:
        """Elements of one block (values, gradients or a state slot), padding included: 4 * n_vec."""
        return self.n_vec * VECTOR

    @property
    def buffer(self) -> spy.Buffer:
        return self.storage.storage

    def block(self, index: int) -> spy.Tensor:
        """Block ``index`` as a flat tensor view: 0 values, 1 gradients, 2 + s state slot s."""
        return self.storage.view((self.n_elements,), offset=index * self.n_elements)

    @property
    def values(self) -> spy.Tensor:
        return self.block(0)

    @property
    def grads(self) -> spy.Tensor:
        return self.block(1)

    def slot(self, s: int) -> spy.Tensor:
        return self.block(2 + s)

    def add_slot(self, fill: np.ndarray) -> int:
        """Append a state slot holding the flat array ``fill``; returns its index. Re-binds parameter views."""
        blocks = list(self.storage.to_numpy().reshape(2 + self.n_slots, self.n_elements))
        self._allocate(blocks + [np.asarray(fill, np.float32)])
        return self.n_slots - 1

    def split(self, flat: np.ndarray) -> list[np.ndarray]:
        """A flat host array of one block cut into one array per parameter (its shape)."""
        return [flat[off:off + p.size].reshape(p.shape).copy() for p, off in zip(self.params, self.offsets)]

    def join(self, arrays: list[np.ndarray], fill: float = 0.0) -> np.ndarray:
        """Inverse of :meth:`split`: per-parameter arrays into one flat host block (padding = ``fill``)."""
        flat = np.full(self.n_elements, fill, np.float32)
        for p, off, a in zip(self.params, self.offsets, arrays):
            flat[off:off + p.size] = np.asarray(a, np.float32).ravel()
        return flat
