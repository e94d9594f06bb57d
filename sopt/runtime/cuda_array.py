"""A sopt buffer's memory as a torch CUDA tensor, zero-copy, on the GPU that holds it.

Not ``Buffer.to_torch()`` / ``Tensor.to_torch()`` of SlangPy 0.43.1: their tensors say ``cuda:0`` whatever the GPU
(with two GPUs, rank 1's NCCL call then refused the gradient view). torch reads a pointer given through the
CUDA Array Interface (v3) as memory of the device it names, so views made here are on the right GPU. Used by
``sopt.torch`` (parameters, inputs and outputs) and ``sopt.distributed`` (the gradient all-reduce).
"""

from __future__ import annotations

import math
from typing import Any

import slangpy as spy

__all__ = ["buffer_view", "tensor_view"]


class _CudaArray:
    """The object ``torch.as_tensor`` reads: float32, C-contiguous ``shape`` at device address ``address``."""

    __slots__ = ("__cuda_array_interface__",)

    def __init__(self, address: int, shape: tuple[int, ...]) -> None:
        self.__cuda_array_interface__ = {"shape": shape, "typestr": "<f4", "data": (address, False), "version": 3,
                                         "strides": None}


def buffer_view(buffer: spy.Buffer, shape: tuple[int, ...], offset: int = 0) -> Any:
    """float32 elements ``offset .. offset + prod(shape)`` of ``buffer`` (a CUDA device's) as a torch tensor of
    ``shape`` on the current torch CUDA device, sharing the memory (writes through either side are seen by the
    other, in stream order)."""
    import torch

    n = math.prod(shape)
    if offset < 0 or 4 * (offset + n) > buffer.size:
        raise ValueError(f"cuda_array.buffer_view: elements [{offset}, {offset + n}) do not fit a buffer of "
                         f"{buffer.size // 4} float32")
    address = int(buffer.device_address) + 4 * offset
    view = torch.as_tensor(_CudaArray(address, tuple(int(s) for s in shape)),
                           device=torch.device("cuda", torch.cuda.current_device()))
    if view.data_ptr() != address:
        raise RuntimeError("cuda_array.buffer_view: torch copied the buffer instead of viewing it")
    return view


def tensor_view(t: spy.Tensor) -> Any:
    """The float32 sopt array ``t`` (contiguous, as every array sopt allocates) as a torch tensor of its shape."""
    shape = tuple(int(s) for s in t.shape)
    if not t.is_contiguous():
        raise ValueError(f"cuda_array.tensor_view: a strided array (shape {shape}, strides {tuple(t.strides)}) has "
                         "no contiguous view")
    return buffer_view(t.storage, shape, int(t.offset))
