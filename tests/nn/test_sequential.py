"""Sequential: composition, torch-style names, shape checks, and the backward walk."""

from __future__ import annotations

import numpy as np
import pytest
import slangpy as spy

import sopt
from sopt.runtime import device as dev
from sopt.nn import FrequencyEncoding, Linear, Sequential, Tanh, vjp
from tests.nn.reference import frequency as ref_frequency, linear as ref_linear


@pytest.fixture(scope="module")
def net() -> Sequential:
    return Sequential(Linear(3, 5, seed=1), Tanh(), Linear(5, 2, seed=2))


def test_names_and_features(net):
    assert [n for n, _ in net.named_parameters()] == ["0.weight", "0.bias", "2.weight", "2.bias"]
    assert net.parameters() == [net[0].weight, net[0].bias, net[2].weight, net[2].bias]
    assert (net.in_features, net.out_features) == (3, 2)
    nested = Sequential(Tanh(), Sequential(Linear(2, 2), Tanh()))
    assert [n for n, _ in nested.named_parameters()] == ["1.0.weight", "1.0.bias"]
    assert (nested.in_features, nested.out_features) == (2, 2)


def test_matches_composition_of_references(net):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(11, 3)).astype(np.float32)
    dy = rng.normal(size=(11, 2)).astype(np.float32)
    y, dx, grads = vjp(net, x, dy)
    w0, b0 = net[0].weight.numpy().astype(np.float64), net[0].bias.numpy().astype(np.float64)
    w2, b2 = net[2].weight.numpy().astype(np.float64), net[2].bias.numpy().astype(np.float64)
    h = np.tanh(x.astype(np.float64) @ w0.T + b0)
    ry, dh, dw2, db2 = ref_linear(h, w2, b2, dy.astype(np.float64))
    _, rdx, dw0, db0 = ref_linear(x.astype(np.float64), w0, b0, dh * (1 - h * h))
    np.testing.assert_allclose(y, ry, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(dx, rdx, rtol=1e-5, atol=1e-5)
    for name, ref in {"0.weight": dw0, "0.bias": db0, "2.weight": dw2, "2.bias": db2}.items():
        np.testing.assert_allclose(grads[name], ref, rtol=1e-5, atol=1e-5, err_msg=name)


def test_unneeded_input_gradient_is_not_computed():
    # encoding without parameters first, x without a gradient buffer: the Linear needs no dL/d(encoding)
    # and, having no activation, skips its per-sample backward: only the weight-gradient reduction runs
    model = Sequential(FrequencyEncoding(2, 2), Linear(8, 3, seed=3))
    x_np = np.random.default_rng(1).uniform(size=(6, 2)).astype(np.float32)
    x = spy.Tensor.from_numpy(sopt.get_device(), x_np)
    y = model(x)
    dy = np.random.default_rng(2).normal(size=(6, 3)).astype(np.float32)
    y.grad.copy_from_numpy(dy)
    for p in model.parameters():
        p.zero_grad()
    before = dev.dispatch_count()
    model.backward(x, y)
    assert dev.dispatch_count() == before + 1
    feats, _ = ref_frequency(x_np.astype(np.float64), 2)
    np.testing.assert_allclose(model[1].weight.grad_numpy(), dy.T.astype(np.float64) @ feats, rtol=1e-5, atol=1e-5)


def test_backward_needs_the_output_of_the_last_forward(net):
    x = np.zeros((4, 3), np.float32)
    y = net(x)
    with pytest.raises(ValueError, match="not the input and output of the last forward"):
        net.backward(x, net[0](x))
    other = spy.Tensor.empty(sopt.get_device(), (9, 2), "float").with_grads()
    with pytest.raises(ValueError, match="N = 9"):
        net.backward(np.zeros((9, 3), np.float32), other)
    net.backward(spy.Tensor.from_numpy(sopt.get_device(), x), y)   # the right pair works


def test_rejects_mismatched_or_repeated_modules():
    with pytest.raises(ValueError, match="takes 4 features but the module before it produces 5"):
        Sequential(Linear(3, 5), Tanh(), Linear(4, 2))
    shared = Linear(2, 2)
    with pytest.raises(ValueError, match="appears twice.*sopt.Tape"):   # eager calls would share an output
        Sequential(shared, shared).forward(np.zeros((3, 2), np.float32))
    with pytest.raises(ValueError, match="at least one module"):
        Sequential()
    with pytest.raises(ValueError, match="must be a sopt.nn Module"):
        Sequential(Linear(2, 2), "relu")


def test_train_and_eval_reach_every_module_in_the_container():
    from sopt.nn import FullyFusedMLP, Linear
    inner = FullyFusedMLP(4, 3, 8, 1)
    first = Linear(2, 4)
    model = Sequential(first, inner)
    assert model.eval() is model
    assert (model.training, first.training, inner.training) == (False, False, False)
    model.train()
    assert (model.training, first.training, inner.training) == (True, True, True)
    assert inner.eval() is inner and not inner.training and model.training
