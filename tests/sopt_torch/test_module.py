"""TorchModule: gradients through torch autograd equal native sopt's (vjp) to 1e-6 relative and a float64 reference
to 1e-4, per module kind; parameters named as state_dict; torch optimisers, schedulers, GradScaler and torch.save."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="sopt.torch needs torch (pip install 'sopt[torch]')")

import sopt
from sopt.nn import FrequencyEncoding, FullyFusedMLP, HashGridEncoding, Linear, MLP, Sequential, vjp
from sopt.torch import TorchModule
from tests.nn.reference import away_from_cell_faces, hashgrid as ref_hashgrid

pytestmark = pytest.mark.filterwarnings("ignore:sopt.torch. sopt runs on Vulkan:RuntimeWarning")


def _hashgrid() -> HashGridEncoding:
    enc = HashGridEncoding(in_dims=2, n_levels=3, n_features=2, log2_table_size=6, base_resolution=3,
                           per_level_scale=2.0, seed=1)
    enc.table.load(np.random.default_rng(7).normal(size=enc.table.shape))   # O(1) values expose indexing errors
    return enc


MODULES = {
    "Linear": lambda: Linear(3, 2, activation="tanh", seed=1),
    "MLP": lambda: MLP(2, 3, hidden_features=16, hidden_layers=3, activation="tanh", seed=2),
    "FullyFusedMLP": lambda: FullyFusedMLP(2, 3, 8, 2, activation="tanh",
                                           encoding={"otype": "Frequency", "n_frequencies": 2}, seed=4),
    "FrequencyEncoding": lambda: FrequencyEncoding(in_dims=2, n_freqs=3),
    "HashGridEncoding": _hashgrid,
    "Sequential": lambda: Sequential(_hashgrid(), FullyFusedMLP(6, 1, 8, 1, activation="tanh", seed=5)),
}


def _inputs(module: sopt.nn.Module, n: int = 7, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    first = module.modules[0] if isinstance(module, Sequential) else module
    x = rng.uniform(0.05, 0.95, (n, module.in_features)).astype(np.float32)
    if isinstance(first, HashGridEncoding):
        x = away_from_cell_faces(x, first.levels).astype(np.float32)
    return x, rng.normal(size=(x.shape[0], module.out_features)).astype(np.float32)


def _torch_call(tm: TorchModule, x: np.ndarray, dy: np.ndarray,
                device: torch.device) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    """y, dx and the parameters' gradients of sum(dy * tm(x)), through torch autograd on ``device``."""
    xt = torch.from_numpy(x).to(device).requires_grad_()
    tm.zero_grad()
    y = tm(xt)
    (y * torch.from_numpy(dy).to(device)).sum().backward()
    # copies: on CUDA a parameter's .grad views sopt's gradient memory, which later sopt calls overwrite
    return (y.detach().cpu().numpy(), xt.grad.cpu().numpy(),
            {k: p.grad.cpu().numpy().copy() for k, p in tm.named_parameters()})


def _rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(np.asarray(a, np.float64) - b).max() / max(np.abs(b).max(), 1e-30))


@pytest.mark.parametrize("kind", list(MODULES))
def test_gradients_equal_native_sopt(kind: str, tdev: torch.device) -> None:
    module = MODULES[kind]()
    tm = TorchModule(module)
    assert [k for k, _ in tm.named_parameters()] == list(module.state_dict())
    x, dy = _inputs(module)
    y, dx, grads = _torch_call(tm, x, dy, tdev)
    y_ref, dx_ref, g_ref = vjp(module, x, dy)
    assert _rel(y, y_ref) <= 1e-6 and _rel(dx, dx_ref) <= 1e-6
    native = g_ref   # keyed as named_parameters(), FullyFusedMLP's per layer too
    assert grads.keys() == native.keys()
    for key in grads:
        assert _rel(grads[key], native[key]) <= 1e-6, key
    # a second call (module reused, tape from the free list) gives the same
    y2, dx2, grads2 = _torch_call(tm, x, dy, tdev)
    assert _rel(dx2, dx_ref) <= 1e-6 and all(_rel(grads2[k], native[k]) <= 1e-6 for k in grads)


def _frequency64(x: torch.Tensor, n_freqs: int) -> torch.Tensor:
    cols = []
    for d in range(x.shape[1]):
        for k in range(n_freqs):
            w = 2.0**k * np.pi
            cols += [torch.sin(w * x[:, d]), torch.cos(w * x[:, d])]
    return torch.stack(cols, 1)


