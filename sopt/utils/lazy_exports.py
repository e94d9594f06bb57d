"""A package's public names loaded on first use (PEP 562): ``from sopt.sim import Projectile`` imports
``sopt.sim.projectile`` and what it needs, not every simulator; ``sopt.sim.Projectile``, ``dir(sopt.sim)`` and
``__all__`` are as with eager imports. A package declares where each name lives and its type-checking imports::

    _EXPORTS = {"Projectile": "sopt.sim.projectile", ...}
    __all__ = sorted(_EXPORTS)
    __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
    if TYPE_CHECKING:
        from sopt.sim.projectile import Projectile

A name equal to a submodule's (``sopt.sim.rollout`` the function, in ``sopt/sim/rollout.py``) cannot be lazy: the
submodule's first import sets the package attribute to the module. The package imports such names itself.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any, Callable


def lazy_exports(package: str, exports: dict[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The module-level ``__getattr__`` and ``__dir__`` of ``package``: name -> the module that defines it
    (``exports``; a name whose module is ``package.<name>`` is that submodule itself). A loaded name is stored in
    the package, so later lookups are plain attribute reads."""

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = importlib.import_module(module)
        if module != f"{package}.{name}":
            value = getattr(value, name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *exports})

    return __getattr__, __dir__
