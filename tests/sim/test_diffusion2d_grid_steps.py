"""Diffusion2D.steps through the grid-barrier kernels (sopt/sim/diffusion2d_grid_steps.py): the final field and
every gradient against n recorded calls of step, with one group on any device and several on CUDA; eager use;
the automatic choice; bad layouts."""

from __future__ import annotations

import numpy as np
import pytest

from sopt.runtime import device as dev
from sopt.sim.diffusion2d_grid_steps import GRID_MIN_CELLS, layout
from sopt.sim.grid_barrier import max_groups
from tests.sim.fields_reference import BOUNDARIES
from tests.sim.test_diffusion2d_steps import SHAPE, assert_steps_equal_n_steps, make, problem

cuda_only = pytest.mark.skipif("dev.device_kind() != 'cuda'", reason="several thread groups need CUDA")


def compare(shape: tuple[int, int], case: str, boundary: str, n: int, grid_layout: tuple[int, int]) -> None:
    p = problem(shape, 1)
    sim, params = make(p, case, boundary)
    sim.grid_steps.layout = grid_layout
    assert sim.grid_steps.fits()
    assert_steps_equal_n_steps(p, sim, params, n)


@pytest.mark.parametrize("n", [1, 2, 9])
@pytest.mark.parametrize("boundary", BOUNDARIES)
@pytest.mark.parametrize("case", ["fields", "shared", "shared_const_u0", "u0_only"])
def test_one_group_equals_n_steps(n, boundary, case):
    """20 x 24 cells on one group of 512 threads, one cell each (the last 32 threads have none)."""
    compare(SHAPE, case, boundary, n, (1, 1))


def test_eight_cells_per_thread():
    """1800 cells on one group of 512 threads: four cells per thread (i, i + 512, ...; some past the grid), and
    eight."""
    compare((40, 45), "fields", "dirichlet", 5, (1, 4))
    compare((40, 45), "shared", "insulated", 3, (1, 8))


@cuda_only
@pytest.mark.parametrize("grid_layout", [(1, 1), (2, 1), (3, 2)])
@pytest.mark.parametrize("case", ["fields", "shared"])
def test_several_groups_equal_n_steps(grid_layout, case):
    """Several groups meeting at the grid barrier every step; shared gradients summed over the groups."""
    compare(SHAPE, case, "dirichlet", 9, grid_layout)


def test_eager_steps_equal_steps():
    """Outside a tape two fields serve every step (a ping-pong)."""
    p = problem(SHAPE, 3)
    sim, _ = make(p, "fields", "insulated")
    want = sim.initial_state()
    for _ in range(7):
        want = sim.step(want)
    sim.grid_steps.layout = (1, 1)
    got = sim.steps(sim.initial_state(), 7)
    np.testing.assert_allclose(got.u.to_numpy(), want.u.to_numpy(), rtol=1e-5, atol=1e-6)


def test_automatic_choice():
    most = max_groups()
    assert layout(GRID_MIN_CELLS - 1, most) is None and layout(10**9, most) is None
    if dev.device_kind() == "cuda":
        assert most is not None and layout(512 * 512, most) == (-(-512 * 512 // 2048), 4)
        assert layout(GRID_MIN_CELLS, most) == (GRID_MIN_CELLS // 512, 1) and layout(64 * 64 - 1, most) is None
    else:
        assert most is None and layout(512 * 512, most) is None


def test_bad_layout_raises():
    p = problem(SHAPE, 1)
    sim, _ = make(p, "fields", "dirichlet")
    most = max_groups() or 1
    for bad in [(1, 3), (most + 1, 8)]:
        sim.grid_steps.layout = bad
        with pytest.raises(ValueError, match=r"Diffusion2DGridSteps layout .*needs cells per thread in \(1, 2, 4, 8\)"):
            sim.steps(sim.initial_state(), 2)
