"""Where torch tensors meet sopt's device: zero-copy on a shared CUDA context, host copies on Vulkan.

Two pairings work:

- **shared** (sopt on CUDA, made after ``import torch``, so it shares torch's context; see
  ``sopt.runtime.device.torch_device_index``): CUDA tensors of that device pass without a host copy (a device-to-device
  copy into sopt's arrays at most) and sopt's work runs on torch's current stream;
- **copy** (sopt on Vulkan, e.g. lavapipe in CI; torch on the CPU): every tensor crosses through host memory.
  The first time, a warning says so and what it costs.

Anything else (a CUDA tensor with sopt on Vulkan, a CPU tensor with sopt on CUDA, another CUDA device, a CUDA
device that does not share torch's context) is a ValueError naming the tensor's device and what would work,
raised before any GPU work.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch

from sopt.runtime import device as dev

SHARED, COPY = "shared", "copy"
_warned: set[str] = set()


_resolved: tuple[Any, str, torch.device | None] | None = None   # (sopt's device, its mode, torch's device)


def _resolve() -> tuple[str, torch.device | None]:
    """(mode, torch device) of sopt's device, worked out once per device (they are asked several times a call);
    the mode is ``""`` for a CUDA device not sharing torch's context."""
    global _resolved
    device = dev.get_device()
    if _resolved is None or _resolved[0] is not device:
        if dev.device_kind() == "vulkan":
            _resolved = (device, COPY, torch.device("cpu"))
        else:
            index = dev.torch_device_index()
            _resolved = (device, SHARED, torch.device("cuda", index)) if index is not None else (device, "", None)
    return _resolved[1], _resolved[2]


def mode() -> str:
    """``"shared"`` on a CUDA device sharing torch's context, ``"copy"`` on Vulkan, else ValueError (a CUDA
    device made before torch was imported)."""
    m = _resolve()[0]
    if not m:
        raise ValueError("sopt's CUDA device was created before torch was imported, so it does not share torch's CUDA "
                         "context and cannot read torch's tensors; import torch (or sopt.torch) before sopt's first "
                         "GPU work (the first Parameter, module or kernel)")
    return m


def torch_device() -> torch.device:
    """The torch device whose tensors sopt takes: ``cuda:<index>`` when shared, else the CPU."""
    return _resolve()[1] or torch.device("cpu")


def check_tensor(t: Any, what: str) -> torch.Tensor:
    """``t`` if it is a float32 torch tensor on the device sopt can read (see the module docstring); returns
    ``t`` contiguous. ValueError naming ``what``, its dtype or device, and what is allowed."""
    if not isinstance(t, torch.Tensor):
        raise ValueError(f"{what} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype != torch.float32:
        raise ValueError(f"{what} has dtype {t.dtype}; sopt computes in float32: pass {what}.float()")
    m = mode()
    want = torch_device()
    if t.device != want:
        if m == COPY:
            raise ValueError(f"{what} is on {t.device}, but sopt runs on Vulkan, which reads torch tensors only "
                             "from the CPU (through host copies); pass a CPU tensor, or run sopt on CUDA "
                             "(SOPT_DEVICE=cuda, torch imported first) to pass CUDA tensors without copies")
        raise ValueError(f"{what} is on {t.device}, but sopt runs on CUDA sharing torch's context on {want}; move it "
                         f"there ({what}.to('{want}')): mixing devices would need copies sopt does not make silently")
    if m == COPY:
        warn_copies()
    return t.contiguous()


def warn_copies() -> None:
    """Warn once per process that torch tensors cross into sopt (Vulkan) through host copies."""
    if COPY in _warned:
        return
    _warned.add(COPY)
    warnings.warn("sopt.torch: sopt runs on Vulkan, so torch (CPU) tensors and parameters are copied through host "
                  "memory on every call: an upload of each input and parameter that changed, a download of each "
                  "output and gradient, and a wait for the GPU per call. On CUDA (torch imported before sopt's first "
                  "GPU work) they are shared without copies.", RuntimeWarning, stacklevel=3)
