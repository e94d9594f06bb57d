"""Copies between torch tensors and sopt's float32 arrays (``slangpy.Tensor``), by placement mode.

On a shared CUDA context a sopt array is read and written through its zero-copy torch view
(:func:`sopt.runtime.cuda_array.tensor_view`), with torch's device-to-device copies on torch's current stream; on Vulkan through host
memory (numpy). Every function takes arrays already checked by :func:`sopt.torch.placement.check_tensor`.
"""

from __future__ import annotations

import numpy as np
import slangpy as spy
import torch

from sopt.runtime import device as dev
from sopt.autodiff import tape as tp
from sopt.runtime.cuda_array import tensor_view
from sopt.torch import placement

_MAX_VIEWS = 4096
_views: dict[int, tuple[spy.Tensor, torch.Tensor]] = {}   # id(sopt array) -> (the array, kept alive; its view)


def torch_view(t: spy.Tensor) -> torch.Tensor:
    """The zero-copy torch view of the sopt array ``t`` (shared mode only), made once per array: pooled arrays
    are reused step after step, and making a view costs host time."""
    entry = _views.get(id(t))
    if entry is not None and entry[0] is t:
        return entry[1]
    if len(_views) >= _MAX_VIEWS:
        _views.clear()
    view = tensor_view(t)
    _views[id(t)] = (t, view)
    return view


def into_sopt(src: torch.Tensor, dst: spy.Tensor, encoder: spy.CommandEncoder) -> None:
    """Write ``src`` (same element count) into ``dst``: a torch copy on torch's stream (shared), or an upload
    recorded into ``encoder`` (copy mode), so it lands before the commands recorded after it."""
    if placement.mode() == placement.SHARED:
        view, src = torch_view(dst), src.detach()
        view.copy_(src if src.shape == view.shape else src.reshape(view.shape))
        return
    host = np.ascontiguousarray(src.detach().reshape(-1).numpy(), np.float32)
    dev.upload(encoder, dst.storage, 4 * int(dst.offset), host)


def new_sopt(src: torch.Tensor, grads: bool, encoder: spy.CommandEncoder) -> spy.Tensor:
    """A sopt array (from the recording tape's pool, with a gradient buffer when ``grads``) holding ``src``."""
    if src.dim() == 0:
        raise ValueError("sopt.torch: a 0-d tensor has no shape sopt arrays can take; pass it as shape (1,)")
    out = tp.new_tensor(tuple(src.shape), grads)
    into_sopt(src, out, encoder)
    return out


def to_torch(t: spy.Tensor, shape: tuple[int, ...] | None = None) -> torch.Tensor:
    """A new torch tensor (the caller's to keep) holding the sopt array ``t``, shaped ``shape`` (default t's).
    Copy mode reads through the host and so waits for the GPU; shared mode copies on torch's stream."""
    if placement.mode() == placement.SHARED:
        view = torch_view(t)
        # a copy: t is a pool array that the next call of the same kind overwrites
        return (view if shape is None or view.shape == shape else view.reshape(shape)).clone()
    host = t.to_numpy()
    return torch.from_numpy(host.reshape(tuple(t.shape) if shape is None else shape).copy())
