"""HashGridEncoding: tcnn's level layout, forward and backward against a numpy reference (dense and hashed
levels, 2D and 3D), gradcheck away from cell faces, initialisation."""

from __future__ import annotations

import numpy as np
import pytest

from sopt.nn import HashGridEncoding, IdentityEncoding, Sequential, gradcheck, vjp
from sopt.nn.batch import column_stride, write_batch
from sopt.nn.hashgrid import (COARSE_FLOATS, COARSE_MAX_LEVELS, COARSE_THREADS, coarse_kernel_pays, coarse_levels,
                               grid_levels, half_shift_base)
from tests.nn.reference import away_from_cell_faces, hashgrid as ref_hashgrid

CONFIGS = {  # small tables so that the finer levels are hashed
    "2d": dict(in_dims=2, n_levels=3, n_features=2, log2_table_size=6, base_resolution=3, per_level_scale=2.0),
    "3d": dict(in_dims=3, n_levels=3, n_features=2, log2_table_size=6, base_resolution=2, per_level_scale=1.5),
    "3d_f1": dict(in_dims=3, n_levels=2, n_features=1, log2_table_size=6, base_resolution=4, per_level_scale=1.3),
}


@pytest.fixture(scope="module")
def grids() -> dict[str, HashGridEncoding]:
    out = {}
    for name, cfg in CONFIGS.items():
        enc = HashGridEncoding(**cfg, seed=1)
        # O(1) table values make the test sensitive to indexing errors (the 1e-4 init would hide them)
        enc.table.load(np.random.default_rng(7).normal(size=enc.table.shape))
        out[name] = enc
    return out


def test_levels_follow_tcnn():
    levels = grid_levels(in_dims=2, n_levels=4, log2_table_size=6, base_resolution=3, per_level_scale=2.0)
    # scale = 3 * 2^l - 1; resolution = ceil(scale) + 1; size = min(next multiple of 8 of res^2, 64)
    assert [lv.scale for lv in levels] == [2.0, 5.0, 11.0, 23.0]
    assert [lv.resolution for lv in levels] == [3, 6, 12, 24]
    assert [lv.size for lv in levels] == [16, 40, 64, 64]
    assert [lv.offset for lv in levels] == [0, 16, 56, 120]
    assert [lv.hashed for lv in levels] == [False, False, True, True]
    enc = HashGridEncoding(2, n_levels=4, log2_table_size=6, base_resolution=3, n_features=4)
    assert enc.table.shape == (184, 4) and enc.out_features == 16


