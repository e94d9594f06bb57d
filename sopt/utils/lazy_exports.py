"""A package's public names loaded on first use (PEP 562): ``from sopt.sim import Projectile`` imports
``sopt.sim.projectile`` and what it needs, not every simulator; ``sopt.sim.Projectile``, ``dir(sopt.sim)`` and
``__all__`` are as with eager imports. A package names each export once, in its type-checking imports::

    __getattr__, __dir__ = lazy_exports(__name__)
    if TYPE_CHECKING:
        from sopt.sim.projectile import Projectile      # sopt.sim.Projectile, loaded on first use
        from sopt.optim import lr_scheduler             # a submodule, exported as such

:func:`lazy_exports` reads those imports from the package's own source (its ``if TYPE_CHECKING:`` block), so type
checkers and the run-time lookup see the same declaration. The package's ``__all__`` is those names plus the names
its module-level code imports from its own submodules, and ``_EXPORTS`` maps each lazy name to its module.

A name equal to a submodule's (``sopt.sim.rollout`` the function, in ``sopt/sim/rollout.py``) cannot be lazy: the
submodule's first import sets the package attribute to the module. The package imports such names itself, at
module level.
"""

from __future__ import annotations

import ast
import importlib
import sys
from typing import Any, Callable


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def declared_exports(package: str, source: str) -> tuple[dict[str, str], list[str]]:
    """(name -> module, eager names) of the package whose ``__init__`` source is ``source``: the ``from M import
    a, b as c`` statements of its ``if TYPE_CHECKING:`` block (``from package import sub`` names a submodule,
    mapped to ``package.sub``), and the names its module-level ``from package.sub import ...`` statements bind."""
    tree = ast.parse(source)
    exports: dict[str, str] = {}
    eager: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for stmt in node.body:
                if not isinstance(stmt, ast.ImportFrom) or stmt.level or stmt.module is None:
                    raise ValueError(f"{package}: its TYPE_CHECKING block may hold only absolute 'from ... import' "
                                     f"statements (line {stmt.lineno})")
                for alias in stmt.names:
                    name = alias.asname or alias.name
                    exports[name] = f"{package}.{alias.name}" if stmt.module == package else stmt.module
        elif (isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(package + ".")
              and node.module != __name__):   # this helper itself, which every package imports
            eager.extend(alias.asname or alias.name for alias in node.names)
    return exports, eager


def lazy_exports(package: str) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The module-level ``__getattr__`` and ``__dir__`` of ``package`` (call it from the package's ``__init__``,
    which must be loaded from source), which also gets its ``__all__`` (packages only) and ``_EXPORTS``. A name whose module is
    ``package.<name>`` is that submodule itself; a name whose module is another package is looked up there (an
    alias: ``sopt.init`` is ``sopt.nn.init``); any other name is the package's submodule of that name where there is
one, as after an eager import. A loaded name is stored in the package, so later lookups are plain
    attribute reads."""
    module = sys.modules[package]
    with open(module.__file__, encoding="utf-8") as f:
        exports, eager = declared_exports(package, f.read())
    module._EXPORTS = exports
    if hasattr(module, "__path__"):   # a package; a plain module keeps Python's own star-import rule
        module.__all__ = sorted({*exports, *eager})

    def __getattr__(name: str) -> Any:
        where = exports.get(name)
        if where is None:
            if name.startswith("__"):
                raise AttributeError(f"module {package!r} has no attribute {name!r}")
            where = f"{package}.{name}"   # any other submodule, as an eager import would have made it an attribute
            try:
                importlib.import_module(where)
            except ModuleNotFoundError as exc:
                if exc.name != where:
                    raise
                raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
        value = importlib.import_module(where)
        if where != f"{package}.{name}":
            value = getattr(value, name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *exports})

    return __getattr__, __dir__
