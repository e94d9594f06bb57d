"""FullyFusedMLP against a float64 numpy MLP: forward, parameter gradients, input gradients (with and
without the fused frequency encoding), and bad input."""

from __future__ import annotations

import numpy as np
import pytest
import slangpy as spy

import sopt
from sopt.nn.fully_fused_mlp import FullyFusedMLP

ACTS = {"relu": (lambda z: np.maximum(z, 0), lambda z: (z > 0).astype(float)),
        "tanh": (np.tanh, lambda z: 1 - np.tanh(z) ** 2),
        "sigmoid": (lambda z: 1 / (1 + np.exp(-z)), lambda z: np.exp(-z) / (1 + np.exp(-z)) ** 2),
        "none": (lambda z: z, lambda z: np.ones_like(z))}


def encode(x: np.ndarray, freqs: int) -> np.ndarray:
    if not freqs:
        return x.astype(np.float64)
    arg = x[:, :, None].astype(np.float64) * (2.0 ** np.arange(freqs) * np.pi)
    return np.stack([np.sin(arg), np.cos(arg)], -1).reshape(len(x), -1)


def reference(m: FullyFusedMLP, x: np.ndarray, dy: np.ndarray):
    """(y, [(dW, db) per layer], dx) in float64."""
    layers = m.layer_slices()
    (f, df), (fo, dfo) = ACTS[m.activation], ACTS[m.output_activation]
    a, zs, acts = encode(x, m.n_frequencies), [], []
    for j, (w, b) in enumerate(layers):
        acts.append(a)
        z = a @ w.T.astype(np.float64) + b
        zs.append(z)
        a = fo(z) if j == len(layers) - 1 else f(z)
    d, grads = dy.astype(np.float64), []
    for j in range(len(layers) - 1, -1, -1):
        dz = d * (dfo(zs[j]) if j == len(layers) - 1 else df(zs[j]))
        grads.append((dz.T @ acts[j], dz.sum(0)))
        d = dz @ layers[j][0].astype(np.float64)
    if m.n_frequencies:
        k = 2.0 ** np.arange(m.n_frequencies) * np.pi
        arg = x[:, :, None] * k
        dd = d.reshape(len(x), x.shape[1], m.n_frequencies, 2)
        d = (k * (np.cos(arg) * dd[..., 0] - np.sin(arg) * dd[..., 1])).sum(-1)
    return a, grads[::-1], d


def rel(a, b):
    return np.abs(np.asarray(a) - b).max() / max(np.abs(b).max(), 1e-12)


