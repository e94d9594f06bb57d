"""sopt.Tape: gradients of recorded calls (modules, losses, user Slang), sharing, pooling and the safety checks."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest
import slangpy as spy

import sopt
from sopt.losses import L1Loss, MSELoss
from sopt.nn import Linear, Sequential, Tanh
from sopt.nn.fully_fused_mlp import FullyFusedMLP
from sopt.nn.vjp import vjp

RNG = np.random.default_rng(0)
X = RNG.uniform(-1, 1, (6, 3)).astype(np.float32)
TARGET = RNG.uniform(-1, 1, (6, 3)).astype(np.float32)
PENDULUM = pathlib.Path(__file__).resolve().parents[2] / "examples" / "custom_simulator.slang"


def _grads(params) -> list[np.ndarray]:
    out = [p.grad_numpy() for p in params]
    for p in params:
        p.zero_grad()
    return out


def test_sequential_on_the_tape_matches_the_eager_backward() -> None:
    model = Sequential(Linear(3, 8, activation="relu", seed=1), Tanh(), Linear(8, 3, seed=2))
    tape = sopt.Tape()
    with tape:
        loss = MSELoss()(model(X), TARGET)
    tape.backward(loss)
    tape.submit()
    on_tape = _grads(model.parameters())
    y = model.forward(X).to_numpy()
    _, _, eager = vjp(model, X, 2 * (y - TARGET) / TARGET.size)
    for g, (name, _) in zip(on_tape, model.named_parameters()):
        np.testing.assert_allclose(g, eager[name], rtol=1e-5, atol=1e-7)


def _fd(f, w: np.ndarray, eps: float = 1e-4) -> np.ndarray:
    g = np.zeros_like(w)
    for i in np.ndindex(w.shape):
        p, m = w.copy(), w.copy()
        p[i] += eps
        m[i] -= eps
        g[i] = (f(p) - f(m)) / (2 * eps)
    return g


def test_module_called_twice_gets_the_sum_of_both_calls_gradients() -> None:
    layer = Linear(3, 3, seed=5)
    tape = sopt.Tape()
    with tape:
        y = layer(layer(X))                         # the same weights at two places
        loss = MSELoss()(y, TARGET)
    tape.backward(loss)
    tape.submit()
    gw, gb = _grads(layer.parameters())
    W, b = layer.weight.numpy().astype(np.float64), layer.bias.numpy().astype(np.float64)

    def f(W_: np.ndarray) -> float:
        return float(np.mean(((X @ W_.T + b) @ W_.T + b - TARGET) ** 2))
    np.testing.assert_allclose(gw, _fd(f, W), rtol=1e-4, atol=1e-6)
    # a Sequential listing one instance twice runs on a tape and lists its parameters once
    shared = Sequential(layer, layer)
    assert len(shared.parameters()) == 2
    with tape:
        loss = MSELoss()(shared(X), TARGET)
    tape.backward(loss)
    tape.submit()
    np.testing.assert_allclose(_grads(layer.parameters())[0], gw, rtol=1e-6)


def test_a_tensor_read_by_two_calls_gets_both_gradients() -> None:
    """x -> a = L1(x), b = L2(x), loss(a) + loss(b): x's gradient is written by one backward, added by the other."""
    l1, l2 = Linear(3, 3, seed=1), Linear(3, 3, seed=2)
    x = sopt.Parameter(X, name="x")   # a leaf whose gradient we read
    first = Linear(3, 3, seed=3)
    tape = sopt.Tape()
    with tape:
        h = first(X)
        la, lb = MSELoss()(l1(h), TARGET), L1Loss()(l2(h), TARGET)
    tape.backward([la, lb])
    tape.submit()
    g = _grads(first.parameters())[0]
    W0, b0 = first.weight.numpy().astype(np.float64), first.bias.numpy().astype(np.float64)
    W1, b1 = l1.weight.numpy().astype(np.float64), l1.bias.numpy().astype(np.float64)
    W2, b2 = l2.weight.numpy().astype(np.float64), l2.bias.numpy().astype(np.float64)

    def f(W: np.ndarray) -> float:
        h_ = X @ W.T + b0
        return float(np.mean((h_ @ W1.T + b1 - TARGET) ** 2) + np.mean(np.abs(h_ @ W2.T + b2 - TARGET)))
    np.testing.assert_allclose(g, _fd(f, W0), rtol=1e-3, atol=1e-5)
    del x


def test_two_losses_on_one_prediction_add() -> None:
    layer = Linear(3, 3, seed=7)
    tape = sopt.Tape()
    with tape:
        y = layer(X)
        l1, l2 = MSELoss()(y, TARGET), MSELoss()(y, np.zeros_like(TARGET))
    tape.backward([l1, l2])
    tape.submit()
    both = _grads(layer.parameters())[0]
    singles = []
    for t in (TARGET, np.zeros_like(TARGET)):
        with tape:
            loss = MSELoss()(layer(X), t)
        tape.backward(loss)
        tape.submit()
        singles.append(_grads(layer.parameters())[0])
    np.testing.assert_allclose(both, singles[0] + singles[1], rtol=1e-5, atol=1e-7)


