"""Batches: the (N, F) float32 tensors that flow between modules, checked on the host before any GPU work,
and the per-batch-size buffers a module reuses from call to call (slang_lib/nn/batch.slang reads them)."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import numpy as np
import slangpy as spy

from sopt.device import get_device
from sopt.kernel import dummy
from sopt.tape import current_tape, new_tensor

MAX_ELEMENTS = 2**31 - 1   # SlangPy indexes tensors with 32-bit ints
CACHED_SIZES = 4           # batch sizes a module keeps buffers for (least recently used dropped first)


def has_grad(t: spy.Tensor) -> bool:
    """Whether ``t`` carries a gradient buffer (``t.grad``)."""
    return t.grad_out is not None


def dtype_name(t: spy.Tensor) -> str:
    return str(t.dtype.full_name)


def as_batch(x: Any, features: int | None, who: str) -> spy.Tensor:
    """``x`` as an ``(N, features)`` float32 SlangPy tensor, else ValueError naming what was expected and what came.

    Accepts a SlangPy ``Tensor`` (used as is) or a float32 numpy array (uploaded into a new tensor without a
    gradient buffer). ``features=None`` accepts any feature count. Nothing touches the GPU before the checks
    pass; values are not inspected (NaN in a device tensor is not detected here). A training step calls this a
    few times per module, so the accepted path builds no message text and reads the shape as one tuple.
    """
    if isinstance(x, spy.Tensor):
        if x.dtype.full_name != "float":
            raise ValueError(f"{who}: expected a float32 (Slang 'float') tensor of shape {_wanted(features)}, got a "
                             f"tensor of dtype '{dtype_name(x)}' and shape {tuple(x.shape)}")
        _check_shape(x.shape.as_tuple(), features, who)   # as_tuple: tuple(Shape) costs ~2 us (it indexes)
        return x
    if isinstance(x, np.ndarray):
        if x.dtype != np.float32:
            raise ValueError(f"{who}: expected a float32 batch of shape {_wanted(features)}, got a numpy array of dtype "
                             f"{x.dtype} and shape {x.shape}; convert it with x.astype(np.float32)")
        _check_shape(tuple(x.shape), features, who)
        return spy.Tensor.from_numpy(get_device(), np.ascontiguousarray(x))
    raise ValueError(f"{who}: expected a slangpy.Tensor or a float32 numpy array of shape {_wanted(features)}, "
                     f"got {type(x).__name__}")


def _wanted(features: int | None) -> str:
    return f"(N, {features if features is not None else 'F'})"


def _check_shape(shape: tuple[int, ...], features: int | None, who: str) -> None:
    if len(shape) != 2:
        raise ValueError(f"{who}: expected a batch of shape {_wanted(features)}, got shape {shape} ({len(shape)} "
                         "dimension(s))")
    if features is not None and shape[1] != features:
        raise ValueError(f"{who}: expected {features} features in the last dimension, got shape {shape}")
    if shape[0] < 1:
        raise ValueError(f"{who}: the batch is empty (shape {shape}); N must be >= 1")
    if shape[1] < 1:
        raise ValueError(f"{who}: the batch has no features (shape {shape}); F must be >= 1")
    if shape[0] * max(shape[1], 1) > MAX_ELEMENTS:
        raise ValueError(f"{who}: a batch of shape {shape} has more than 2^31 - 1 elements, which SlangPy cannot index")


def check_output(y: spy.Tensor, n: int, features: int, who: str) -> None:
    """The ``y`` handed to ``backward`` must be this module's ``(n, features)`` output with a gradient buffer."""
    if not isinstance(y, spy.Tensor):
        raise ValueError(f"{who}.backward: y must be the slangpy.Tensor forward() returned, got {type(y).__name__}")
    if y.shape.as_tuple() != (n, features):
        raise ValueError(f"{who}.backward: y has shape {tuple(y.shape)}, expected ({n}, {features}) for an input of "
                         f"{n} samples; pass the x and y of the same forward() call")
    if not has_grad(y):
        raise ValueError(f"{who}.backward: y carries no gradient buffer; pass the tensor forward() returned, with "
                         "dL/dy in y.grad")


class BatchBuffers:
    """Device tensors keyed by (name, N), reused by every call with the same batch size N.

    A training step with a fixed batch size therefore allocates nothing. Buffers of the
    ``CACHED_SIZES`` most recently used batch sizes are kept; older ones are released.
    """

    def __init__(self) -> None:
        self._by_n: OrderedDict[int, dict[str, spy.Tensor]] = OrderedDict()

    def get(self, name: str, n: int, features: int, grads: bool = False, rows: int | None = None) -> spy.Tensor:
        """The ``(n, features)`` float32 tensor ``name`` (with a zeroed gradient buffer when ``grads``); with
        ``rows``, a ``(rows, features)`` scratch tensor kept with batch size n's buffers.

        While a ``sopt.Tape`` records, the tensor comes from the tape's pool instead: every recorded call
        owns its output (a module may be called several times in one step)."""
        if current_tape() is not None:
            return new_tensor((n if rows is None else rows, features), grads)
        slot = self._by_n.get(n)
        if slot is None:
            slot = self._by_n[n] = {}
            while len(self._by_n) > CACHED_SIZES:
                self._by_n.popitem(last=False)
        else:
            self._by_n.move_to_end(n)
        t = slot.get(name)
        if t is None:
            t = spy.Tensor.empty(get_device(), (n if rows is None else rows, features), "float")
            if grads:
                t = t.with_grads(zero=True)
            slot[name] = t
        return t


def batch_in(x: spy.Tensor, write_dx: bool) -> dict[str, Any]:
    """Arguments of a ``BatchIn`` (batch.slang): ``x`` and, when ``write_dx``, its gradient buffer to overwrite."""
    return {"x": x, "dx": x.grad if write_dx else dummy(2), "write_dx": int(write_dx)}


def batch_grad(y: spy.Tensor) -> dict[str, Any]:
    """Arguments of a ``BatchGrad`` (batch.slang): dL/dy in ``y.grad``."""
    return {"dy": y.grad}
