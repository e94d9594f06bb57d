"""Foundations every layer may use and that import nothing else of sopt: argument checks, bounded reads of
regular files, atomic writes, bounded JSON nesting and lazy exports.

Each module loads on first use (``sopt.utils.validation``); import the module you need."""

from sopt.utils import lazy_exports as _lazy

__all__ = ["atomic_write", "lazy_exports", "nesting", "regular_file", "validation"]
__getattr__, __dir__ = _lazy.lazy_exports(__name__, {m: f"{__name__}.{m}" for m in __all__})
