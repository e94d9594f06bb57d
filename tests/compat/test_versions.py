"""sopt.compat: the installed libraries are versions whose private APIs sopt was checked against, and nothing
outside sopt/compat touches another library's private names."""

from __future__ import annotations

import pathlib
import re

import pytest

from sopt.compat import is_checked, release
from sopt.compat import slangpy as compat_slangpy

ROOT = pathlib.Path(__file__).resolve().parents[2]

# Another library's private names, as sopt's code would spell them
PRIVATE = re.compile(r"torch\._C\b|\._backward_hooks|\._post_accumulate_grad_hooks|ray\._private|_native_cache|"
                     r"debug_\w+\(|debug_only_bindings|zipfile\._|\"cuEventRecord\"|\b(img|again|image)\.tile\b")


def unchecked(name: str, version: str, checked: tuple[str, ...], module: str) -> str:
    return (f"{name} {version} is not among the versions sopt/compat/{module}.py was checked against "
            f"({', '.join(checked)}): check each internal it lists against {version}, then add it")


def test_release_drops_a_local_build_tag():
    assert release("2.13.0+cpu") == "2.13.0" and release("0.43.1") == "0.43.1"
    assert is_checked("2.13.0+cu128", ("2.13.0",)) and not is_checked("2.14.0", ("2.13.0",))


def test_slangpy_is_a_checked_version():
    v = compat_slangpy.version()
    assert compat_slangpy.checked(), unchecked("SlangPy", v, compat_slangpy.CHECKED_VERSIONS, "slangpy")


def test_slangpys_native_library_exports_the_event_record_slot():
    slot = compat_slangpy.cu_event_record_slot()
    assert slot is not None


def test_pillow_is_a_checked_version():
    from sopt.compat import pillow as compat_pillow
    assert compat_pillow.checked(), unchecked("Pillow", compat_pillow.version(), compat_pillow.CHECKED_VERSIONS,
                                              "pillow")


def test_torch_is_a_checked_version():
    torch = pytest.importorskip("torch")
    from sopt.compat import torch as compat_torch
    assert compat_torch.checked(), unchecked("torch", torch.__version__, compat_torch.CHECKED_VERSIONS, "torch")


def test_an_unchecked_torch_takes_the_public_or_conservative_way(monkeypatch):
    torch = pytest.importorskip("torch")
    from sopt.compat import torch as compat_torch
    monkeypatch.setattr(torch, "__version__", "99.0.0")
    t = torch.zeros(1, requires_grad=True)
    assert compat_torch.has_gradient_hooks(t) is True          # copy the gradient as torch's engine would
    assert compat_torch.engine_will_execute(object()) is False
    monkeypatch.undo()
    if compat_torch.checked():   # (an unchecked torch fails test_torch_is_a_checked_version, loudly)
        assert compat_torch.has_gradient_hooks(t) is False


def test_ray_is_a_checked_version():
    ray = pytest.importorskip("ray")
    from sopt.compat import ray as compat_ray
    assert compat_ray.checked(), unchecked("Ray", ray.__version__, compat_ray.CHECKED_VERSIONS, "ray")


def test_no_private_api_of_another_library_outside_sopt_compat():
    found = []
    for path in [*(ROOT / "sopt").rglob("*.py"), *(ROOT / "problems").rglob("*.py")]:
        if "compat" in path.relative_to(ROOT).parts:
            continue
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            code = line.split("#", 1)[0]
            if PRIVATE.search(code):
                found.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not found, "private APIs of other libraries outside sopt/compat:\n" + "\n".join(found)