@pytest.mark.parametrize("name", CONFIGS)
def test_forward_and_backward_match_numpy(grids, name):
    enc = grids[name]
    assert any(lv.hashed for lv in enc.levels) and not all(lv.hashed for lv in enc.levels)
    rng = np.random.default_rng(3)
    x = rng.uniform(0, 1, size=(40, enc.in_dims)).astype(np.float32)
    dy = rng.normal(size=(40, enc.out_features)).astype(np.float32)
    y, dx, grads = vjp(enc, x, dy)
    ry, rdx, rtable = ref_hashgrid(x, enc.table.numpy(), enc.levels, dy.astype(np.float64))
    np.testing.assert_allclose(y, ry, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(dx, rdx, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(grads["table"], rtable, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["2d", "3d"])
def test_gradcheck_away_from_cell_faces(grids, name):
    enc = grids[name]
    x = away_from_cell_faces(np.random.default_rng(4).uniform(0, 1, size=(400, enc.in_dims)), enc.levels)[:6]
    assert len(x) == 6
    result = gradcheck(enc, x, eps=1e-4, atol=2e-3, n_checks=10)
    assert result.ok, str(result)


def test_coarse_levels_are_the_dense_ones_that_fit_group_shared_memory():
    # issue 21's grids (base 16, scale 1.5, 2^19 rows): 2D levels 0-3 hold 5048 rows (level 4 would end at 11616),
    # 3D level 0 holds 16^3 = 4096 (level 1 ends at 17920)
    assert coarse_levels(grid_levels(2, 16, 19, 16, 1.5), 2) == 4
    assert coarse_levels(grid_levels(3, 16, 19, 16, 1.5), 2) == 1
    assert coarse_levels(grid_levels(3, 16, 19, 16, 1.5), 4) == 0      # 4096 rows x 4 > COARSE_FLOATS
    assert 4096 * 2 <= COARSE_FLOATS < 4096 * 4
    small = grid_levels(**{k: v for k, v in CONFIGS["2d"].items() if k != "n_features"})
    assert [lv.hashed for lv in small] == [False, False, True] and coarse_levels(small, 2) == 2
    # deterministic mode's kernel sums int64s, half as many per 48 KiB: 2D levels 0-2 (2128 rows), 3D none
    assert HashGridEncoding(**CONFIGS["2d"], deterministic=True).coarse_levels == 2
    assert coarse_levels(grid_levels(2, 16, 19, 16, 1.5), 2 * 2) == 3
    assert coarse_levels(grid_levels(3, 16, 19, 16, 1.5), 2 * 2) == 0
    # used where the atomics it removes exceed 1.5 x the ones its groups add (H200: 3D 2^14 slower with it)
    grid2, grid3 = grid_levels(2, 16, 19, 16, 1.5)[:4], grid_levels(3, 16, 19, 16, 1.5)[:1]
    assert coarse_kernel_pays(2**14, 2, 32, grid2, 2) and coarse_kernel_pays(2**18, 3, 264, grid3, 2)
    assert not coarse_kernel_pays(2**14, 3, 32, grid3, 2) and not coarse_kernel_pays(10**6, 2, 1, [], 2)


def test_coarse_kernel_sizes_match_the_slang_source():
    # the host sizes the kernel's groups and chooses its levels from these; the kernel declares them
    import re

    from sopt.runtime.device import slang_lib_path

    text = (slang_lib_path() / "nn" / "hashgrid.slang").read_text(encoding="utf-8")
    declared = dict(re.findall(r"static const int (COARSE_\w+) = (\d+);", text))
    assert declared == {"COARSE_THREADS": str(COARSE_THREADS), "COARSE_FLOATS": str(COARSE_FLOATS)}


def assert_table_gradient_matches_float64(enc: HashGridEncoding, x: np.ndarray, dy: np.ndarray) -> None:
    """Forward x, backward dy (x without a gradient): dL/dtable within 1e-4 of the float64 reference's."""
    y = enc(x)
    y.grad.copy_from_numpy(dy)
    enc.backward(x, y)
    _, _, rtable = ref_hashgrid(x, enc.table.numpy(), enc.levels, dy.astype(np.float64))
    np.testing.assert_allclose(enc.table.grad_numpy(), rtable, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", ["2d", "3d"])
def test_table_gradient_of_many_samples_without_dx(grids, name):
    # 3000 samples: several groups of the coarse kernel, each thread several samples; x without a gradient, so
    # hashgrid_backprop skips the coarse levels altogether
    enc = grids[name]
    assert enc.coarse_levels >= 1
    assert coarse_kernel_pays(3000, enc.in_dims, 6, enc.levels[:enc.coarse_levels], enc.n_features)   # 6 groups
    rng = np.random.default_rng(5)
    x = rng.uniform(0, 1, size=(3000, enc.in_dims)).astype(np.float32)
    dy = rng.normal(size=(3000, enc.out_features)).astype(np.float32)
    enc.table.zero_grad()
    assert_table_gradient_matches_float64(enc, x, dy)
    enc.table.zero_grad()


def test_sixteen_level_grid_trains_on_every_backend():
    # 16 levels, 2000 samples (the coarse kernel pays): issue 21's level count, against float64
    enc = HashGridEncoding(2, n_levels=16, n_features=2, log2_table_size=8, base_resolution=2, per_level_scale=1.3,
                           seed=1)
    enc.table.load(np.random.default_rng(9).normal(size=enc.table.shape))
    assert enc.coarse_levels >= 1
    rng = np.random.default_rng(10)
    x = rng.uniform(0, 1, size=(2000, 2)).astype(np.float32)
    dy = rng.normal(size=(2000, enc.out_features)).astype(np.float32)
    assert_table_gradient_matches_float64(enc, x, dy)


def test_coarse_kernels_with_sixteen_levels():
    # the coarse kernels' arguments hold only the coarse levels, at most COARSE_MAX_LEVELS: with all 16 levels they
    # took 288 bytes of push constants, over Vulkan's 256, and failed to link there. A 64-row table: levels 0-14 dense
    rng = np.random.default_rng(11)
    x = rng.uniform(0, 1, size=(3000, 2)).astype(np.float32)
    dy = rng.normal(size=(3000, 32)).astype(np.float32)
    for deterministic in (False, True):
        enc = HashGridEncoding(2, n_levels=16, log2_table_size=6, base_resolution=2, per_level_scale=1.1, seed=1,
                               deterministic=deterministic)
        assert [lv.hashed for lv in enc.levels].index(True) == 15 and enc.coarse_levels == COARSE_MAX_LEVELS == 8
        assert_table_gradient_matches_float64(enc, x, dy)


def test_table_initialised_like_tcnn():
    enc = HashGridEncoding(3, n_levels=4, log2_table_size=10, seed=5)
    t = enc.table.numpy()
    assert np.abs(t).max() <= 1e-4 and np.abs(t).max() > 0.9e-4
    np.testing.assert_array_equal(t, HashGridEncoding(3, n_levels=4, log2_table_size=10, seed=5).table.numpy())
    assert not np.array_equal(t, HashGridEncoding(3, n_levels=4, log2_table_size=10, seed=6).table.numpy())
    assert [n for n, _ in enc.named_parameters()] == ["table"]


def test_rejects_bad_configuration():
    with pytest.raises(ValueError, match="in_dims must be <= 4"):
        HashGridEncoding(5)
    with pytest.raises(ValueError, match="per_level_scale"):
        HashGridEncoding(2, per_level_scale=0.5)
    with pytest.raises(ValueError, match="n_levels"):
        HashGridEncoding(2, n_levels=0)


def _train_deterministic_grid(steps: int = 3):
    """(first step's table gradient, x, dy, table before it, final table) of a few Adam steps, 2000 samples."""
    import sopt

    enc = HashGridEncoding(**CONFIGS["2d"], seed=1, deterministic=True)
    enc.table.load(np.random.default_rng(7).normal(size=enc.table.shape))
    rng = np.random.default_rng(8)
    x = rng.uniform(0, 1, size=(2000, 2)).astype(np.float32)
    target = rng.normal(size=(2000, enc.out_features)).astype(np.float32)
    opt = sopt.optim.Adam(enc.parameters(), lr=1e-2)
    first = None
    for step in range(steps):
        y = enc(x)
        dy = (2 * (y.to_numpy() - target) / target.size).astype(np.float32)
        y.grad.copy_from_numpy(dy)
        enc.backward(x, y)
        if step == 0:
            first = (enc.table.grad_numpy(), x, dy, enc.table.numpy())
        opt.step()
    return first, enc.table.numpy(), enc


def test_deterministic_mode_is_bit_identical_and_correct():
    (g, x, dy, t0), final, enc = _train_deterministic_grid()
    _, _, rtable = ref_hashgrid(x, t0, enc.levels, dy.astype(np.float64))
    assert np.abs(rtable).max() > 1e-4
    # fixed point: each term off by < N M 2^-62, then one float32 rounding of the sum
    np.testing.assert_allclose(g, rtable, rtol=2e-6, atol=2e-6 * np.abs(rtable).max())  # float32 weights
    (g2, _, _, _), final2, _ = _train_deterministic_grid()
    assert np.array_equal(g.view(np.uint32), g2.view(np.uint32))
    assert np.array_equal(final.view(np.uint32), final2.view(np.uint32))
    assert not np.array_equal(final, t0)


def test_deterministic_coarse_kernel_gives_the_same_bits():
    # 3000 samples: hashgrid_coarse_fixed_backprop_kernel takes levels 0-1 (6 groups). Its int64 group sums add the
    # same integers as hashgrid_backprop's own atomics, so the table gradient must equal, bit for bit, the one
    # with the kernel off (coarse_levels = 0), and dL/dx must not change either
    from sopt.runtime.device import dispatch_count

    rng = np.random.default_rng(10)
    x = rng.uniform(0, 1, size=(3000, 2)).astype(np.float32)
    dy = rng.normal(size=(3000, 6)).astype(np.float32)
    # levels 0-1 get dL/dy 2^-40 times level 2's: with S = 61 - 12 - floor(log2 M) (N < 2^12, M ~ 4) their terms
    # are ~2^8 units 2^-S and their sums below 2^24, exact in float32: one unit more or less in a sum changes the bits
    dy[:, :4] *= 2.0**-40
    table = np.random.default_rng(7).normal(size=(120, 2))

    def run(coarse: bool, want_dx: bool) -> tuple[np.ndarray, np.ndarray | None, int]:
        """(dL/dtable, dL/dx or None, dispatches of the backward)"""
        enc = HashGridEncoding(**CONFIGS["2d"], seed=1, deterministic=True)
        enc.table.load(table)
        assert enc.coarse_levels == 2 and coarse_kernel_pays(3000, 2, 6, enc.levels[:2], 2)
        if not coarse:
            enc.coarse_levels = 0
        if want_dx:
            before = dispatch_count()
            _, dx, grads = vjp(enc, x, dy)
            return grads["table"], dx, dispatch_count() - before - 1   # less the forward
        y = enc(x)
        y.grad.copy_from_numpy(dy)
        before = dispatch_count()
        enc.backward(x, y)
        return enc.table.grad_numpy(), None, dispatch_count() - before

    g, dx, dispatches = run(True, True)
    g2, dx2, _ = run(True, True)
    g_off, dx_off, dispatches_off = run(False, True)
    g_no_dx, _, _ = run(True, False)
    assert (dispatches, dispatches_off) == (4, 3)   # grad max, coarse kernel, backprop, conversion
    bits = g.view(np.uint32)
    for other in (g2, g_off, g_no_dx):
        assert np.array_equal(bits, other.view(np.uint32))
    assert np.array_equal(dx.view(np.uint32), dx2.view(np.uint32))
    assert np.array_equal(dx.view(np.uint32), dx_off.view(np.uint32))
    _, rdx, rtable = ref_hashgrid(x, table.astype(np.float32), HashGridEncoding(**CONFIGS["2d"]).levels,
                                  dy.astype(np.float64))
    unit = 2.0 ** -(61 - 12 - np.floor(np.log2(np.abs(dy).max())))   # 2^-S
    assert 2**22 > np.abs(rtable[:56]).max() / unit > 2**12   # coarse rows: sums of levels 0-1, exact in float32
    np.testing.assert_allclose(g, rtable, rtol=2e-6, atol=2e-6 * np.abs(rtable).max())
    # the coarse rows on their own scale: each of their <= 3000 terms is rounded by at most half a unit
    np.testing.assert_allclose(g[:56], rtable[:56], rtol=0, atol=unit * 1500)
    np.testing.assert_allclose(dx, rdx, rtol=1e-4, atol=1e-3)


def test_deterministic_gradients_accumulate_and_report_nonfinite(grids):
    enc = HashGridEncoding(**CONFIGS["3d"], seed=1, deterministic=True)
    enc.table.load(grids["3d"].table.numpy())
    rng = np.random.default_rng(9)
    x = rng.uniform(0, 1, size=(300, 3)).astype(np.float32)
    dy = rng.normal(size=(300, enc.out_features)).astype(np.float32) * 1e-3
    _, _, rtable = ref_hashgrid(x, enc.table.numpy(), enc.levels, dy.astype(np.float64))
    y = enc(x)
    for _ in range(3):   # the M slots alternate between calls; each call adds its own sum
        y.grad.copy_from_numpy(dy)
        enc.backward(x, y)
    np.testing.assert_allclose(enc.table.grad_numpy(), 3 * rtable, rtol=1e-5, atol=3e-6 * np.abs(rtable).max())
    dy[5, 1] = np.inf
    enc.table.zero_grad()
    y.grad.copy_from_numpy(dy)
    enc.backward(x, y)
    assert not np.isfinite(enc.table.grad_numpy()).any()
    dy[5, 1] = 0.5   # and the next call is finite and right again (no leftover sums)
    enc.table.zero_grad()
    y.grad.copy_from_numpy(dy)
    enc.backward(x, y)
    _, _, rtable = ref_hashgrid(x, enc.table.numpy(), enc.levels, dy.astype(np.float64))
    np.testing.assert_allclose(enc.table.grad_numpy(), rtable, rtol=1e-5, atol=1e-6 * np.abs(rtable).max())
    with pytest.raises(ValueError, match="HashGridEncoding deterministic must be True or False"):
        HashGridEncoding(2, deterministic="yes")


def _half_sum_error_bound(x, dy, enc):
    """A float16 sum's error bound per table entry: the rounding of each term and of each of a row's additions is
    at most 2^-11 of the row's sum of |terms| (the corner weights are >= 0, so the reference with |dL/dy| gives
    it); 16 of them bound the rows these tests fill (tens of terms, rounding errors of either sign)."""
    _, _, abs_terms = ref_hashgrid(x, enc.table.numpy(), enc.levels, np.abs(dy).astype(np.float64))
    return 16 * 2.0**-11 * abs_terms


@pytest.mark.parametrize("name", ["2d", "3d"])
def test_float16_sums_match_float64_within_half_rounding(grids, name):
    # 3000 samples: the coarse kernel takes the dense levels in float32, the others are float16 pairs
    enc = HashGridEncoding(**CONFIGS[name], seed=1, gradient_precision="float16")
    enc.table.load(grids[name].table.numpy())
    rng = np.random.default_rng(11)
    x = rng.uniform(0, 1, size=(3000, enc.in_dims)).astype(np.float32)
    dy = rng.normal(size=(3000, enc.out_features)).astype(np.float32) * 1e-3   # small |dL/dy|: S scales it up
    _, rdx, rtable = ref_hashgrid(x, enc.table.numpy(), enc.levels, dy.astype(np.float64))
    bound = _half_sum_error_bound(x, dy, enc)
    _, dx, grads = vjp(enc, x, dy)
    err = np.abs(grads["table"] - rtable)
    assert (err <= bound + 1e-12).all(), float((err / (bound + 1e-12)).max())
    # and not float32's accuracy: the hashed rows really are summed in half precision
    hashed = np.concatenate([np.arange(lv.offset, lv.offset + lv.size) for lv in enc.levels if lv.hashed])
    assert err[hashed].max() > 1e-6 * np.abs(rtable[hashed]).max()
    # two backward calls add two sums (the M slots alternate; the first leaves no sums behind)
    y = enc(x)
    for _ in range(2):
        y.grad.copy_from_numpy(dy)
        enc.backward(x, y)
    err = np.abs(enc.table.grad_numpy() - 2 * rtable)
    assert (err <= 2 * bound + 1e-12).all(), float((err / (2 * bound + 1e-12)).max())
    enc.table.zero_grad()
    np.testing.assert_allclose(dx, rdx, rtol=1e-4, atol=1e-3)


def test_float16_sums_clip_an_overflowed_entry_and_report_nonfinite(grids):
    # every sample at one point: the finest level's rows get 4000 terms each, far more than half_shift_base's
    # estimate from a uniform spread, so their float16 sums overflow and are clipped to +-65504 * 2^-S
    enc = HashGridEncoding(**CONFIGS["2d"], seed=1, gradient_precision="float16")
    enc.table.load(grids["2d"].table.numpy())
    x = np.full((4000, 2), 0.3, np.float32)
    dy = np.ones((4000, enc.out_features), np.float32)
    q = half_shift_base(enc.levels, enc.coarse_levels, 4000, 2)   # the coarse kernel takes the dense levels
    g = vjp(enc, x, dy)[2]["table"]
    assert np.isfinite(g).all()
    top = enc.levels[-1]
    fine = g[top.offset:top.offset + top.size]
    clip = 65504.0 * 2.0**-q   # S = q - floor(log2 1) = q
    assert np.isclose(fine.max(), clip, rtol=1e-6)
    _, _, rtable = ref_hashgrid(x, enc.table.numpy(), enc.levels, dy.astype(np.float64))
    assert rtable[top.offset:top.offset + top.size].max() > 1.2 * clip   # the true sum was larger
    dy[7, 3] = np.nan
    enc.table.zero_grad()
    y = enc(x)
    y.grad.copy_from_numpy(dy)
    enc.backward(x, y)
    assert np.isnan(enc.table.grad_numpy()).all()
    enc.table.zero_grad()


def test_float16_sums_refuse_what_they_cannot_do():
    with pytest.raises(ValueError, match="n_features must be even, got 1"):
        HashGridEncoding(**CONFIGS["3d_f1"], gradient_precision="float16")
    with pytest.raises(ValueError, match="cannot be deterministic"):
        HashGridEncoding(2, deterministic=True, gradient_precision="float16")
    with pytest.raises(ValueError, match="gradient_precision must be 'float32' or 'float16', got 'half'"):
        HashGridEncoding(2, gradient_precision="half")


def test_half_shift_base_keeps_the_busiest_level_under_float16():
    levels = grid_levels(3, 16, 19, 16, 1.5)
    # 2^18 samples, 8 corners, 2^19-row levels: mean hits 4 -> C = 32 -> q = 10
    assert half_shift_base(levels, 4, 2**18, 3) == 15 - 5
    # from level 0 (16^3 = 4096 rows): mean hits 512 -> C = 2064 -> q = 3
    assert half_shift_base(levels, 0, 2**18, 3) == 15 - 12
    assert half_shift_base(levels, 0, 2**36, 3) == -14   # clamped: the largest term stays a normal float16
    assert half_shift_base(levels, 15, 1, 3) == 15 - 5   # C just above 16


def test_float16_sums_from_a_config_and_back():
    from sopt.nn.hashgrid import HashGridConfig
    config = HashGridConfig(n_levels=4, log2_hashmap_size=8, gradient_precision="float16")
    enc = HashGridEncoding.from_config(config, 3)
    assert enc.gradient_precision == "float16" and enc.to_config() == config
    assert "gradient_precision='float16'" in repr(enc)


def test_every_mode_records_only_bound_kernels(grids, monkeypatch):
    # forward and backward are compute kernels bound once per encoding: no SlangPy function call (sopt.runtime.kernel._run,
    # ~110 us of host time each) in any mode; 3000 samples, so the coarse kernels run too
    import sopt.runtime.kernel
    from sopt.runtime.device import dispatch_count

    def no_function_calls(*args, **kwargs):
        raise AssertionError("a SlangPy function call in HashGridEncoding")

    rng = np.random.default_rng(12)
    x = rng.uniform(0, 1, size=(3000, 2)).astype(np.float32)
    dy = rng.normal(size=(3000, 6)).astype(np.float32)
    encs = [HashGridEncoding(**CONFIGS["2d"], seed=1, **kw)
            for kw in ({}, {"deterministic": True}, {"gradient_precision": "float16"})]
    monkeypatch.setattr(sopt.runtime.kernel, "_run", no_function_calls)
    counts = []
    for enc in encs:
        before = dispatch_count()
        y = enc(x)
        y.grad.copy_from_numpy(dy)
        enc.backward(x, y)
        counts.append(dispatch_count() - before)
    # forward + (coarse, backward); + (grad max, coarse, backward, conversion) in the other two
    assert counts == [3, 5, 5]
    monkeypatch.undo()
    _, _, rtable = ref_hashgrid(x, encs[0].table.numpy(), encs[0].levels, dy.astype(np.float64))
    np.testing.assert_allclose(encs[0].table.grad_numpy(), rtable, rtol=1e-4, atol=1e-4)


def test_strided_x_is_read_and_its_gradient_written(grids):
    # x as a transposed view (row stride 1, column stride N): the kernels read x at x_off + n x_row + d x_col (the
    # coarse kernel, which needs contiguous rows, stands aside) and write dL/dx into x's own gradient tensor
    import slangpy as spy
    from slangpy.slangpy import Shape

    from sopt.runtime.device import get_device

    enc = grids["2d"]
    rng = np.random.default_rng(13)
    n = 3000
    x = rng.uniform(0, 1, size=(n, 2)).astype(np.float32)
    dy = rng.normal(size=(n, enc.out_features)).astype(np.float32)
    storage = spy.Tensor.from_numpy(get_device(), np.concatenate([np.zeros(7, np.float32), x.T.ravel()]))
    ry, rdx, rtable = ref_hashgrid(x, enc.table.numpy(), enc.levels, dy.astype(np.float64))
    shifted = storage.view(Shape((n, 2)), Shape((1, n)), 7)   # from element 7 of its buffer
    np.testing.assert_allclose(enc(shifted).to_numpy(), ry, rtol=1e-5, atol=1e-5)
    # with a gradient (from offset 0: slangpy's with_grads gives a view's gradient the view's offset in a buffer
    # only the view's size)
    xt = spy.Tensor.from_numpy(get_device(), x.T.copy()).view(Shape((n, 2)), Shape((1, n)), 0).with_grads(zero=True)
    assert xt.strides.as_tuple() == (1, n)
    enc.table.zero_grad()
    y = enc(xt)
    np.testing.assert_allclose(y.to_numpy(), ry, rtol=1e-5, atol=1e-5)
    y.grad.copy_from_numpy(dy)
    enc.backward(xt, y)
    np.testing.assert_allclose(xt.grad.to_numpy(), rdx, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(enc.table.grad_numpy(), rtable, rtol=1e-4, atol=1e-4)
    enc.table.zero_grad()


class _ReadsColumns(IdentityEncoding):
    """An identity that asks for a column-major input (TensorCoreMLP does, but runs on CUDA only)."""
    preferred_input_layout = "column_major"


@pytest.mark.parametrize("name,mode", [("2d", "float32"), ("3d", "float16"), ("2d", "deterministic")])
def test_column_major_output_and_gradient(grids, name, mode):
    # an encoding before a module that reads columns (as TensorCoreMLP) writes y[n, j] at j N + n; the backward
    # reads dL/dy so (one level per thread group), and the table gradient and dL/dx are the row-major ones
    kw = {"deterministic": True} if mode == "deterministic" else {"gradient_precision": mode}
    enc = HashGridEncoding(**CONFIGS[name], seed=1, **kw)
    enc.table.load(grids[name].table.numpy())
    seq = Sequential(enc, _ReadsColumns(enc.out_features))
    assert enc.output_layout == "column_major" and seq.preferred_input_layout == "row_major"
    rng = np.random.default_rng(17)
    n = 3000   # several groups of the coarse kernel, which reads the columns too
    x = rng.uniform(0, 1, size=(n, enc.in_dims)).astype(np.float32)
    dy = rng.normal(size=(n, enc.out_features)).astype(np.float32)
    ry, rdx, rtable = ref_hashgrid(x, enc.table.numpy(), enc.levels, dy.astype(np.float64))
    y = enc(x)
    ld = column_stride(n)   # columns 32 floats apart at least: not a power of two
    assert ld > n and y.strides.as_tuple() == (1, ld) and y.grad.strides.as_tuple() == (1, ld)
    np.testing.assert_allclose(y.to_numpy(), ry, rtol=1e-5, atol=1e-5)
    if mode == "float16":
        bound = _half_sum_error_bound(x, dy, enc) + 1e-12
    else:
        bound = 1e-4 + 1e-4 * np.abs(rtable)
    for want_dx in (False, True):   # without dL/dx: one level per group; with it: one thread per sample
        _, dx, grads = vjp(seq, x, dy) if want_dx else (None, None, None)
        if not want_dx:
            enc.table.zero_grad()
            y = enc(x)
            write_batch(y.grad, dy)
            enc.backward(x, y)
            grads = {"0.table": enc.table.grad_numpy()}
            enc.table.zero_grad()
        assert (np.abs(grads["0.table"] - rtable) <= bound).all()
        if want_dx:
            np.testing.assert_allclose(dx, rdx, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("off,rows,width,stride", [(0, 512, 32, 32), (5, 143, 7, 7), (3, 10, 7, 9), (2, 3001, 16, 16),
                                                   (1, 1, 3, 3)])
def test_grad_max_pass_reads_exactly_the_rows(off, rows, width, stride):
    # pass 1's M = max |dL/dy| over rows x width floats from `off`, `stride` apart (gap-free rows read as one run of
    # floats): the floats outside them (larger) must not count
    import slangpy as spy

    from sopt.runtime.device import get_device
    from sopt.nn.hashgrid import GRAD_MAX_PER_THREAD

    enc = HashGridEncoding(2, n_levels=2, log2_table_size=6, gradient_precision="float16")
    fixed = enc._fixed_buffer()
    max_kernel, _ = enc._bind_fixed_kernels(fixed)
    rng = np.random.default_rng(off + rows)
    data = np.full(off + rows * stride + 8, 1e6, np.float32)   # outside the rows: larger than anything inside
    inside = rng.uniform(-2.0, 2.0, (rows, width)).astype(np.float32)
    inside.flat[rng.integers(inside.size)] = -7.5   # the largest magnitude, negative
    for r in range(rows):
        data[off + r * stride: off + r * stride + width] = inside[r]
    values = spy.Tensor.from_numpy(get_device(), data)
    fixed.copy_from_numpy(np.zeros(fixed.size, np.uint8))
    max_kernel.set_members("call", values=values.storage, off=off, stride=stride, width=width, count=rows * width,
                           max_at=4).dispatch(-(-rows * width // GRAD_MAX_PER_THREAD), None)
    words = fixed.to_numpy().view(np.uint32)
    assert words[1].view(np.float32) == 7.5 and words[0] == 0
