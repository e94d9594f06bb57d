"""The packages' names load on first use (sopt.utils.lazy_exports): each name is what its module defines whatever was
imported first, `sopt run`'s problem imports no simulator, layer or optimiser it does not use, and the registry
lists sopt's otypes in one order however their modules were imported."""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys
import types

import pytest

PACKAGES = ("sopt.sim", "sopt.nn", "sopt.optim", "sopt.train", "sopt.losses", "sopt.runtime", "sopt.autodiff",
            "sopt.utils")


@pytest.mark.parametrize("package", PACKAGES)
def test_every_name_is_its_definition_after_every_submodule_was_imported(package: str) -> None:
    # a submodule's import sets the package attribute of its name to the module: sopt.sim.rollout must stay the
    # function, sopt.nn.gradcheck and sopt.nn.vjp too
    pkg = importlib.import_module(package)
    for info in pkgutil.walk_packages(pkg.__path__, f"{package}."):
        importlib.import_module(info.name)
    assert set(dir(pkg)) >= set(pkg.__all__)
    for name in pkg.__all__:
        value = getattr(pkg, name)
        module = pkg._EXPORTS.get(name)
        if module == f"{package}.{name}":
            assert value is sys.modules[module]   # a submodule exported as such (sopt.optim.lr_scheduler, sopt.nn.init)
            continue
        assert not isinstance(value, types.ModuleType), f"{package}.{name} is a module"
        if module is not None:
            assert value is getattr(sys.modules[module], name), f"{package}.{name}"
    with pytest.raises(AttributeError, match=f"module '{package}' has no attribute 'NoSuchName'"):
        getattr(pkg, "NoSuchName")


def test_exports_are_read_from_the_type_checking_block_once():
    from sopt.utils.lazy_exports import declared_exports
    source = ("from typing import TYPE_CHECKING\nfrom sopt.utils.lazy_exports import lazy_exports\n"
              "from pkg.rollout import plan, rollout as run\n__getattr__, __dir__ = lazy_exports(__name__)\n"
              "if TYPE_CHECKING:\n    from pkg.a import A, B as C\n    from pkg import sub\n    from other import D\n")
    exports, eager = declared_exports("pkg", source)
    assert exports == {"A": "pkg.a", "C": "pkg.a", "sub": "pkg.sub", "D": "other"}
    assert eager == ["plan", "run"]
    with pytest.raises(ValueError, match="line 2"):
        declared_exports("pkg", "if TYPE_CHECKING:\n    import pkg.a\n")


def test_every_package_names_its_exports_once():
    import pathlib
    root = pathlib.Path(__file__).resolve().parents[2] / "sopt"
    for init in root.rglob("__init__.py"):
        assert "_EXPORTS = " not in init.read_text(encoding="utf-8"), f"{init}: name exports in TYPE_CHECKING only"


def test_fit_projectile_imports_only_what_it_uses_and_otypes_keep_their_order() -> None:
    code = ("import sys; sys.modules['torch'] = None\n"
            "import problems.fit_projectile.problem, sopt.train.trainer, sopt.experiments.runner\n"
            "print(sorted(m for m in ('sopt.sim.spring_system', 'sopt.sim.nbody', 'sopt.sim.wave2d', "
            "'sopt.nn.linear', 'sopt.nn.fully_fused_mlp', 'sopt.nn.hashgrid', 'sopt.nn.mlp', 'sopt.losses.regression', "
            "'tqdm', 'sopt.train.progress_bar') "
            "if m in sys.modules))\n"
            "from sopt.config.registry import otypes\n"
            "print(otypes('simulator')); print(otypes('optimizer'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("\n")
    assert out[0] == "[]"   # tqdm too: only a run that shows a progress bar imports it (~50 ms of start-up)
    # Projectile and Adam/AdamW/SGD were registered first (the problem imported them); listed in PROVIDERS' order
    assert out[1] == "['Diffusion2D', 'NBody', 'Projectile', 'SpringSystem', 'Wave2D']"
    assert out[2] == "['Adagrad', 'Adam', 'AdamW', 'Lion', 'RMSprop', 'SGD']"
