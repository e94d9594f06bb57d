"""No import cycles between modules of ``sopt``, function-level imports included.

Every module under ``sopt/`` is parsed with ``ast``; each ``import``/``from ... import`` anywhere in it (module
level or inside a function) is an edge to the module it names (``from pkg import name`` is an edge to
``pkg.name`` when that is a module, else to ``pkg``), except imports under ``if TYPE_CHECKING:``, which never
run. A cycle hidden in a function-level import is still a cycle: the two modules cannot be understood, tested or
split apart one without the other.
"""

from __future__ import annotations

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "sopt"

# Edges of cycles in files owned by others (reported to the lead; any other cycle fails the test). Remove an entry
# when its edge goes.
KNOWN_EDGES: set[tuple[str, str]] = {
    # the interop hooks of tests/test_layers.py: function-level imports made only when a torch object comes in
    ("sopt.autodiff.slang_module", "sopt.torch.slang_function"),
    ("sopt.optim.param_groups", "sopt.torch.optimizer_link"),
}


def module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _type_checking_only(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def imported_modules(tree: ast.AST, module: str, is_package: bool, modules: set[str]) -> set[str]:
    """The modules of ``modules`` that ``tree`` imports at run time: ``import a.b`` is ``a.b``; ``from a import
    b`` is ``a.b`` when that is a module, else ``a`` (b is a name its ``__init__`` defines)."""
    found: set[str] = set()
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _type_checking_only(node):
            stack.extend(node.orelse)   # only the else branch runs
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:   # relative: resolved against this module's package
                package = module.split(".") if is_package else module.split(".")[:-1]
                package = package[:len(package) - (node.level - 1)]
                base = ".".join([*package, base] if base else package)
            found.update(f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names)
        stack.extend(ast.iter_child_nodes(node))
    return (found & modules) - {module}


def import_graph() -> dict[str, set[str]]:
    """Module -> the sopt modules it imports at run time, less KNOWN_EDGES."""
    files = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        targets = imported_modules(tree, module, path.name == "__init__.py", set(files))
        graph[module] = {t for t in targets if (module, t) not in KNOWN_EDGES}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The module graph collapsed to sopt's subpackages and top-level modules (``sopt.nn.linear`` -> ``sopt.nn``);
    the root package ``sopt`` (lazy re-exports of everything) is left out."""
    def unit(module: str) -> str:
        return ".".join(module.split(".")[:2])
    out: dict[str, set[str]] = {}
    for module, targets in graph.items():
        if module == "sopt":
            continue
        out.setdefault(unit(module), set()).update(unit(t) for t in targets if t != "sopt" and unit(t) != unit(module))
    return out


def describe(component: list[str], graph: dict[str, set[str]]) -> str:
    members = set(component)
    edges = [f"{a} -> {b}" for a in component for b in sorted(graph[a]) if b in members]
    return "; ".join(edges)


def test_the_cycle_finder_sees_function_level_imports_and_skips_type_checking() -> None:
    tree = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import sopt.b\n"
                     "def f():\n    from sopt.c import x\n    from . import d\n")
    modules = {"sopt", "sopt.a", "sopt.b", "sopt.c", "sopt.d"}
    assert imported_modules(tree, "sopt.a", False, modules) == {"sopt.c", "sopt.d"}
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycles_in_sopt() -> None:
    graph = import_graph()
    found = cycles(graph)
    assert not found, "import cycles: " + " | ".join(describe(c, graph) for c in found)


def test_no_import_cycles_between_sopt_packages() -> None:
    # e.g. nn.gradcheck importing train.trainer while train imports nn: no module cycle, but neither package can be
    # used, tested or moved without the other
    graph = package_graph(import_graph())
    found = cycles(graph)
    assert not found, "import cycles between packages: " + " | ".join(describe(c, graph) for c in found)


def _reachable(graph: dict[str, set[str]], start: set[str]) -> set[str]:
    seen, stack = set(start), list(start)
    while stack:
        for target in graph.get(stack.pop(), ()):
            if target not in seen:
                seen.add(target)
                stack.append(target)
    return seen


def test_sim_imports_nothing_from_nn() -> None:
    # the simulators launch their kernels through sopt.runtime.kernel, below nn: a simulator can be read, tested and used
    # without the neural-network package, directly or through any module it imports
    graph = import_graph()
    sim = {m for m in graph if m == "sopt.sim" or m.startswith("sopt.sim.")}
    reached = _reachable(graph, sim)
    nn = sorted(m for m in reached if m == "sopt.nn" or m.startswith("sopt.nn."))
    assert not nn, f"sopt.sim reaches {nn}: " + "; ".join(
        f"{a} -> {b}" for a in sorted(reached) for b in sorted(graph[a]) if b in nn)


def test_the_kernel_layer_is_below_what_launches_kernels() -> None:
    # sopt.runtime.kernel imports only the device (and the compat modules below it); the tape, nn, sim, optim and
    # losses launch through it
    graph = import_graph()
    below = {m for m in _reachable(graph, {"sopt.runtime.kernel"}) - {"sopt.runtime.kernel"}
             if not m.startswith("sopt.compat")}
    assert below == {"sopt.runtime.device"}
    for user in ("sopt.autodiff.tape", "sopt.nn.linear", "sopt.sim.projectile", "sopt.optim.optimizer",
                 "sopt.losses.regression", "sopt.autodiff.slang_module"):
        assert "sopt.runtime.kernel" in graph[user], user