def test_fully_fused_mlp_called_twice_on_a_tape() -> None:
    net = FullyFusedMLP(3, 3, hidden_features=16, hidden_layers=1, seed=3)
    x2 = X[::-1].copy()
    tape = sopt.Tape()
    with tape:
        loss = MSELoss()(net(X), TARGET)
    tape.backward(loss)
    tape.submit()
    g1 = _grads(net.parameters())[0]
    with tape:
        loss = MSELoss()(net(x2), TARGET)
    tape.backward(loss)
    tape.submit()
    g2 = _grads(net.parameters())[0]
    with tape:                                   # both calls on one tape: each keeps its own activations
        la, lb = MSELoss()(net(X), TARGET), MSELoss()(net(x2), TARGET)
    tape.backward([la, lb])
    tape.submit()
    np.testing.assert_allclose(_grads(net.parameters())[0], g1 + g2, rtol=1e-4, atol=1e-6)


def test_pool_is_reused_step_after_step() -> None:
    model = Sequential(Linear(3, 8, activation="relu"), Linear(8, 3))
    tape = sopt.Tape()
    sizes = []
    for _ in range(3):
        with tape:
            loss = MSELoss()(model(X), TARGET)
        tape.backward(loss)
        tape.submit()
        sizes.append(tape.pool_bytes)
    assert sizes[0] > 0 and sizes[0] == sizes[1] == sizes[2]


def test_overwriting_a_saved_array_raises() -> None:
    pendulum = sopt.load_module(PENDULUM)
    damping = sopt.Parameter([0.3], name="damping")
    state = pendulum.pendulum_start(np.array([0.4, 0.2], np.float32))
    tape = sopt.Tape()
    with pytest.raises(sopt.TapeError, match=r"writes an array of shape \(2, 2\) that .*pendulum_step \(call #0\) saved"):
        with tape:
            s1 = pendulum.pendulum_step(state, damping, 9.81, 0.01)
            # a hand-recorded call writing into the state the step saved (the in-place update trap)
            sopt.autodiff.tape.record("inplace", lambda enc: None, None, writes=[state])
    del s1
    # a Parameter changed between the forward and backward is refused too
    with tape:
        s1 = pendulum.pendulum_step(state, damping, 9.81, 0.01)
    damping.load([0.5])
    with pytest.raises(sopt.TapeError, match="Parameter 'damping' changed"):
        tape.backward(grads={s1: np.ones((2, 2), np.float32)})
    # so is an optimiser step recorded before the backward (it moves every parameter of its arena)
    opt = sopt.optim.SGD([damping], lr=0.1)
    tape.reset()
    with tape:
        s1 = pendulum.pendulum_step(state, damping, 9.81, 0.01)
    opt.step(tape.encoder)
    with pytest.raises(sopt.TapeError, match="Parameter 'damping' changed"):
        tape.backward(grads={s1: np.ones((2, 2), np.float32)})


def test_backward_checks_its_seeds() -> None:
    layer = Linear(3, 3)
    tape = sopt.Tape()
    with tape:
        y = layer(X)
        l1, l2 = MSELoss()(y, TARGET), MSELoss()(y, TARGET)
    with pytest.raises(sopt.TapeError, match="recorded 2 loss.*MSELoss.*is not among those given"):
        tape.backward(l1)
    with pytest.raises(sopt.TapeError, match="not computed on this tape"):
        tape.backward(3.0)
    with pytest.raises(ValueError, match=r"backward grads value has shape \(2, 2\), expected \(6, 3\)"):
        tape.backward([l1, l2], grads={y: np.ones((2, 2))})
    with pytest.raises(sopt.TapeError, match="inside 'with tape:'"):
        with tape:
            tape.backward(l1)
    assert tape.nodes == []   # the failed block was dropped: the next 'with tape:' starts a clean step


def test_user_slang_function_gradients_and_summed_tensor_loss() -> None:
    pendulum = sopt.load_module(PENDULUM)
    damping = sopt.Parameter([0.3], name="damping")
    theta0 = np.array([0.5, -1.0], np.float32)
    tape = sopt.Tape()
    with tape:
        s = pendulum.pendulum_start(theta0)
        for _ in range(20):
            s = pendulum.pendulum_step(s, damping, 9.81, 0.05)
    tape.backward(s)                                # a tensor loss: the sum of its elements
    tape.submit()
    assert tuple(s.shape) == (2, 2)

    def f(d: float) -> float:
        x = np.stack([theta0, np.zeros(2)], 1).astype(np.float64)
        for _ in range(20):
            om = x[:, 1] + 0.05 * (-9.81 * np.sin(x[:, 0]) - d * x[:, 1])
            x = np.stack([x[:, 0] + 0.05 * om, om], 1)
        return float(x.sum())
    fd = (f(0.3 + 1e-5) - f(0.3 - 1e-5)) / 2e-5
    assert damping.grad_numpy()[0] == pytest.approx(fd, rel=1e-4)


def test_gradcheck_of_an_objective_reports_each_parameter() -> None:
    layer = Linear(3, 3, seed=9)

    def objective(tape, step):
        return MSELoss()(layer(X), TARGET)
    result = sopt.gradcheck(objective, layer, eps=1e-2)
    assert result.ok and set(result.worst_by_parameter) == {"weight", "bias"}
    assert max(result.worst_by_parameter.values()) < 1e-2
    # a wrong backward is caught: the layer's backward run twice doubles its gradients
    backward = layer.backward
    layer.backward = lambda x, y, encoder=None: (backward(x, y, encoder), backward(x, y, encoder))
    doubled = sopt.gradcheck(objective, layer, eps=1e-2)
    assert not doubled.ok and doubled.worst_by_parameter["weight"] > 0.3
