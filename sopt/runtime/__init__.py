"""sopt's runtime: the device and its selection, declared kernels and their launch, submission, CUDA graph
capture and CUDA memory views. It imports nothing of sopt above :mod:`sopt.utils`.

Each module loads on first use (``sopt.runtime.device``); import the module you need."""

from sopt.utils.lazy_exports import lazy_exports

__all__ = ["cuda_array", "cuda_graph", "device", "kernel"]
__getattr__, __dir__ = lazy_exports(__name__, {m: f"{__name__}.{m}" for m in __all__})
