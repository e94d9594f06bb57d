"""Foundations every layer may use and that import nothing else of sopt: argument checks, bounded reads of
regular files, atomic writes, bounded JSON nesting and lazy exports.

Each module loads on first use (``sopt.utils.validation``); import the module you need."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sopt.utils import lazy_exports as _lazy

__getattr__, __dir__ = _lazy.lazy_exports(__name__)

if TYPE_CHECKING:
    from sopt.utils import atomic_write, lazy_exports, nesting, regular_file, validation
