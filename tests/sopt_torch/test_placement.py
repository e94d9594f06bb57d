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


def test_copy_warning_once_names_the_cost(shared: bool, tdev: torch.device) -> None:
    if shared:   # sharing torch's CUDA context: nothing is copied through the host, so nothing is said
        placement._warned.discard(placement.COPY)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            TorchModule(Linear(3, 2, seed=0))(torch.rand(4, 3, device=tdev))
        assert not [w for w in caught if "sopt.torch" in str(w.message)]
        return
    placement._warned.discard(placement.COPY)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        placement.warn_copies()
        placement.warn_copies()
    assert len(caught) == 1
    assert "copied through host memory on every call" in str(caught[0].message)
    assert "a wait for the GPU per call" in str(caught[0].message)


# each case: (the input on sopt's torch device -> the offending value, the error expected)
BAD_INPUTS = {
    "dtype": (lambda d: torch.zeros(4, 3, dtype=torch.float64, device=d),
              r"input has dtype torch.float64; sopt computes in float32"),
    "features": (lambda d: torch.zeros(4, 5, device=d), r"input has 5 features \(shape \(4, 5\)\); Linear takes 3"),
    "not a tensor": (lambda d: [[0.0, 0.0, 0.0]], r"input must be a torch.Tensor, got list"),
    "meta device": (lambda d: torch.zeros(4, 3, device="meta"), r"input is on meta, but sopt runs on {backend}"),
    # the device sopt cannot read: CUDA tensors with sopt on Vulkan, CPU tensors with sopt on CUDA
    "other device": (None, None),
}


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_inputs_are_refused(net: TorchModule, case: str, shared: bool, tdev: torch.device) -> None:
    make, message = BAD_INPUTS[case]
    if case == "other device":
        if shared:
            make, message = (lambda d: torch.zeros(4, 3),
                             rf"input is on cpu, but sopt runs on CUDA sharing torch's context on {tdev}; move it there")
        elif torch.cuda.is_available():
            make, message = lambda d: torch.zeros(4, 3, device="cuda"), r"input is on cuda:0, but sopt runs on Vulkan"
        else:
            pytest.skip("no second torch device here: sopt on Vulkan and torch without CUDA")
    message = message.format(backend="CUDA" if shared else "Vulkan")
    before = sopt.runtime.device.dispatch_count()
    with pytest.raises(ValueError, match=message):
        net(make(tdev))
    assert sopt.runtime.device.dispatch_count() == before


def test_leading_dimensions_are_kept(net: TorchModule, tdev: torch.device) -> None:
    x = torch.rand(2, 5, 3, device=tdev)
    torch.testing.assert_close(net(x), net(x.reshape(10, 3)).reshape(2, 5, 2), rtol=0, atol=0)


def test_wraps_only_sopt_modules() -> None:
    with pytest.raises(ValueError, match="TorchModule wraps a sopt.nn Module, got Linear"):
        TorchModule(torch.nn.Linear(2, 2))
