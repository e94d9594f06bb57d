"""TensorCoreMLP: its parameter layout is FullyFusedMLP's (any device), its packed half weights (numpy
reference of the packed weights), and on CUDA its forward and gradients against FullyFusedMLP's float32 ones on the
same parameters (skipped elsewhere; the kernels are tensor-core MMAs)."""

from __future__ import annotations

import numpy as np
import pytest
import slangpy as spy

from sopt.runtime import device as dev
from sopt.nn.activation import make_activation
from sopt.nn.fully_fused_mlp import FullyFusedMLP
from sopt.nn.tensor_core_mlp import TS, TensorCoreMLP, flat_layout, initial_flat, pack_reference
from sopt.nn.vjp import vjp

def _pairs(grads: dict[str, np.ndarray]) -> list[tuple[np.ndarray, np.ndarray]]:
    """(dW_j, db_j) per layer from gradients keyed "j.weight", "j.bias"."""
    return [(grads[f"{j}.weight"], grads[f"{j}.bias"]) for j in range(len(grads) // 2)]


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


def test_fused_frequency_layout_and_initial_weights_are_fully_fused_mlps():
    # with a fused Frequency encoding, layer 0 takes the 2 F D encoded inputs: FullyFusedMLP's layout and weights
    ff = FullyFusedMLP(3, 4, hidden_features=32, hidden_layers=2, encoding={"otype": "Frequency", "n_frequencies": 6},
                       seed=2)
    np.testing.assert_array_equal(initial_flat(36, 32, 2, 4, make_activation("relu"), None, seed=2), ff.params.numpy())


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


def _forward_backward(m, x, dy: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One forward and backward of ``m`` on x with dL/dy = dy from zeroed parameter gradients: (y, dL/dparams)."""
    m.params.zero_grad()
    y = m.forward(x)
    y.grad.copy_from_numpy(dy)
    m.backward(x, y)
    return y.to_numpy().copy(), m.params.grad_numpy().copy()


def _rel(a, b):
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30))


def _reference_through_states(layers, x, dy, states, act):
    """float64 forward and backward of the network (W_j, b_j per layer), the backward taking act'(z_j) from
    the given hidden outputs a_{j+1} (states[j], n x H) as the kernels do (ReLU: a > 0; tanh: 1 - a^2).
    Returns (hidden outputs a_1..a_L, float64 pre-activation signs z_j > 0, dL/dx, [(dW_j, db_j)])."""
    a, z_pos = [x.astype(np.float64)], []
    for j, (w, b) in enumerate(layers[:-1]):
        z = a[-1] @ w.T.astype(np.float64) + b
        z_pos.append(z > 0)
        a.append(np.maximum(z, 0.0) if act == "relu" else np.tanh(z))
    d, grads = dy.astype(np.float64), []
    for j in range(len(layers) - 1, -1, -1):
        grads.insert(0, (d.T @ a[j], d.sum(0)))
        d = d @ layers[j][0].astype(np.float64)
        if j > 0:
            s = states[j - 1].astype(np.float64)
            d = d * ((s > 0) if act == "relu" else 1.0 - s * s)
    return a[1:], z_pos, d, grads


@pytest.mark.skipif("dev.device_kind() != 'cuda'")
# (64, 3 layers): more weight rows than stay resident in group-shared memory, so staged per layer and tile;
# 1000 and 300 rows: several tiles, the last one partial
@pytest.mark.parametrize("in_f,hidden,layers,out_f,act,n", [(32, 64, 2, 3, "relu", 1000), (5, 16, 1, 20, "tanh", 300),
                                                            (12, 64, 3, 5, "relu", 700)])
def test_matches_fully_fused_mlp_on_cuda(in_f, hidden, layers, out_f, act, n):
    rng = np.random.default_rng(0)
    ff = FullyFusedMLP(in_f, out_f, hidden_features=hidden, hidden_layers=layers, activation=act, seed=1)
    tc = TensorCoreMLP(in_f, out_f, hidden_features=hidden, hidden_layers=layers, activation=act, seed=1)
    tc.params.load(ff.params.numpy())
    x_np = rng.uniform(-1, 1, (n, in_f)).astype(np.float32)
    dy_np = (rng.standard_normal((n, out_f)) / n).astype(np.float32)   # a mean loss's dL/dy
    (y_ff, dx_ff, g_ff), (y_tc, dx_tc, g_tc) = (vjp(m, x_np, dy_np) for m in (ff, tc))
    g_ff, g_tc = _pairs(g_ff), _pairs(g_tc)   # vjp's per-layer gradients, (dW_j, db_j) per layer
    weights, biases = pack_reference(ff.params.numpy(), in_f, hidden, layers, out_f)   # what the forward's group 0 wrote
    np.testing.assert_array_equal(tc._packed.to_numpy().view(np.float16).ravel(), weights)
    np.testing.assert_array_equal(tc._bias.to_numpy(), biases)
    # half operands, float32 accumulation: ~5e-4 relative per product (numpy emulation of the kernels: 5.0e-4)
    assert _rel(y_tc, y_ff) < 5e-3
    # The saved half hidden outputs a_{j+1} (L x n_pad x H), from which the backward takes act'(z_j).
    n_pad = -(-n // TS) * TS
    states = tc._buffers[n]["saved"].to_numpy().view(np.float16).reshape(layers, n_pad, hidden)[:, :n]
    w_b = tc.layer_slices()
    hidden_ref, z_pos, dx_ref, grads_ref = _reference_through_states(w_b, x_np, dy_np, states, act)
    for j in range(layers):
        assert _rel(states[j], hidden_ref[j]) < 5e-3, j
    # The gradients are those of the half-precision forward: exact (to half rounding) for its own activation
    # states. A ReLU unit whose pre-activation is within the operands' rounding of 0 (|z| <~ 5e-4) can be on
    # here and off in float32; such a sample's dL/dx then lacks (or gains) one unit's term W_0[h, :] dz_0[n, h],
    # ~13% of max|dx| for 64 units (the first H100 run: 0.129 for the (32, 64, 2, 3) case, 13 of 1000 rows;
    # the emulation gives the same 0.1289), and the batch sums dW_j, db_j of the hidden layers move by a few %.
    # So dx and every layer's gradient are compared with float64 maths through the kernel's states (emulated:
    # <= 6e-4), and dx with FullyFusedMLP on the rows where every unit is in the same state as in float64.
    for j, ((dw_tc, db_tc), (dw_ref, db_ref)) in enumerate(zip(g_tc, grads_ref, strict=True)):
        assert _rel(dw_tc, dw_ref) < 5e-3, j
        assert _rel(db_tc, db_ref) < 5e-3, j
    assert _rel(dx_tc, dx_ref) < 5e-3
    same_state = np.ones(n, bool)
    if act == "relu":
        for s, zp in zip(states, z_pos):
            same_state &= ((s > 0) == zp).all(1)
    assert same_state.sum() >= 0.95 * n   # emulated: 987 of 1000 rows
    assert _rel(dx_tc[same_state], dx_ff[same_state]) < 5e-3


@pytest.mark.skipif("dev.device_kind() != 'cuda'")
@pytest.mark.parametrize("dims,n_freqs", [(2, 12), (3, 12)])   # 48 and 72 encoded inputs (K0 = 48, 80)
def test_fused_frequency_encoding_matches_fully_fused_mlp_on_cuda(dims, n_freqs):
    # tanh: no activation state can flip between half and float32, so every gradient agrees to half precision
    enc = {"otype": "Frequency", "n_frequencies": n_freqs}
    ff = FullyFusedMLP(dims, 3, hidden_features=64, hidden_layers=2, activation="tanh", encoding=enc, seed=2)
    tc = TensorCoreMLP(dims, 3, hidden_features=64, hidden_layers=2, activation="tanh", encoding=enc, seed=2)
    np.testing.assert_array_equal(tc.params.numpy(), ff.params.numpy())
    rng = np.random.default_rng(5)
    n = 700
    x = spy.Tensor.from_numpy(dev.get_device(), rng.uniform(0, 1, (n, dims)).astype(np.float32))
    dy = (rng.standard_normal((n, 3)) / n).astype(np.float32)
    (y_ff, g_ff), (y_tc, g_tc) = (_forward_backward(m, x, dy) for m in (ff, tc))
    assert _rel(y_tc, y_ff) < 5e-3
    for (dw_tc, db_tc), (dw_ff, db_ff) in zip(tc.layer_slices(g_tc), ff.layer_slices(g_ff), strict=True):
        assert _rel(dw_tc, dw_ff) < 1e-2
        assert _rel(db_tc, db_ff) < 1e-2
    with pytest.raises(ValueError, match="gives no dL/dx"):
        xg = spy.Tensor.from_numpy(dev.get_device(), rng.uniform(0, 1, (n, dims)).astype(np.float32)).with_grads(
            zero=True)
        y = tc.forward(xg)
        tc.backward(xg, y)


@pytest.mark.skipif("dev.device_kind() != 'cuda'")
@pytest.mark.parametrize("encoding,n,ld", [(None, 700, 700), (None, 701, 736), (None, 701, 703),
                                           ({"otype": "Frequency", "n_frequencies": 4}, 700, 700)])
def test_column_major_input_gives_the_row_major_results_on_cuda(encoding, n, ld):
    # x[n, k] at k ld + n (as a HashGridEncoding before it writes it with output_layout "column_major"): the same
    # half inputs, so the same bits of y, dL/dx (written column-major into x's gradient) and the weight gradients.
    # ld a multiple of 4: x staged by float4 columns (n = 701: the last group of 4 rows partial); 703: scalar loads
    from sopt.nn.batch import column_major

    in_f = 8   # 64 inputs with the encoding (TensorCoreMLP takes <= 80)
    tc = TensorCoreMLP(in_f, 5, hidden_features=64, hidden_layers=2, seed=3, encoding=encoding)
    rng = np.random.default_rng(9)
    x_np = rng.uniform(0, 1, (n, in_f)).astype(np.float32)
    dy = (rng.standard_normal((n, 5)) / n).astype(np.float32)
    padded = np.zeros((in_f, ld), np.float32)
    padded[:, :n] = x_np.T
    rows = spy.Tensor.from_numpy(dev.get_device(), x_np)
    cols = column_major(spy.Tensor.from_numpy(dev.get_device(), padded), n)
    if encoding is None:
        rows = rows.with_grads(zero=True)
        cols = column_major(spy.Tensor.from_numpy(dev.get_device(), padded).with_grads(zero=True), n)
    assert cols.strides.as_tuple() == (1, ld)
    np.testing.assert_array_equal(cols.to_numpy(), x_np)
    out = [_forward_backward(tc, x, dy) for x in (rows, cols)]
    np.testing.assert_array_equal(out[0][0], out[1][0])
    np.testing.assert_array_equal(out[0][1], out[1][1])
    if encoding is None:
        dx_rows, dx_cols = rows.grad.to_numpy(), cols.grad.to_numpy()
        np.testing.assert_array_equal(dx_rows, dx_cols)
        assert np.abs(dx_rows).max() > 0


@pytest.mark.skipif("dev.device_kind() != 'cuda'")
def test_hash_grid_before_it_writes_columns_on_cuda():
    # Sequential(HashGridEncoding, TensorCoreMLP): the encoding writes column-major; the step's outputs and
    # gradients are the row-major step's (float32 table sums: to float32 summation order)
    from sopt.nn import HashGridEncoding, Sequential

    enc = HashGridEncoding(3, n_levels=8, log2_table_size=12, base_resolution=4, seed=1)
    enc.table.load(np.random.default_rng(1).normal(size=enc.table.shape) * 0.1)
    tc = TensorCoreMLP(enc.out_features, 3, hidden_features=64, hidden_layers=2, seed=4)
    seq = Sequential(enc, tc)
    assert enc.output_layout == tc.preferred_input_layout == "column_major"
    rng = np.random.default_rng(2)
    n = 5000
    x = rng.uniform(0, 1, (n, 3)).astype(np.float32)
    dy = (rng.standard_normal((n, 3)) / n).astype(np.float32)
    y_c, dx_c, g_c = vjp(seq, x, dy)
    enc.output_layout = "row_major"
    y_r, dx_r, g_r = vjp(seq, x, dy)
    np.testing.assert_array_equal(y_c, y_r)
    np.testing.assert_allclose(dx_c, dx_r, rtol=1e-5, atol=1e-6 * np.abs(dx_r).max())
    for key in g_r:
        np.testing.assert_allclose(g_c[key], g_r[key], rtol=1e-4, atol=1e-5 * np.abs(g_r[key]).max())


@pytest.mark.skipif("dev.device_kind() != 'cuda'")
@pytest.mark.parametrize("mode", ["float16", "deterministic"])
def test_deltas_kernel_raises_the_hash_grid_max_on_cuda(mode, monkeypatch):
    # a hash grid summing in float16 or fixed point needs M = max |dL/dy|: TensorCoreMLP's deltas kernel, which
    # writes dL/dy (its dL/dx), raises M as it writes it and the grid's pass 1 is skipped. M is the bits of the
    # largest |dL/dy| either way, and the table gradient is the one with pass 1
    from sopt.runtime import device as sdev
    from sopt.autodiff import grad_max
    from sopt.nn import HashGridEncoding, Sequential

    kw = {"deterministic": True} if mode == "deterministic" else {"gradient_precision": "float16"}
    rng = np.random.default_rng(4)
    n = 3000
    x = rng.uniform(0, 1, (n, 3)).astype(np.float32)
    dy = (rng.standard_normal((n, 3)) / n).astype(np.float32)
    out = []
    for claims in (True, False):
        if not claims:
            monkeypatch.setattr(grad_max, "claim", lambda grad, encoder: None)
        enc = HashGridEncoding(3, n_levels=8, log2_table_size=12, base_resolution=4, seed=1, **kw)
        tc = TensorCoreMLP(enc.out_features, 3, hidden_features=64, hidden_layers=2, seed=4)
        seq = Sequential(enc, tc)
        y = seq.forward(x)
        y.grad.copy_from_numpy(dy)
        before = sdev.dispatch_count()
        seq.backward(x, y)
        dispatches = sdev.dispatch_count() - before
        m_bits = enc._fixed.to_numpy().view(np.uint32)[(enc._max_at ^ 4) // 4]
        dl_dy = seq._traces[n][1].grad.to_numpy()
        assert m_bits == np.abs(dl_dy).max().view(np.uint32) and m_bits != 0
        out.append((dispatches, enc.table.grad_numpy()))
    assert out[0][0] == out[1][0] - 1   # no pass 1
    np.testing.assert_allclose(out[0][1], out[1][1], rtol=1e-3, atol=1e-3 * np.abs(out[1][1]).max())
