"""Activations: values and derivatives against numpy (torch's conventions), gradcheck, fusion into Linear,
and the config parser."""

from __future__ import annotations

import numpy as np
import pytest
import slangpy as spy

import sopt
from sopt.runtime import device as dev
from sopt.nn import (LeakyReLU, Linear, ReLU, Sequential, Sigmoid, SiLU, Sine, Softplus, Tanh, gradcheck,
                     make_activation, vjp)
from tests.nn.reference import activation as ref_activation

# name in the reference, module, its parameters
ACTIVATIONS = {
    "relu": (ReLU(), {}),
    "leaky_relu": (LeakyReLU(0.2), {"slope": 0.2}),
    "sigmoid": (Sigmoid(), {}),
    "tanh": (Tanh(), {}),
    "silu": (SiLU(), {}),
    "softplus": (Softplus(beta=2.0, threshold=3.0), {"beta": 2.0, "threshold": 3.0}),
    "sine": (Sine(w0=3.0), {"w0": 3.0}),
}

# away from 0 (the ReLU kinks), spanning the softplus threshold (beta * x = 3 at x = 1.5) and both signs
X = np.array([[-4.0, -1.3, -0.6, -0.05], [0.07, 0.4, 1.2, 1.45], [1.6, 2.5, 7.0, -9.0]], np.float32)


@pytest.mark.parametrize("name", ACTIVATIONS)
def test_values_and_derivatives_match_numpy(name):
    module, p = ACTIVATIONS[name]
    dy = np.random.default_rng(0).normal(size=X.shape).astype(np.float32)
    y, dx, grads = vjp(module, X, dy)
    ry, rd = ref_activation(name, X.astype(np.float64), **p)
    np.testing.assert_allclose(y, ry, rtol=2e-6, atol=2e-6)
    np.testing.assert_allclose(dx, dy * rd, rtol=2e-6, atol=2e-6)
    assert grads == {}


@pytest.mark.parametrize("name", ACTIVATIONS)
def test_gradcheck(name):
    module, _ = ACTIVATIONS[name]
    result = gradcheck(module, X, eps=1e-3, n_checks=12)
    assert result.ok, str(result)
    wide = np.random.default_rng(1).uniform(0.1, 2.0, size=(17, 9)) * np.where(np.arange(9) % 2, 1, -1)
    result = gradcheck(module, wide, eps=1e-3, n_checks=8)
    assert result.ok, str(result)


def test_torch_conventions_at_kinks_and_extremes():
    x = np.array([[0.0, -30.0, 100.0, -1e30]], np.float32)
    ones = np.ones_like(x)
    _, dx, _ = vjp(ReLU(), x, ones)
    assert dx[0, 0] == 0.0                      # relu'(0) = 0
    _, dx, _ = vjp(LeakyReLU(0.3), x, ones)
    assert dx[0, 0] == np.float32(0.3)          # leaky'(0) = slope
    y, dx, _ = vjp(Sigmoid(), x, ones)
    assert np.isfinite(y).all() and np.isfinite(dx).all()   # no exp overflow: inf / inf
    assert y[0, 1] == pytest.approx(np.exp(-30.0), rel=1e-5) and y[0, 2] == 1.0 and y[0, 3] == 0.0
    y, dx, _ = vjp(SiLU(), x, ones)
    assert np.isfinite(y).all() and np.isfinite(dx).all()
    y, dx, _ = vjp(Softplus(), x, ones)
    assert y[0, 0] == pytest.approx(np.log(2.0)) and dx[0, 0] == pytest.approx(0.5)
    assert y[0, 2] == 100.0 and dx[0, 2] == 1.0     # linear regime above the threshold
    assert y[0, 1] == pytest.approx(np.exp(-30.0), rel=1e-5)   # log(1 + 1e-13): no cancellation to 0


