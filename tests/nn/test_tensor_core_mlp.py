"""TensorCoreMLP: its parameter layout is FullyFusedMLP's (any device), its packed half weights (numpy
reference of tcmlp_pack), and on CUDA its forward and gradients against FullyFusedMLP's float32 ones on the
same parameters (skipped elsewhere; the kernels are tensor-core MMAs)."""

from __future__ import annotations

import numpy as np
import pytest
import slangpy as spy

import sopt
from sopt import device as dev
from sopt.nn.activation import make_activation
from sopt.nn.fully_fused_mlp import FullyFusedMLP
from sopt.nn.tensor_core_mlp import TensorCoreMLP, flat_layout, initial_flat, pack_reference

SIZES = [(32, 64, 2, 3), (3, 16, 1, 5), (7, 32, 3, 20)]   # (in, hidden, hidden layers, out)


@pytest.mark.parametrize("in_f,hidden,layers,out_f", SIZES)
def test_layout_and_initial_weights_are_fully_fused_mlps(in_f, hidden, layers, out_f):
    ff = FullyFusedMLP(in_f, out_f, hidden_features=hidden, hidden_layers=layers, seed=3)
    flat = initial_flat(in_f, hidden, layers, out_f, make_activation("relu"), None, seed=3)
    np.testing.assert_array_equal(flat, ff.params.numpy())
    table, total = flat_layout(in_f, hidden, layers, out_f)
    assert total == ff.params.size
    mine = [(flat[off:off + o * ip].reshape(o, ip)[:, :il], flat[off + o * ip:off + o * ip + o])
            for ip, il, o, off in table]
    for (w, b), (w_ff, b_ff) in zip(mine, ff.layer_slices(flat), strict=True):
        np.testing.assert_array_equal(w, w_ff)
        np.testing.assert_array_equal(b, b_ff)


def test_pack_reference_pads_to_16_and_rounds_to_half():
    in_f, hidden, layers, out_f = 3, 16, 1, 5
    flat = np.arange(1, flat_layout(in_f, hidden, layers, out_f)[1] + 1, dtype=np.float32) / 7.0
    weights, biases = pack_reference(flat, in_f, hidden, layers, out_f)
    assert weights.shape == (16 * 16 + 16 * 16,) and biases.shape == (32,)
    w0 = weights[:256].reshape(16, 16)
    # layer 0: W (16 x 4 padded in, 3 used) at 0, its bias at 64; columns 3.. of the packed copy are zero
    np.testing.assert_array_equal(w0[:, :3], (flat[:64].reshape(16, 4)[:, :3]).astype(np.float16))
    assert not w0[:, 3:].any()
    np.testing.assert_array_equal(biases[:16], flat[64:80])
    w1 = weights[256:].reshape(16, 16)   # layer 1: 5 x 16 at 80, bias at 160; rows 5.. zero
    np.testing.assert_array_equal(w1[:5], flat[80:160].reshape(5, 16).astype(np.float16))
    assert not w1[5:].any() and not biases[16 + 5:].any()
    np.testing.assert_array_equal(biases[16:21], flat[160:165])


def test_refuses_a_device_without_tensor_cores_or_bad_sizes():
    if dev.device_kind() != "cuda":
        with pytest.raises(RuntimeError, match="CUDA only"):
            TensorCoreMLP(32, 3)
    with pytest.raises(ValueError, match="multiple of 16"):
        TensorCoreMLP(32, 3, hidden_features=24)


def _rel(a, b):
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30))


@pytest.mark.skipif("dev.device_kind() != 'cuda'")
@pytest.mark.parametrize("in_f,hidden,layers,out_f,act,n", [(32, 64, 2, 3, "relu", 1000), (5, 16, 1, 20, "tanh", 300)])
def test_matches_fully_fused_mlp_on_cuda(in_f, hidden, layers, out_f, act, n):
    rng = np.random.default_rng(0)
    ff = FullyFusedMLP(in_f, out_f, hidden_features=hidden, hidden_layers=layers, activation=act, seed=1)
    tc = TensorCoreMLP(in_f, out_f, hidden_features=hidden, hidden_layers=layers, activation=act, seed=1)
    tc.params.load(ff.params.numpy())
    device = dev.get_device()
    x_np = rng.uniform(-1, 1, (n, in_f)).astype(np.float32)
    dy_np = (rng.standard_normal((n, out_f)) / n).astype(np.float32)   # a mean loss's dL/dy
    outs = []
    for m in (ff, tc):
        x = spy.Tensor.from_numpy(device, x_np).with_grads(zero=True)
        m.params.zero_grad()
        y = m.forward(x)
        y.grad.copy_from_numpy(dy_np)
        m.backward(x, y)
        sopt.device.synchronize()
        outs.append((y.to_numpy(), m.params.grad_numpy(), x.grad.to_numpy()))
    (y_ff, g_ff, dx_ff), (y_tc, g_tc, dx_tc) = outs
    weights, biases = pack_reference(ff.params.numpy(), in_f, hidden, layers, out_f)   # tcmlp_pack's output
    np.testing.assert_array_equal(tc._packed.to_numpy().view(np.float16).ravel(), weights)
    np.testing.assert_array_equal(tc._bias.to_numpy(), biases)
    # half operands: ~1e-3 relative per product, a few products deep
    assert _rel(y_tc, y_ff) < 1e-2
    assert _rel(g_tc, g_ff) < 2e-2
    assert _rel(dx_tc, dx_ff) < 2e-2
