"""SlangPy internals sopt uses: none has a public equivalent in the checked versions.

- ``cu_event_record_slot``: slang-rhi's ``cuEventRecord`` function pointer, a global exported by SlangPy's native
  library (libsgl), which a CUDA-graph capture swaps for a no-op (sopt.runtime.cuda_graph says why).
- ``build_call_data``: the call data (and its compute pipeline) a call will launch, built ahead of the launch.
- ``args_signature`` and ``result_vector_type``: a function node's call-data cache key and the bound type of its
  ``_result``, which sopt.autodiff.slang_module reads to size a result without building a second kernel.
"""

from __future__ import annotations

import ctypes
import pathlib
from typing import Any

from sopt.compat import UncheckedVersionError, is_checked

CHECKED_VERSIONS = ("0.43.1",)


def version() -> str:
    import slangpy
    return slangpy.__version__


def cu_event_record_slot() -> ctypes.c_void_p:
    """The ``cuEventRecord`` pointer slot in SlangPy's libsgl.so; UncheckedVersionError naming the version where
    this SlangPy's library does not export it."""
    import slangpy
    try:
        return ctypes.c_void_p.in_dll(ctypes.CDLL(str(pathlib.Path(slangpy.__file__).parent / "libsgl.so")),
                                      "cuEventRecord")
    except (OSError, ValueError) as e:   # another SlangPy build: its library or the symbol is not there
        raise UncheckedVersionError(
            f"this SlangPy ({slangpy.__version__}) does not export slang-rhi's cuEventRecord, which a CUDA-graph "
            f"capture must silence (checked with SlangPy {', '.join(CHECKED_VERSIONS)}): {e}") from e


def args_signature(node: Any, *args: Any, **kwargs: Any) -> str:
    """SlangPy's call-data cache key of ``node`` called with these arguments (dtypes, dimensions, Python types)."""
    from slangpy.slangpy import SignatureBuilder
    signature = SignatureBuilder()
    node._find_native_root()._native_cache.get_args_signature(signature, *args, **kwargs)
    return signature.str


def result_vector_type(call_data: Any) -> Any:
    """The Slang type SlangPy bound ``_result`` to in ``call_data`` (a CallData built with ``_result``)."""
    return call_data.debug_only_bindings.kwargs["_result"].vector_type


def build_call_data(node: Any, *args: Any, **kwargs: Any) -> Any:
    """The call data SlangPy builds (and caches) for ``node`` called with these arguments: its ``pipeline`` is
    the one the call's launch will use (sopt.runtime.kernel compiles it ahead, to time the driver's compile)."""
    return node.debug_build_call_data(*args, **kwargs)


def checked() -> bool:
    """Whether the installed SlangPy is one these internals were checked against."""
    return is_checked(version(), CHECKED_VERSIONS)
