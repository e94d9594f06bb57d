"""Batches: the (N, F) float32 tensors that flow between modules, checked on the host before any GPU work,
and the per-batch-size buffers a module reuses from call to call (slang_lib/nn/batch.slang reads them)."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import numpy as np
import slangpy as spy
from slangpy.slangpy import Shape

from sopt.runtime.device import get_device
from sopt.runtime.kernel import dummy
from sopt.autodiff.tape import current_tape, new_tensor

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
        _check_shape(x.shape.as_tuple(), features, who)   # as_tuple: tuple(Shape) is slower (it indexes)
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

    def get(self, name: str, n: int, features: int, grads: bool = False, rows: int | None = None,
            columns: bool = False) -> spy.Tensor:
        """The ``(n, features)`` float32 tensor ``name`` (with a zeroed gradient buffer when ``grads``); with
        ``rows``, a ``(rows, features)`` scratch tensor kept with batch size n's buffers. ``columns``: laid out
        column-major (see :func:`column_major`), its gradient too.

        While a ``sopt.Tape`` records, the tensor comes from the tape's pool instead: every recorded call
        owns its output (a module may be called several times in one step)."""
        if current_tape() is not None:
            if columns:
                m = n if rows is None else rows
                return column_major(new_tensor((features, column_stride(m)), grads), m)
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
            m = n if rows is None else rows
            t = spy.Tensor.empty(get_device(), (features, column_stride(m)) if columns else (m, features), "float")
            if grads:
                t = t.with_grads(zero=True)
            slot[name] = t = column_major(t, m) if columns else t
        return t


def column_stride(n: int) -> int:
    """The column stride of a column-major batch of n rows: n rounded up to 32 floats (128 bytes), plus 32, so that
    the columns of a power-of-two batch do not start a power of two apart (the same L2 sets and slices, which
    slows a kernel writing many columns at once)."""
    return -(-n // 32) * 32 + 32


def column_major(t: spy.Tensor, n: int | None = None) -> spy.Tensor:
    """The ``(n, W)`` column-major view of the contiguous ``(W, ld)`` tensor ``t`` (n <= ld, default ld), and of its
    gradient when it has one: element ``[i, j]`` at ``j ld + i`` (strides ``(1, ld)``), so that each feature's n
    values are contiguous, as tiny-cuda-nn's encodings write them for its fully fused MLPs. Kernels that take
    strides read either layout; ``to_numpy()`` gives the ``(n, W)`` values."""
    w, ld = t.shape.as_tuple()
    n = ld if n is None else n

    def view(a: spy.Tensor) -> spy.Tensor:
        return spy.Tensor(a.storage, a.dtype, Shape((n, w)), Shape((1, ld)), a.offset)

    if t.grad_out is None:
        return view(t)
    grad = view(t.grad_out)
    return spy.Tensor(t.storage, t.dtype, Shape((n, w)), Shape((1, ld)), t.offset, grad_in=grad, grad_out=grad)


def write_batch(t: spy.Tensor, values: np.ndarray) -> None:
    """Copy the float32 ``(N, W)`` array ``values`` into ``t``, row-major or :func:`column_major` (SlangPy's
    ``copy_from_numpy`` refuses a tensor that is not contiguous)."""
    if t.is_contiguous():
        t.copy_from_numpy(values)
        return
    n, w = t.shape.as_tuple()
    row, ld = t.strides.as_tuple()
    if row != 1 or ld < n:
        raise ValueError(f"write_batch: expected a row-major or column-major (N, W) tensor, got strides "
                         f"{(row, ld)} for shape {(n, w)}")
    columns = np.zeros((w, ld), np.float32)   # the padding between columns written too (zeros)
    columns[:, :n] = values.T
    spy.Tensor(t.storage, t.dtype, Shape((w, ld)), Shape((ld, 1)), t.offset).copy_from_numpy(columns)


def batch_in(x: spy.Tensor, write_dx: bool) -> dict[str, Any]:
    """Arguments of a ``BatchIn`` (batch.slang): ``x`` and, when ``write_dx``, its gradient buffer to overwrite."""
    return {"x": x, "dx": x.grad if write_dx else dummy(2), "write_dx": int(write_dx)}


def batch_grad(y: spy.Tensor) -> dict[str, Any]:
    """Arguments of a ``BatchGrad`` (batch.slang): dL/dy in ``y.grad``."""
    return {"dy": y.grad}
