"""Fixtures of the sopt.torch tests: the torch device sopt reads tensors from, so the same tests run on both
pairings (sopt on Vulkan with CPU torch, copying; sopt on CUDA sharing torch's context, zero-copy)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="sopt.torch needs torch (pip install 'sopt[torch]')")


@pytest.fixture(scope="session")
def tdev() -> "torch.device":
    """``sopt.torch``'s torch device: the CPU with sopt on Vulkan, ``cuda:N`` with sopt on CUDA."""
    from sopt.torch import placement
    return placement.torch_device()


@pytest.fixture(scope="session")
def shared(tdev: "torch.device") -> bool:
    """Whether sopt shares torch's CUDA context (tensors pass without copies) rather than copying (Vulkan)."""
    return tdev.type == "cuda"
