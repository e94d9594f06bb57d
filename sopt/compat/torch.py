"""torch internals sopt's torch bridge uses, each with the public (slower or more conservative) way taken on a
torch that is not in CHECKED_VERSIONS.

- ``current_raw_stream``: torch's current CUDA stream as a raw handle (``torch._C._cuda_getCurrentRawStream``;
  public: ``torch.cuda.current_stream(i).cuda_stream``, which builds a Stream object at every call).
- ``has_gradient_hooks``: whether a tensor has backward or post-accumulate hooks (``_backward_hooks``,
  ``_post_accumulate_grad_hooks``; public: none, so an unchecked torch is answered "yes", which makes the bridge
  copy gradients the way torch's engine would rather than accumulate them in place).
- ``engine_will_execute``: whether the running backward reaches an autograd node
  (``torch._C._will_engine_execute_node``; public: none, answered "no", the same conservative path).
"""

from __future__ import annotations

import sys
from typing import Any

from sopt.compat import is_checked

CHECKED_VERSIONS = ("2.13.0",)


def _torch() -> Any:
    return sys.modules["torch"]


def checked() -> bool:
    """Whether the loaded torch is one these internals were checked against."""
    return is_checked(_torch().__version__, CHECKED_VERSIONS)


def current_raw_stream(index: int) -> int:
    """The handle of torch's current CUDA stream on device ``index``."""
    torch = _torch()
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None) if checked() else None
    return raw(index) if raw is not None else torch.cuda.current_stream(index).cuda_stream


def has_gradient_hooks(t: Any) -> bool:
    """Whether ``t`` has backward or post-accumulate-grad hooks (True where that cannot be known)."""
    if not checked():
        return True
    return bool(t._backward_hooks or t._post_accumulate_grad_hooks)


def engine_will_execute(node: Any) -> bool:
    """Whether the running backward executes autograd node ``node`` (False where that cannot be known; raises
    RuntimeError outside a ``.backward()``, as torch does, e.g. under ``torch.autograd.grad``)."""
    if not checked():
        return False
    return bool(_torch()._C._will_engine_execute_node(node))
