"""Where torch tensors meet sopt: the one-time copy warning on Vulkan, and clear errors for a wrong dtype, device or
shape before any GPU work."""

from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch", reason="sopt.torch needs torch (pip install 'sopt[torch]')")

import sopt
from sopt.nn import Linear
from sopt.torch import TorchModule, placement

pytestmark = pytest.mark.filterwarnings("ignore:sopt.torch. sopt runs on Vulkan:RuntimeWarning")


@pytest.fixture(scope="module")
def net() -> TorchModule:
    return TorchModule(Linear(3, 2, seed=0))


def test_copy_warning_once_names_the_cost() -> None:
    if sopt.device.device_kind() != "vulkan":
        pytest.skip("copy mode is sopt on Vulkan")
    placement._warned.discard(placement.COPY)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        placement.warn_copies()
        placement.warn_copies()
    assert len(caught) == 1
    assert "copied through host memory on every call" in str(caught[0].message)
    assert "a wait for the GPU per call" in str(caught[0].message)


@pytest.mark.parametrize("x, message", [
    (torch.zeros(4, 3, dtype=torch.float64), r"input has dtype torch.float64; sopt computes in float32"),
    (torch.zeros(4, 5), r"input has 5 features \(shape \(4, 5\)\); Linear takes 3"),
    (torch.zeros(4, 3, device="meta"), r"input is on meta, but sopt runs on Vulkan"),
    ([[0.0, 0.0, 0.0]], r"input must be a torch.Tensor, got list"),
])
def test_bad_inputs_are_refused(net: TorchModule, x, message: str) -> None:
    if sopt.device.device_kind() != "vulkan" and "meta" in message:
        message = r"input is on meta, but sopt runs on CUDA"
    before = sopt.device.dispatch_count()
    with pytest.raises(ValueError, match=message):
        net(x)
    assert sopt.device.dispatch_count() == before


def test_leading_dimensions_are_kept(net: TorchModule) -> None:
    x = torch.rand(2, 5, 3)
    torch.testing.assert_close(net(x), net(x.reshape(10, 3)).reshape(2, 5, 2), rtol=0, atol=0)


def test_wraps_only_sopt_modules() -> None:
    with pytest.raises(ValueError, match="TorchModule wraps a sopt.nn Module, got Linear"):
        TorchModule(torch.nn.Linear(2, 2))
