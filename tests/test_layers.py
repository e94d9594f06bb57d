"""The layering of docs/architecture.md: a module imports only its own layer and the layers below it.

Layers, bottom to top: utils; runtime; autodiff; the library (config, optim, nn, sim, losses, data, train); interop
(torch, distributed); the experiments command; the problems (the top-level ``problems`` package). Imports are read
as tests/test_import_cycles.py reads them (function-level ones included, ``TYPE_CHECKING`` ones not). The package
root (``sopt/__init__.py``) names its exports as strings and imports only :mod:`sopt.utils.lazy_exports`.
"""

from __future__ import annotations

import ast
import pathlib

from tests.test_import_cycles import imported_modules, module_name

ROOT = pathlib.Path(__file__).resolve().parents[1]

LAYERS: list[tuple[str, set[str]]] = [
    ("utils", {"sopt.utils", "sopt.compat", "sopt._build_info"}),
    ("runtime", {"sopt.runtime"}),
    ("autodiff", {"sopt.autodiff"}),
    ("library", {"sopt.config", "sopt.optim", "sopt.nn", "sopt.sim", "sopt.losses", "sopt.data", "sopt.train"}),
    ("interop", {"sopt.torch", "sopt.distributed"}),
    ("experiments", {"sopt.experiments", "sopt.__main__"}),
    ("problems", {"problems"}),
]

# Imports made inside a function only when a torch object is handed in: the one way down-to-up, each for a reason
INTEROP_HOOKS = {
    ("sopt.autodiff.slang_module", "sopt.torch.slang_function"): "torch tensors into a Slang function: autograd",
    ("sopt.optim.param_groups", "sopt.torch.optimizer_link"): "torch.nn.Parameters given to a sopt optimiser",
}


def layer_of(module: str) -> int | None:
    for index, (_, prefixes) in enumerate(LAYERS):
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return index
    return None


def modules() -> dict[str, pathlib.Path]:
    files = [*(ROOT / "sopt").rglob("*.py"), *(ROOT / "problems").rglob("*.py")]
    return {module_name(p): p for p in files}


def test_every_module_has_a_layer():
    missing = sorted(m for m in modules() if m != "sopt" and layer_of(m) is None)
    assert not missing, f"modules in no layer of docs/architecture.md: {missing}"


def test_no_module_imports_a_layer_above_its_own():
    files = modules()
    names = set(files)
    upward = []
    for module, path in files.items():
        if module == "sopt":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for target in imported_modules(tree, module, path.name == "__init__.py", names):
            if target == "sopt" or (module, target) in INTEROP_HOOKS:
                continue
            if layer_of(target) > layer_of(module):
                upward.append(f"{module} ({LAYERS[layer_of(module)][0]}) -> {target} ({LAYERS[layer_of(target)][0]})")
    assert not upward, "imports of a higher layer:\n" + "\n".join(sorted(upward))


def test_the_package_root_imports_only_lazy_exports():
    tree = ast.parse((ROOT / "sopt" / "__init__.py").read_text(encoding="utf-8"))
    found = imported_modules(tree, "sopt", True, set(modules()))
    assert found <= {"sopt.utils.lazy_exports"}, found


def test_the_interop_hooks_are_still_function_level_imports():
    for (module, target) in INTEROP_HOOKS:
        path = modules()[module]
        tree = ast.parse(path.read_text(encoding="utf-8"))
        top = imported_modules(ast.Module(body=[n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))],
                                          type_ignores=[]), module, False, set(modules()))
        assert target not in top, f"{module} imports {target} at module level"
        assert target in imported_modules(tree, module, False, set(modules())), f"{module} no longer needs {target}"
