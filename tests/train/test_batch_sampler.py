"""The GPU batch sampler: indices in range and equal to the documented hash, gathered rows match, seeded
reproducibility, and a roughly uniform draw."""

from __future__ import annotations

import numpy as np
import pytest

from sopt.train import BatchSampler
from sopt.train.batch_sampler import reference_indices


def _dataset(n_rows: int, in_dim: int = 2, out_dim: int = 3) -> tuple[np.ndarray, np.ndarray]:
    rows = np.arange(n_rows, dtype=np.float32)[:, None]
    return rows * 10 + np.arange(in_dim, dtype=np.float32), -rows - 0.25 * np.arange(out_dim, dtype=np.float32)


def test_indices_in_range_match_reference_and_rows_are_gathered() -> None:
    x, y = _dataset(37)
    sampler = BatchSampler(x, y, batch_size=300, seed=12345)
    for step in (0, 1, 999):
        batch = sampler.sample(step)
        indices = sampler.indices.to_numpy()
        assert indices.min() >= 0 and indices.max() < 37
        np.testing.assert_array_equal(indices, reference_indices(12345, step, 300, 37))
        np.testing.assert_array_equal(batch.inputs.to_numpy(), x[indices])
        np.testing.assert_array_equal(batch.targets.to_numpy(), y[indices])


def test_seeded_draws_are_reproducible_and_differ_across_seeds_and_steps() -> None:
    x, y = _dataset(1000, 1, 1)
    draws = {}
    for seed in (0, 0, 1):
        sampler = BatchSampler(x, y, batch_size=64, seed=seed)
        draws.setdefault(seed, []).append([sampler.sample(s).inputs.to_numpy().copy() for s in range(3)])
    np.testing.assert_array_equal(np.array(draws[0][0]), np.array(draws[0][1]))   # same seed: same batches
    assert not np.array_equal(np.array(draws[0][0]), np.array(draws[1][0]))       # other seed: other batches
    assert not np.array_equal(draws[0][0][0], draws[0][0][1])                      # consecutive steps differ


def test_draw_is_roughly_uniform() -> None:
    n_rows, batch, steps = 16, 4096, 8
    sampler = BatchSampler(*_dataset(n_rows, 1, 1), batch_size=batch, seed=7)
    counts = np.zeros(n_rows)
    for step in range(steps):
        sampler.sample(step)
        counts += np.bincount(sampler.indices.to_numpy(), minlength=n_rows)
    expected = batch * steps / n_rows
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    # 15 degrees of freedom: P(chi2 > 40) ~ 5e-4 for a uniform draw; a biased draw (e.g. all in one half,
    # or a modulo bug) lands in the thousands.
    assert chi2 < 40.0, (chi2, counts)


def test_large_row_counts_cover_the_whole_range() -> None:
    # Lemire's multiply-shift must reach the top rows too (a 16-bit or modulo bug would not).
    n_rows = 3_000_000
    indices = reference_indices(3, 0, 20000, n_rows)
    assert indices.max() > 0.99 * n_rows and indices.min() < 0.01 * n_rows
    x = np.zeros((n_rows, 1), np.float32)
    sampler = BatchSampler(x, x, batch_size=20000, seed=3)
    sampler.sample(0)
    np.testing.assert_array_equal(sampler.indices.to_numpy(), indices)


@pytest.mark.parametrize("kwargs, match", [
    (dict(batch_size=0), "batch_size must be >= 1"),
    (dict(batch_size=8.0), "batch_size must be an integer"),
    (dict(batch_size=8, seed=-1), "seed must be >= 0"),
    (dict(batch_size=8, seed=2**32), r"seed must be in \[0, 2\*\*32\)"),
])
def test_bad_sampler_arguments(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        BatchSampler(*_dataset(10), **kwargs)
