"""State: the named float32 arrays of one simulator state, batch first."""

from __future__ import annotations

from typing import Iterator

import numpy as np
import slangpy as spy


class State:
    """Named device arrays of one state, e.g. ``State(x=positions, v=velocities)`` with x, v of shape (N, 3).

    Read an array as ``state.x`` or ``state["x"]``; ``state.numpy()`` copies them all to the host (waits for
    the GPU). A state returned by a simulator step on a tape lives in the tape's pool: read it after the
    tape's submission and before the next step reuses the pool.
    """

    def __init__(self, **arrays: spy.Tensor) -> None:
        for name, t in arrays.items():
            if not isinstance(t, spy.Tensor):
                raise ValueError(f"State: array {name!r} must be a slangpy.Tensor, got {type(t).__name__}")
        object.__setattr__(self, "_arrays", dict(arrays))

    def __getattr__(self, name: str) -> spy.Tensor:
        arrays = object.__getattribute__(self, "_arrays")
        if name in arrays:
            return arrays[name]
        raise AttributeError(f"State has no array {name!r}; it has {', '.join(arrays) or 'none'}")

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("State is immutable: a step returns a new State")

    def __getitem__(self, name: str) -> spy.Tensor:
        return getattr(self, name)

    def __iter__(self) -> Iterator[str]:
        return iter(self._arrays)

    def __len__(self) -> int:
        return len(self._arrays)

    def names(self) -> tuple[str, ...]:
        return tuple(self._arrays)

    def items(self) -> Iterator[tuple[str, spy.Tensor]]:
        return iter(self._arrays.items())

    def arrays(self) -> list[spy.Tensor]:
        return list(self._arrays.values())

    @property
    def nbytes(self) -> int:
        """Device bytes of the values (gradients not counted)."""
        return sum(4 * int(np.prod(tuple(t.shape))) for t in self._arrays.values())

    def numpy(self) -> dict[str, np.ndarray]:
        """Host copies of every array, by name (waits for the GPU)."""
        return {name: t.to_numpy().reshape(tuple(t.shape)).copy() for name, t in self._arrays.items()}

    def __repr__(self) -> str:
        return "State(" + ", ".join(f"{n}={tuple(t.shape)}" for n, t in self._arrays.items()) + ")"