@pytest.mark.parametrize("in_f,freqs,hidden,out_f,layers,act,out_act,n", [
    (3, 0, 8, 2, 1, "relu", "none", 70),
    (2, 3, 8, 3, 2, "relu", "sigmoid", 100),
    (5, 0, 12, 4, 3, "tanh", "none", 130),
    (3, 2, 32, 3, 2, "relu", "none", 150),   # 4 samples per thread: float4 tile reads and stores
    (2, 16, 64, 3, 3, "relu", "none", 200),  # the benchmark's network: 8 samples x 4 columns per thread
    (2, 0, 60, 5, 2, "tanh", "none", 70),    # 60 = 4 x 15 inputs: weight-gradient blocks of 4 x 12
    # issue 21, inputs above 64: the first layer in 2 chunks of 40 columns (the last 8 past the input padding);
    (3, 12, 16, 3, 2, "relu", "none", 100),  # 72 encoded features: input 1's 24 features straddle the chunks
    (70, 0, 8, 2, 1, "tanh", "none", 70),    # 70 raw inputs, no encoding
])
@pytest.mark.parametrize("max_groups", [512, 1])
def test_matches_float64_mlp(in_f, freqs, hidden, out_f, layers, act, out_act, n, max_groups, monkeypatch):
    """max_groups = 1: one thread group walks every tile of the backward pass, accumulating across them."""
    monkeypatch.setattr(sopt.nn.fully_fused_mlp, "_MAX_BACKWARD_GROUPS", max_groups)
    rng = np.random.default_rng(n)
    enc = {"otype": "Frequency", "n_frequencies": freqs} if freqs else None
    m = FullyFusedMLP(in_f, out_f, hidden, layers, activation=act, output_activation=out_act, encoding=enc, seed=n)
    x = rng.uniform(-1, 1, (n, in_f)).astype(np.float32)   # every quarter turn of the encoding
    xt = spy.Tensor.from_numpy(sopt.get_device(), x).with_grads(zero=True)
    y = m.forward(xt)
    dy = rng.standard_normal((n, out_f)).astype(np.float32)
    y_ref, grads_ref, dx_ref = reference(m, x, dy)
    assert rel(y.to_numpy(), y_ref) < 1e-5
    y.grad.copy_from_numpy(dy)
    m.backward(xt, y)
    for j, ((gw, gb), (rw, rb)) in enumerate(zip(m.layer_slices(m.params.grad_numpy()), grads_ref)):
        assert rel(gw, rw) < 1e-5, f"layer {j} weight gradient"
        assert rel(gb, rb) < 1e-5, f"layer {j} bias gradient"
    assert rel(xt.grad.to_numpy(), dx_ref) < 1e-5
    # gradients accumulate over a second backward; padding columns of layer 0 stay zero
    m.backward(xt, y)
    gw0 = m.layer_slices(m.params.grad_numpy())[0][0]
    assert rel(gw0, 2 * grads_ref[0][0]) < 1e-5
    i_pad, i_log, o, off = m.layers[0]
    padded = m.params.grad_numpy()[off:off + o * i_pad].reshape(o, i_pad)[:, i_log:]
    assert not padded.any()


def test_trains_with_adam_and_matches_mlp_init():
    """MLP's initialisation (issue 20, one MLP): Kaiming-uniform ReLU layers, torch's default output layer."""
    m = FullyFusedMLP(2, 1, 8, 2, seed=3)
    for j, ((w, b), (i_pad, i_log, o, _)) in enumerate(zip(m.layer_slices(), m.layers)):
        bound = np.sqrt(6 / i_log) if j < m.hidden_layers else 1 / np.sqrt(i_log)
        assert w.shape == (o, i_log) and np.abs(w).max() <= bound and np.abs(b).max() <= bound
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (256, 2)).astype(np.float32)
    target = (x[:, :1] * x[:, 1:]).astype(np.float32)
    xt = spy.Tensor.from_numpy(sopt.get_device(), x)
    opt = sopt.optim.Adam(m.parameters(), lr=0.02)
    losses = []
    for _ in range(150):
        y = m.forward(xt)
        err = y.to_numpy() - target
        losses.append(float((err ** 2).mean()))
        y.grad.copy_from_numpy((2 * err / err.size).astype(np.float32))
        m.backward(xt, y)
        opt.step()
    assert losses[-1] < 0.1 * losses[0]


def test_bad_input_raises_before_gpu_work():
    m = FullyFusedMLP(2, 3, 8, 1)
    dev = sopt.get_device()
    with pytest.raises(ValueError, match=r"expected input of shape \(N, 2\), got \(4, 3\)"):
        m.forward(spy.Tensor.from_numpy(dev, np.zeros((4, 3), np.float32)))
    with pytest.raises(ValueError, match="expected a float32 tensor"):
        m.forward(spy.Tensor.from_numpy(dev, np.zeros((4, 2), np.int32)))
    with pytest.raises(ValueError, match="expected a slangpy.Tensor"):
        m.forward(np.zeros((4, 2), np.float32))
    with pytest.raises(ValueError, match="hidden_features must be <= 64|must be <= 64"):
        FullyFusedMLP(2, 3, 128, 1)
    with pytest.raises(ValueError, match=r"input width padded to 4 must be <= 512 .*got 600"):
        FullyFusedMLP(600, 3, 8, 1)
    with pytest.raises(ValueError, match="activation must be one of"):
        FullyFusedMLP(2, 3, 8, 1, activation="gelu")
    with pytest.raises(ValueError, match="encoding must be None or"):
        FullyFusedMLP(2, 3, 8, 1, encoding={"otype": "HashGrid"})


