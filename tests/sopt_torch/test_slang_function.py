"""A user's Slang function (sopt.load_module) called with torch tensors under torch autograd: values and gradients
against float64 torch, a torch model around it, sopt Parameters beside torch tensors, sopt's error messages."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="sopt.torch needs torch (pip install 'sopt[torch]')")

import sopt
import sopt.torch  # noqa: F401  (the torch path of sopt.load_module's functions)

pytestmark = pytest.mark.filterwarnings("ignore:sopt.torch. sopt runs on Vulkan:RuntimeWarning")
WAVE = pathlib.Path(__file__).with_name("wave.slang")


def _reference(p: torch.Tensor, x: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    return p[0] * torch.sin(p[1] * x) + c * x * x


def test_values_and_gradients_match_float64_torch(tdev: torch.device) -> None:
    mod = sopt.load_module(WAVE)
    p = torch.tensor([1.5, 0.8], device=tdev, requires_grad=True)
    x = torch.linspace(-2, 2, 9, device=tdev).requires_grad_()
    c = torch.full((9,), 0.3, device=tdev, requires_grad=True)
    y = mod.wave(p, x, c)
    assert isinstance(y, torch.Tensor) and y.shape == (9,)
    dy = torch.arange(9, dtype=torch.float32, device=tdev) - 4
    (y * dy).sum().backward()
    p64, x64, c64 = (t.detach().double().requires_grad_() for t in (p, x, c))
    y64 = _reference(p64, x64, c64)
    (y64 * dy.double()).sum().backward()
    torch.testing.assert_close(y.double(), y64.detach(), rtol=1e-5, atol=1e-6)
    for ours, ref in ((p, p64), (x, x64), (c, c64)):
        torch.testing.assert_close(ours.grad.double(), ref.grad, rtol=1e-5, atol=1e-5)


def test_in_a_torch_model_with_a_number_and_a_sopt_parameter(tdev: torch.device) -> None:
    mod = sopt.load_module(WAVE)
    layer = torch.nn.Linear(1, 1).to(tdev)
    torch.nn.init.constant_(layer.weight, 0.5)
    torch.nn.init.constant_(layer.bias, 0.1)
    p = sopt.Parameter([1.0, 2.0], name="p")
    x = torch.linspace(0, 1, 5, device=tdev)
    y = mod.wave(p, layer(x[:, None])[:, 0], 0.25)   # torch tensor, sopt Parameter, a plain number
    y.sum().backward()
    h = 0.5 * x.double() + 0.1
    expected_dh = 1.0 * 2.0 * torch.cos(2.0 * h) + 2 * 0.25 * h
    torch.testing.assert_close(layer.weight.grad.double()[0, 0], (expected_dh * x.double()).sum(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(p.grad_numpy(), [torch.sin(2 * h).sum().item(), (h * torch.cos(2 * h)).sum().item()],
                               rtol=1e-5)


def test_no_grad_and_error_messages(tdev: torch.device, shared: bool) -> None:
    mod = sopt.load_module(WAVE)
    ones, zeros = torch.ones(2, device=tdev), torch.zeros(3, device=tdev)
    with torch.no_grad():
        y = mod.wave(ones, zeros, 0.0)
    assert not y.requires_grad and torch.equal(y, zeros)
    with pytest.raises(sopt.TapeError, match="wave.not_float: SlangPy cannot bind these arguments"):
        mod.not_float(zeros)
    with pytest.raises(ValueError, match=r"wave.wave argument 1 has dtype torch.float64; sopt computes in float32"):
        mod.wave(ones, zeros.double(), 0.0)
    backend = "CUDA" if shared else "Vulkan"
    with pytest.raises(ValueError, match=rf"wave.wave argument 1 is on meta, but sopt runs on {backend}"):
        mod.wave(ones, torch.zeros(3, device="meta"), 0.0)
    with pytest.raises(sopt.TapeError, match="wave.wave: on a tape the result is allocated by the tape"):
        mod.wave(ones, zeros, 0.0, _result=zeros.clone())
