"""A batch split over processes: each part is its rows of the batch one process draws (same seed and step), so the
parts put together are that batch; a batch that does not split evenly, or a config without one, is refused."""

from __future__ import annotations

import types

import numpy as np
import pytest

from sopt.distributed.splittable import check_splittable
from sopt.train import BatchSampler
from sopt.train.batch_sampler import reference_indices


def _dataset(n_rows: int) -> tuple[np.ndarray, np.ndarray]:
    rows = np.arange(n_rows, dtype=np.float32)[:, None]
    return np.hstack([rows, rows * 0.5]), -rows


@pytest.mark.parametrize("world_size", [2, 3])
def test_the_parts_of_a_split_batch_put_together_are_the_whole_batch(world_size: int) -> None:
    x, y = _dataset(101)
    whole = BatchSampler(x, y, batch_size=48, seed=9)
    parts = []
    for rank in range(world_size):
        sampler = BatchSampler(x, y, batch_size=48, seed=9)
        sampler.split(rank, world_size)
        assert sampler.batch_size == 48 // world_size and sampler.first_row == rank * (48 // world_size)
        parts.append(sampler)
    for step in (0, 7):
        batch = whole.sample(step)
        drawn = [p.sample(step) for p in parts]
        np.testing.assert_array_equal(np.concatenate([d.inputs.to_numpy() for d in drawn]), batch.inputs.to_numpy())
        np.testing.assert_array_equal(np.concatenate([d.targets.to_numpy() for d in drawn]), batch.targets.to_numpy())
        np.testing.assert_array_equal(parts[-1].indices.to_numpy(),
                                      reference_indices(9, step, 48 // world_size, 101, first_row=48 - 48 // world_size))


def test_a_batch_that_does_not_split_evenly_is_refused_and_nothing_changes() -> None:
    sampler = BatchSampler(*_dataset(10), batch_size=10, seed=0)
    with pytest.raises(ValueError, match="batch_size 10 does not split evenly over 3 processes"):
        sampler.split(0, 3)
    with pytest.raises(ValueError, match=r"rank must be in \[0, 2\)"):
        sampler.split(2, 2)
    assert sampler.batch_size == 10 and sampler.first_row == 0 and sampler.batch.inputs.shape == (10, 2)
    sampler.split(1, 2)
    with pytest.raises(ValueError, match="split already"):
        sampler.split(0, 2)


def test_check_splittable_names_the_problem_or_the_batch() -> None:
    check_splittable("fit_projectile", types.SimpleNamespace(), 1)   # one process: anything goes
    check_splittable("neural_field_image", types.SimpleNamespace(batch_size=2048), 4)
    with pytest.raises(ValueError, match="problem 'fit_projectile' cannot be trained on 2 processes"):
        check_splittable("fit_projectile", types.SimpleNamespace(steps=3), 2)
    with pytest.raises(ValueError, match=r"batch_size=1001 does not split evenly over 2 processes: give a multiple "
                                         r"of 2 \(e.g. 1000 or 1002\)"):
        check_splittable("neural_field_image", types.SimpleNamespace(batch_size=1001), 2)
