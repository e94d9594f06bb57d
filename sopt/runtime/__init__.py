"""sopt's runtime: the device and its selection, declared kernels and their launch, submission, CUDA graph
capture and CUDA memory views. It imports nothing of sopt above :mod:`sopt.utils`.

Each module loads on first use (``sopt.runtime.device``); import the module you need."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sopt.utils.lazy_exports import lazy_exports

__getattr__, __dir__ = lazy_exports(__name__)

if TYPE_CHECKING:
    from sopt.runtime import cuda_array, cuda_graph, device, kernel