_COMPILE_SCRIPT = """
import numpy as np, slangpy as spy, sopt
from sopt.nn.fully_fused_mlp import FullyFusedMLP
# L = 2 with 3 outputs: the output layer folded into the last hidden layer's backward (FT = 1), the forward's
# last layer without a next weight (NO = 0), and the input gradient through the frequency encoding
m = FullyFusedMLP(2, 3, 8, 2, encoding={"otype": "Frequency", "n_frequencies": 2})
x = spy.Tensor.from_numpy(sopt.get_device(), np.random.rand(70, 2).astype(np.float32)).with_grads(zero=True)
y = m.forward(x)
y.grad.copy_from_numpy(np.ones((70, 3), np.float32))
m.backward(x, y)
sopt.runtime.device.synchronize()
print("compiled and ran")
"""


def test_compiles_without_uninitialised_variable_warnings(tmp_path):
    """A fresh shader cache forces the compile; Slang prints its diagnostics to the process's output."""
    import os
    import pathlib
    import subprocess
    import sys

    root = pathlib.Path(__file__).resolve().parents[2]
    env = {**os.environ, "SOPT_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPATH": str(root) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    run = subprocess.run([sys.executable, "-c", _COMPILE_SCRIPT], cwd=root, env=env, capture_output=True,
                         text=True, timeout=600)
    printed = run.stdout + run.stderr
    assert run.returncode == 0, printed
    assert "compiled and ran" in printed
    assert "E41035" not in printed and "uninitialized" not in printed, printed


def _train_deterministic_fused(steps: int = 3, n: int = 700):
    """(first step's gradient, x, dy, the module) after ``steps`` Adam steps on a batch of n samples (700: 11
    groups of 64)."""
    m = FullyFusedMLP(2, 3, 8, 2, activation="tanh", encoding={"otype": "Frequency", "n_frequencies": 2}, seed=4,
                      deterministic=True)
    rng = np.random.default_rng(5)
    x = rng.uniform(-1, 1, (n, 2)).astype(np.float32)
    target = rng.uniform(0, 1, (n, 3)).astype(np.float32)
    xt = spy.Tensor.from_numpy(sopt.get_device(), x)
    opt = sopt.optim.Adam(m.parameters(), lr=1e-2)
    first = None
    for step in range(steps):
        y = m.forward(xt)
        dy = (2 * (y.to_numpy() - target) / target.size).astype(np.float32)
        y.grad.copy_from_numpy(dy)
        m.backward(xt, y)
        if step == 0:
            first = (m.params.grad_numpy(), x, dy, m.params.numpy())
        opt.step()
    return first, m


@pytest.mark.parametrize("max_groups, n", [(512, 700), (3, 700), (512, 2600)])
def test_deterministic_mode_is_bit_identical_and_correct(max_groups, n, monkeypatch):
    """max_groups = 3: each group walks several tiles; the output layer is folded in (3 outputs, 2 layers).
    n = 2600: 41 groups, so that the reduction of the partials takes its batches of 32 groups and a tail."""
    monkeypatch.setattr(sopt.nn.fully_fused_mlp, "_MAX_BACKWARD_GROUPS", max_groups)
    (g, x, dy, p0), m = _train_deterministic_fused(n=n)
    m.params.load(p0)   # the reference at the first step's parameters
    _, grads_ref, _ = reference(m, x, dy)
    for j, ((gw, gb), (rw, rb)) in enumerate(zip(m.layer_slices(g), grads_ref)):
        assert rel(gw, rw) < 1e-5, f"layer {j} weight gradient"
        assert rel(gb, rb) < 1e-5, f"layer {j} bias gradient"
    (g2, _, _, _), m2 = _train_deterministic_fused(n=n)
    assert np.array_equal(g.view(np.uint32), g2.view(np.uint32))
    (_, _, _, _), m3 = _train_deterministic_fused(n=n)
    final, final2 = m3.params.numpy(), m2.params.numpy()
    assert np.array_equal(final.view(np.uint32), final2.view(np.uint32))
    assert not np.array_equal(final, p0)
