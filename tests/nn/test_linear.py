"""Linear: forward and gradients against numpy, gradcheck, initialisation, buffers, encoder recording."""

from __future__ import annotations

import math

import numpy as np
import pytest
import slangpy as spy

import sopt
from sopt.runtime import device as dev
from sopt.nn import Linear, gradcheck, vjp
from sopt.nn.linear import ROWS_PER_CHUNK
from tests.nn.reference import linear as ref_linear

CASES = {  # name: (in, out, bias, activation, N)
    "2x3": (2, 3, True, None, 5),
    "16x16_relu": (16, 16, True, "relu", 33),
    "8x5_nobias_tanh": (8, 5, False, "tanh", 64),
}


@pytest.fixture(scope="module")
def layers() -> dict[str, Linear]:
    return {name: Linear(i, o, bias=b, seed=3, activation=a) for name, (i, o, b, a, _) in CASES.items()}


def params64(layer: Linear) -> tuple[np.ndarray, np.ndarray | None]:
    return (layer.weight.numpy().astype(np.float64),
            layer.bias.numpy().astype(np.float64) if layer.bias is not None else None)


@pytest.mark.parametrize("name", CASES)
def test_forward_and_gradients_match_numpy(layers, name):
    n_in, n_out, _, act, n = CASES[name]
    layer = layers[name]
    rng = np.random.default_rng(1)
    x = rng.normal(size=(n, n_in)).astype(np.float32)
    dy = rng.normal(size=(n, n_out)).astype(np.float32)
    y, dx, grads = vjp(layer, x, dy)
    w, b = params64(layer)
    ry, rdx, rdw, rdb = ref_linear(x.astype(np.float64), w, b, dy.astype(np.float64), act or "none")
    np.testing.assert_allclose(y, ry, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(dx, rdx, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(grads["weight"], rdw, rtol=1e-5, atol=1e-4)
    if b is not None:
        np.testing.assert_allclose(grads["bias"], rdb, rtol=1e-5, atol=1e-4)
    else:
        assert set(grads) == {"weight"}


def test_weight_gradient_sums_over_several_chunks():
    # N spans three chunks of the batch reduction (one atomic add per chunk and weight)
    layer = Linear(3, 2, seed=5, activation="sigmoid")
    n = 2 * ROWS_PER_CHUNK + 77
    rng = np.random.default_rng(2)
    x = rng.normal(size=(n, 3)).astype(np.float32)
    dy = rng.normal(size=(n, 2)).astype(np.float32)
    _, dx, grads = vjp(layer, x, dy)
    w, b = params64(layer)
    _, rdx, rdw, rdb = ref_linear(x.astype(np.float64), w, b, dy.astype(np.float64), "sigmoid")
    np.testing.assert_allclose(dx, rdx, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(grads["weight"], rdw, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(grads["bias"], rdb, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", CASES)
def test_gradcheck_inputs_and_parameters(layers, name):
    n_in, _, _, act, n = CASES[name]
    rng = np.random.default_rng(4)
    x = rng.normal(size=(min(n, 17), n_in))
    result = gradcheck(layers[name], x, n_checks=6)
    assert result.ok, str(result)
    sizes = [n_in * min(n, 17)] + [p.size for p in layers[name].parameters()]
    assert len(result.entries) == sum(min(6, s) for s in sizes)


def test_gradients_accumulate_and_input_gradient_is_overwritten(layers):
    layer = layers["2x3"]
    device = sopt.get_device()
    rng = np.random.default_rng(6)
    x_np = rng.normal(size=(4, 2)).astype(np.float32)
    dy = rng.normal(size=(4, 3)).astype(np.float32)
    x = spy.Tensor.from_numpy(device, x_np).with_grads()
    x.grad.copy_from_numpy(np.full((4, 2), 1e3, np.float32))   # stale values must not survive
    for p in layer.parameters():
        p.zero_grad()
    y = layer(x)
    y.grad.copy_from_numpy(dy)
    layer.backward(x, y)
    layer.backward(x, y)
    w, b = params64(layer)
    _, rdx, rdw, rdb = ref_linear(x_np.astype(np.float64), w, b, dy.astype(np.float64))
    np.testing.assert_allclose(x.grad.to_numpy(), rdx, rtol=1e-5, atol=1e-5)          # written, not summed
    np.testing.assert_allclose(layer.weight.grad_numpy(), 2 * rdw, rtol=1e-5, atol=1e-5)  # accumulated
    np.testing.assert_allclose(layer.bias.grad_numpy(), 2 * rdb, rtol=1e-5, atol=1e-5)
    for p in layer.parameters():
        p.zero_grad()


def test_input_without_gradient_still_gives_parameter_gradients(layers):
    layer = layers["16x16_relu"]
    rng = np.random.default_rng(7)
    x_np = rng.normal(size=(9, 16)).astype(np.float32)
    dy = rng.normal(size=(9, 16)).astype(np.float32)
    for p in layer.parameters():
        p.zero_grad()
    y = layer(x_np)   # a numpy batch: uploaded, no gradient buffer
    y.grad.copy_from_numpy(dy)
    layer.backward(spy.Tensor.from_numpy(sopt.get_device(), x_np), y)
    w, b = params64(layer)
    _, _, rdw, rdb = ref_linear(x_np.astype(np.float64), w, b, dy.astype(np.float64), "relu")
    np.testing.assert_allclose(layer.weight.grad_numpy(), rdw, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(layer.bias.grad_numpy(), rdb, rtol=1e-5, atol=1e-5)
    for p in layer.parameters():
        p.zero_grad()


def test_torch_default_initialisation_is_seeded_and_bounded():
    a, b, c = Linear(50, 40, seed=11), Linear(50, 40, seed=11), Linear(50, 40, seed=12)
    bound = 1.0 / math.sqrt(50)
    w, bias = a.weight.numpy(), a.bias.numpy()
    assert np.abs(w).max() <= bound and np.abs(bias).max() <= bound
    assert np.abs(w).max() > 0.9 * bound                       # uniform over the whole range, not a narrower one
    assert abs(w.std() - bound / math.sqrt(3)) < 0.1 * bound    # std of U(-a, a) is a / sqrt(3)
    np.testing.assert_array_equal(w, b.weight.numpy())
    assert not np.array_equal(w, c.weight.numpy())
    assert not np.allclose(w.ravel()[:40], bias)                # weight and bias come from different streams
    assert [n for n, _ in a.named_parameters()] == ["weight", "bias"]
    assert [n for n, _ in Linear(3, 2, bias=False).named_parameters()] == ["weight"]


def test_output_buffer_is_reused_per_batch_size(layers):
    layer = layers["2x3"]
    x5 = np.zeros((5, 2), np.float32)
    first = layer(x5)
    assert layer(x5) is first
    assert layer(np.zeros((6, 2), np.float32)) is not first
    assert tuple(first.shape) == (5, 3) and first.grad_out is not None


def test_recorded_into_an_encoder_matches_immediate_and_counts_dispatches(layers):
    layer = layers["16x16_relu"]
    device = sopt.get_device()
    rng = np.random.default_rng(8)
    x_np = rng.normal(size=(7, 16)).astype(np.float32)
    dy = rng.normal(size=(7, 16)).astype(np.float32)
    y_ref, dx_ref, grads_ref = vjp(layer, x_np, dy)
    for p in layer.parameters():
        p.zero_grad()
    x = spy.Tensor.from_numpy(device, x_np).with_grads()
    before = dev.dispatch_count()
    encoder = device.create_command_encoder()
    y = layer(x, encoder)
    assert dev.dispatch_count() == before + 1
    y.grad.copy_from_numpy(dy)
    layer.backward(x, y, encoder)
    assert dev.dispatch_count() == before + 3   # per-sample .bwds + weight-gradient reduction
    dev.submit(encoder)
    np.testing.assert_allclose(y.to_numpy(), y_ref, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(x.grad.to_numpy(), dx_ref, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(layer.weight.grad_numpy(), grads_ref["weight"], rtol=1e-5, atol=1e-6)
    for p in layer.parameters():
        p.zero_grad()


def test_training_with_adam_moves_parameters_into_the_arena():
    # after the optimiser takes the parameters, kernels must read and write the arena views
    layer = Linear(2, 1, seed=0)
    opt = sopt.optim.Adam(layer.parameters(), lr=0.05)
    rng = np.random.default_rng(9)
    x = rng.uniform(-1, 1, size=(64, 2)).astype(np.float32)
    target = (x @ np.array([[1.5], [-2.0]]) + 0.5).astype(np.float32)
    for _ in range(150):
        y = layer(x)
        y.grad.copy_from_numpy((2.0 * (y.to_numpy() - target) / target.size).astype(np.float32))
        layer.backward(spy.Tensor.from_numpy(sopt.get_device(), x), y)
        opt.step()
    np.testing.assert_allclose(layer.weight.numpy(), [[1.5, -2.0]], atol=0.05)
    np.testing.assert_allclose(layer.bias.numpy(), [0.5], atol=0.05)


def _train_deterministic_linear() -> tuple:
    """Four Adam steps on a batch of three chunks and a bit: (first step's dW, db, x, dy, W, b at the end)."""
    layer = Linear(6, 5, seed=2, activation="tanh", deterministic=True)
    opt = sopt.optim.Adam(layer.parameters(), lr=1e-2)
    rng = np.random.default_rng(11)
    n = 3 * ROWS_PER_CHUNK + 5
    x = rng.normal(size=(n, 6)).astype(np.float32)
    target = rng.normal(size=(n, 5)).astype(np.float32)
    xt = spy.Tensor.from_numpy(sopt.get_device(), x)
    first = None
    for step in range(4):
        y = layer(xt)
        dy = (2.0 * (y.to_numpy() - target) / target.size).astype(np.float32)
        y.grad.copy_from_numpy(dy)
        layer.backward(xt, y)
        if step == 0:
            first = (layer.weight.grad_numpy(), layer.bias.grad_numpy(), x, dy, layer.weight.numpy(),
                     layer.bias.numpy())
        opt.step()
    dw, db, x, dy, w0, b0 = first
    return dw, db, (x, dy, w0, b0), layer.weight.numpy(), layer.bias.numpy()


def test_deterministic_mode_is_bit_identical_and_correct():
    dw, db, (x, dy, w0, b0), w, b = _train_deterministic_linear()
    _, _, rdw, rdb = ref_linear(x.astype(np.float64), w0.astype(np.float64), b0.astype(np.float64),
                                dy.astype(np.float64), "tanh")
    np.testing.assert_allclose(dw, rdw, rtol=1e-5, atol=1e-7)   # the chunk sums are the right ones
    np.testing.assert_allclose(db, rdb, rtol=1e-5, atol=1e-7)
    dw2, db2, _, w2, b2 = _train_deterministic_linear()
    for a, c in ((dw, dw2), (db, db2), (w, w2), (b, b2)):
        assert np.array_equal(a.view(np.uint32), c.view(np.uint32))
    assert not np.array_equal(w, w0)                              # it did train


def test_deterministic_gradients_accumulate(layers):
    layer = Linear(3, 2, seed=5, deterministic=True)
    n = 2 * ROWS_PER_CHUNK + 3
    rng = np.random.default_rng(12)
    x_np = rng.normal(size=(n, 3)).astype(np.float32)
    dy = rng.normal(size=(n, 2)).astype(np.float32)
    x = spy.Tensor.from_numpy(sopt.get_device(), x_np)
    y = layer(x)
    y.grad.copy_from_numpy(dy)
    layer.backward(x, y)
    layer.backward(x, y)
    _, _, rdw, rdb = ref_linear(x_np.astype(np.float64), *params64(layer), dy.astype(np.float64))
    # added, not overwritten (sums of ~1000 terms up to ~130: float32 rounding ~1e-5 absolute)
    np.testing.assert_allclose(layer.weight.grad_numpy(), 2 * rdw, rtol=1e-5, atol=2e-4)
    np.testing.assert_allclose(layer.bias.grad_numpy(), 2 * rdb, rtol=1e-5, atol=2e-4)
    with pytest.raises(ValueError, match="Linear deterministic must be True or False, got 1"):
        Linear(3, 2, deterministic=1)
