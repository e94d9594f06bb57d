"""Every private API of another library that sopt uses, one module per library, each with the versions it was
checked against (``CHECKED_VERSIONS``) and, where the library has one, the public way used on other versions.

tests/compat fails on an installed version that is not listed, so an upgrade is checked before it lands. Nothing
outside this package touches another library's private names (tests/test_layers.py)."""

from __future__ import annotations

import re
from typing import Iterable


class UncheckedVersionError(RuntimeError):
    """A private API is needed from a version of its library that sopt was not checked against."""


def release(version: str) -> str:
    """``"2.13.0+cpu"`` -> ``"2.13.0"``: the release a local build (``+cpu``, ``+cu128``) was made from."""
    match = re.match(r"\d+(\.\d+)*", version)
    return match.group(0) if match else version


def is_checked(version: str, checked: Iterable[str]) -> bool:
    """Whether ``version`` (its release) is one of ``checked``."""
    return release(version) in set(checked)