def _reference64(kind: str, x: torch.Tensor, sd: dict[str, torch.Tensor]) -> torch.Tensor:
    """The module's function in float64 torch, from float64 copies ``sd`` of its state_dict."""
    if kind == "Linear":
        return torch.tanh(x @ sd["weight"].T + sd["bias"])
    if kind == "FrequencyEncoding":
        return _frequency64(x, 3)
    layers = range(4) if kind == "MLP" else range(1, 4)
    h = x if kind == "MLP" else _frequency64(x, 2)
    for i in layers:
        h = h @ sd[f"{i}.weight"].T + sd[f"{i}.bias"]
        h = torch.tanh(h) if i < 3 else h
    return h


@pytest.mark.parametrize("kind", ["Linear", "MLP", "FullyFusedMLP", "FrequencyEncoding", "HashGridEncoding"])
def test_gradients_match_float64_reference(kind: str, tdev: torch.device) -> None:
    module = MODULES[kind]()
    tm = TorchModule(module)
    x, dy = _inputs(module, seed=1)
    y, dx, grads = _torch_call(tm, x, dy, tdev)
    if kind == "HashGridEncoding":
        y_ref, dx_ref, dtable = ref_hashgrid(x.astype(np.float64), module.table.numpy().astype(np.float64),
                                             module.levels, dy.astype(np.float64))
        assert _rel(y, y_ref) <= 1e-4 and _rel(dx, dx_ref) <= 1e-4 and _rel(grads["table"], dtable) <= 1e-4
        return
    x64 = torch.from_numpy(x).double().requires_grad_()
    sd = {k: torch.from_numpy(v).double().requires_grad_() for k, v in module.state_dict().items()}
    y64 = _reference64(kind, x64, sd)
    (y64 * torch.from_numpy(dy).double()).sum().backward()
    assert _rel(y, y64.detach().numpy()) <= 1e-4
    assert _rel(dx, x64.grad.numpy()) <= 1e-4
    for k, p in sd.items():
        assert _rel(grads[k], p.grad.numpy()) <= 1e-4, k


RELU_MODULES = {
    "MLP_relu": lambda: MLP(2, 3, hidden_features=16, hidden_layers=2, activation="relu", seed=2),
    "FullyFusedMLP_relu": lambda: FullyFusedMLP(2, 3, 8, 2, activation="relu", seed=4),
}


@pytest.mark.parametrize("kind", ["Linear", "MLP_relu", "FullyFusedMLP_relu", "HashGridEncoding", "Sequential"])
def test_a_nan_row_gives_a_nan_output_row_and_leaves_the_others(kind: str, tdev: torch.device) -> None:
    # ReLU used to map the NaN of a hidden unit to 0, so the row's output was the output layer's bias
    module = {**MODULES, **RELU_MODULES}[kind]()
    tm = TorchModule(module)
    x, _ = _inputs(module, n=4)
    clean = tm(torch.from_numpy(x).to(tdev)).detach().cpu().numpy()
    x[2, 0] = np.nan
    y = tm(torch.from_numpy(x).to(tdev)).detach().cpu().numpy()
    assert np.isnan(y[2]).all(), y[2]
    np.testing.assert_array_equal(np.delete(y, 2, 0), np.delete(clean, 2, 0))


@pytest.mark.parametrize("kind", ["Linear", "FullyFusedMLP", "Sequential"])
def test_an_empty_batch_gives_an_empty_output_and_zero_gradients(kind: str, tdev: torch.device) -> None:
    module = MODULES[kind]()
    tm = TorchModule(module)
    n_in, n_out = module.in_features, module.out_features
    x = torch.zeros((0, n_in), device=tdev, requires_grad=True)
    y = tm(x)
    assert (tuple(y.shape), y.dtype, y.device) == ((0, n_out), torch.float32, x.device)
    y.sum().backward()
    assert tuple(x.grad.shape) == (0, n_in)
    assert [(k, float(p.grad.abs().sum())) for k, p in tm.named_parameters()] == [
        (k, 0.0) for k, _ in tm.named_parameters()]
    assert tuple(tm(torch.zeros((2, 0, n_in), device=tdev)).shape) == (2, 0, n_out)
    # the module works as before on a batch with rows
    xs, dy = _inputs(module)
    y, dx, _ = _torch_call(tm, xs, dy, tdev)
    y_ref, dx_ref, _ = vjp(module, xs, dy)
    assert _rel(y, y_ref) <= 1e-6 and _rel(dx, dx_ref) <= 1e-6
