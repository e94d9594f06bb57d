"""ParameterArena: the parameters of one optimiser in one flat value buffer and one flat gradient buffer.

Layout: parameter groups one after another, each parameter starting at a multiple of 4 elements so a kernel
can move whole ``float4`` vectors; padding elements hold zero value and zero gradient, and every update rule
maps (p=0, g=0, state=0) to itself, so they stay zero. Each Parameter becomes a view into the arena.
Optimiser state (Adam's moments, ...) lives in further flat buffers of the same layout, one per state.
"""

from __future__ import annotations

import numpy as np
import slangpy as spy

from sopt.device import get_device
from sopt.parameter import Parameter

VECTOR = 4  # elements per float4


class ParameterArena:
    """Flat storage for ``groups`` (a list of parameter lists); ``group_end_vec[k]`` ends group k, in float4s."""

    def __init__(self, groups: list[list[Parameter]]) -> None:
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
        values = np.zeros(self.n_vec * VECTOR, np.float32)
        grads = np.zeros_like(values)
        for p, off in zip(self.params, self.offsets):
            values[off:off + p.size] = p.numpy().ravel()
            grads[off:off + p.size] = p.grad_numpy().ravel()
        device = get_device()
        self.values = spy.Tensor.from_numpy(device, values)
        self.grads = spy.Tensor.from_numpy(device, grads)
        for p, off in zip(self.params, self.offsets):
            p._rebind(self.values.view(p.shape, offset=off), self.grads.view(p.shape, offset=off))
            p.owner = self

    @property
    def n_elements(self) -> int:
        """Elements including alignment padding (= 4 * n_vec)."""
        return self.n_vec * VECTOR

    def new_state(self, fill: float = 0.0) -> spy.Tensor:
        """A flat float32 buffer of the arena's layout, every element ``fill``."""
        return spy.Tensor.from_numpy(get_device(), np.full(self.n_elements, fill, np.float32))

    def split(self, flat: np.ndarray) -> list[np.ndarray]:
        """A flat host array of the arena's layout cut into one array per parameter (its shape)."""
        return [flat[off:off + p.size].reshape(p.shape).copy() for p, off in zip(self.params, self.offsets)]

    def join(self, arrays: list[np.ndarray], fill: float = 0.0) -> np.ndarray:
        """Inverse of :meth:`split`: per-parameter arrays into one flat host array (padding = ``fill``)."""
        flat = np.full(self.n_elements, fill, np.float32)
        for p, off, a in zip(self.params, self.offsets, arrays):
            flat[off:off + p.size] = np.asarray(a, np.float32).ravel()
        return flat

    def zero_grad(self) -> None:
        self.grads.clear()
