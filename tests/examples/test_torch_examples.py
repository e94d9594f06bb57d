"""examples/torch_*.py at tiny sizes: a neural field in a torch loop with sopt's hash grid, a torch controller
trained through a SpringSystem rollout, a user's Slang function in a torch model. Each must learn."""

from __future__ import annotations

import importlib.util
import pathlib

import pytest

pytest.importorskip("torch", reason="the torch examples need torch (pip install 'sopt[torch]')")

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"
pytestmark = pytest.mark.filterwarnings("ignore:sopt.torch. sopt runs on Vulkan:RuntimeWarning")


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_torch_neural_field_learns_the_image() -> None:
    summary = _load("torch_neural_field").main(steps=40, side=16, batch=256, quiet=True)
    assert summary["psnr"] > 15.0   # an untrained field (outputs near 0) is about 5 dB


def test_torch_controller_walks_forward() -> None:
    summary = _load("torch_controller").main(iterations=8, steps=60, quiet=True)
    assert summary["best"] > summary["first"] + 0.01   # at least 1 cm further than the untrained policy


def test_torch_slang_layer_fits_the_waveforms() -> None:
    summary = _load("torch_slang_layer").main(steps=40, quiet=True)
    assert summary["last"] < 0.3 * summary["first"]