@pytest.mark.parametrize("act", ["tanh", "leaky_relu", "softplus", "sine"])
def test_fused_into_linear_equals_linear_then_activation(act):
    fused = Linear(4, 6, seed=2, activation=act)
    plain = Linear(4, 6, seed=2)
    separate = Sequential(plain, fused.activation.__class__(**_options(fused.activation)))
    rng = np.random.default_rng(3)
    x = rng.normal(size=(10, 4)).astype(np.float32)
    dy = rng.normal(size=(10, 6)).astype(np.float32)
    y1, dx1, g1 = vjp(fused, x, dy)
    y2, dx2, g2 = vjp(separate, x, dy)
    np.testing.assert_allclose(y1, y2, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(dx1, dx2, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(g1["weight"], g2["0.weight"], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(g1["bias"], g2["0.bias"], rtol=1e-5, atol=1e-5)


def _options(a) -> dict:
    return {k: getattr(a, k) for k in ("slope", "beta", "threshold", "w0") if hasattr(a, k)}


def test_backward_without_input_gradient_does_nothing():
    x = spy.Tensor.from_numpy(sopt.get_device(), X)
    module = Tanh()
    y = module(x)
    before = dev.dispatch_count()
    module.backward(x, y)
    assert dev.dispatch_count() == before


def test_make_activation_parses_names_dicts_and_instances():
    assert make_activation(None) is None
    assert make_activation("None") is None and make_activation("identity") is None
    assert isinstance(make_activation("ReLU"), ReLU)
    assert isinstance(make_activation("leaky_relu"), LeakyReLU)
    leaky = make_activation({"otype": "LeakyReLU", "slope": 0.25})
    assert isinstance(leaky, LeakyReLU) and leaky.slope == 0.25
    sine = Sine(5.0)
    assert make_activation(sine) is sine
    assert make_activation({"otype": "Softplus", "beta": 3.0}).beta == 3.0
    with pytest.raises(ValueError, match="unknown activation 'gelu'"):
        make_activation("gelu")
    with pytest.raises(ValueError, match="unknown option"):
        make_activation({"otype": "ReLU", "slope": 0.1})
    with pytest.raises(ValueError, match="'otype'"):
        make_activation({"slope": 0.1})
    with pytest.raises(ValueError, match="beta"):
        Softplus(beta=0.0)


def test_relu_passes_nan_through_as_torch_does_in_every_network_kernel():
    # ReLU(NaN) was 0, so a NaN input row came out of an MLP as its output bias
    from sopt.nn import MLP, FullyFusedMLP
    x = np.array([[0.2, -0.4, 0.6], [np.nan, 0.1, 0.3], [-0.5, 0.5, 0.25]], np.float32)
    y = ReLU()(x).to_numpy()
    assert np.isnan(y[1, 0]) and y[1, 1:].tolist() == [np.float32(0.1), np.float32(0.3)]
    assert y[0].tolist() == [np.float32(0.2), 0.0, np.float32(0.6)]
    for net in (Linear(3, 4, activation="relu", seed=1), MLP(3, 2, hidden_features=8, hidden_layers=2, seed=2),
                FullyFusedMLP(3, 2, 16, 2, activation="relu", seed=3)):
        y = net(spy.Tensor.from_numpy(dev.get_device(), x)).to_numpy()
        clean = net(spy.Tensor.from_numpy(dev.get_device(), np.delete(x, 1, 0))).to_numpy()
        assert np.isnan(y[1]).all(), (type(net).__name__, y[1])
        np.testing.assert_array_equal(np.delete(y, 1, 0), clean)


def test_an_empty_batch_is_one_line_before_any_gpu_work():
    # SlangPy makes no empty array (it asserts m_desc.size > 0): sopt.nn refuses 0 rows by name first
    from sopt.nn import MLP
    for net, name in ((Linear(3, 2, seed=1), "Linear"), (MLP(3, 2, hidden_features=8, hidden_layers=1), "Sequential")):
        with pytest.raises(ValueError) as info:
            net(np.zeros((0, 3), np.float32))
        assert str(info.value) == f"{name}: the batch is empty (shape (0, 3)); N must be >= 1"
