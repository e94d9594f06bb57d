"""Ray internals sopt's sweep backend uses.

- ``clusters_off``: Ray >= 2.4x turns a loopback ``_node_ip_address`` into the machine's routable address unless
  its "clusters" are off (``ray._private.ray_constants.ENABLE_RAY_CLUSTER``, as on macOS and Windows); sopt's local
  instance must listen on 127.0.0.1 only, so it is switched off for the ``ray.init`` call. Where the constant is
  missing, nothing is changed, and the backend still refuses an instance that listens elsewhere (RayBindError).
"""

from __future__ import annotations

import contextlib
from typing import Iterator

from sopt.compat import is_checked

CHECKED_VERSIONS = ("2.60.0",)


def checked() -> bool:
    import ray
    return is_checked(ray.__version__, CHECKED_VERSIONS)


@contextlib.contextmanager
def clusters_off() -> Iterator[None]:
    """Ray's cluster mode off while the block runs (a no-op where this Ray has no such switch)."""
    try:
        from ray._private import ray_constants
    except ImportError:
        ray_constants = None
    saved = getattr(ray_constants, "ENABLE_RAY_CLUSTER", None)
    if saved is not None:
        ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        if saved is not None:
            ray_constants.ENABLE_RAY_CLUSTER = saved
