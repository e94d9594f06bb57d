"""HashGridEncoding: tcnn's level layout, forward and backward against a numpy reference (dense and hashed
levels, 2D and 3D), gradcheck away from cell faces, initialisation."""

from __future__ import annotations

import numpy as np
import pytest

from sopt.nn import HashGridEncoding, gradcheck, vjp
from sopt.nn.hashgrid import grid_levels
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
