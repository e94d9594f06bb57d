"""neural_sdf's training points (neural_sdf.slang's sample_points through SDFSampler): the uniform share's moments,
surface points on the surface and spread by area, near points' signed distances ~ N(0, near_sigma^2), the pool's
signed distances equal to MeshTruth's, and draws that are pure functions of (seed, round) so a resumed sampler gives
the same batches."""

from __future__ import annotations

import numpy as np
import pytest

from problems.neural_sdf.mesh import read_mesh, to_unit_box
from problems.neural_sdf.sampler import SDFSampler
from problems.neural_sdf.truth import MeshTruth

POOL, UNIFORM, SURFACE, SIGMA = 8192, 2048, 2048, 0.005


@pytest.fixture(scope="module")
def truth() -> MeshTruth:
    return MeshTruth(to_unit_box(read_mesh(None), 0.1).triangles)


def test_the_pool_s_shares_have_their_distributions(truth: MeshTruth) -> None:
    sampler = SDFSampler(truth, POOL, 256, UNIFORM, SURFACE, SIGMA, seed=4)
    sampler.draw_pool(0)
    points, sdf = sampler.points.to_numpy(), sampler.sdf.to_numpy()[:, 0]
    uniform, surface, near = points[:UNIFORM], points[UNIFORM:UNIFORM + SURFACE], points[UNIFORM + SURFACE:]
    # U(0, 1)^3: mean 1/2 and variance 1/12 per coordinate, within 4 standard errors
    assert np.abs(uniform.mean(0) - 0.5).max() < 4 * np.sqrt(1 / 12 / UNIFORM)
    assert np.abs(uniform.var(0) - 1 / 12).max() < 4 * np.sqrt(1 / 180 / UNIFORM)
    assert np.abs(sdf[UNIFORM:UNIFORM + SURFACE]).max() < 2e-6                      # on the surface
    near_sdf = sdf[UNIFORM + SURFACE:]
    n = len(near_sdf)
    # a smooth surface seen at 0.005: the signed distance is the offset's normal component, N(0, sigma^2)
    assert abs(near_sdf.mean()) < 4 * SIGMA / np.sqrt(n)
    assert near_sdf.std() == pytest.approx(SIGMA, rel=0.06)
    assert np.abs(near - np.clip(near, 0.0, 1.0)).max() == 0.0
    # the pool's signed distances are MeshTruth's of its points
    np.testing.assert_array_equal(sdf, truth.signed_distance(points).sdf)


def test_surface_points_follow_the_triangles_areas() -> None:
    """Two triangles of areas 1 : 3: a quarter of the surface points on the first."""
    triangles = np.array([[[0.1, 0.1, 0.2], [0.5, 0.1, 0.2], [0.1, 0.5, 0.2]],
                          [[0.1, 0.1, 0.7], [0.9, 0.1, 0.7], [0.1, 0.7, 0.7]]], np.float32)
    sampler = SDFSampler(MeshTruth(triangles), 4096, 64, 0, 4096, SIGMA, seed=0)
    sampler.draw_pool(0)
    points = sampler.points.to_numpy()
    first = np.isclose(points[:, 2], 0.2)
    assert (first | np.isclose(points[:, 2], 0.7)).all()
    assert first.mean() == pytest.approx(0.25, abs=4 * np.sqrt(0.25 * 0.75 / 4096))
    lower = points[first]
    assert (lower[:, 0] >= 0.1 - 1e-6).all() and (lower[:, 1] >= 0.1 - 1e-6).all()
    assert (lower[:, 0] + lower[:, 1] <= 0.6 + 1e-6).all()
    # uniform on the triangle: its centroid (0.2333, 0.2333) on average
    np.testing.assert_allclose(lower[:, :2].mean(0), 0.7 / 3, atol=4 * 0.085 / np.sqrt(len(lower)))


def test_rounds_are_pure_functions_of_seed_and_round_and_resume_draws_the_same_batches(truth: MeshTruth) -> None:
    def run(steps: range, sampler: SDFSampler) -> list[np.ndarray]:
        return [np.concatenate([b.to_numpy() for b in sampler.sample(s)], axis=1) for s in steps]

    make = lambda: SDFSampler(truth, 512, 64, 128, 128, 0.02, resample_every=3, seed=9)   # noqa: E731
    whole = run(range(8), make())
    resumed = run(range(4, 8), make())   # a new process at step 4: round 1's pool redrawn
    for a, b in zip(whole[4:], resumed):
        np.testing.assert_array_equal(a, b)
    sampler = make()
    sampler.draw_pool(0)
    first = sampler.points.to_numpy()
    sampler.draw_pool(1)
    assert not np.allclose(first, sampler.points.to_numpy())
    assert sampler.round_of(5) == 1 and sampler.round_of(6) == 2
    other = SDFSampler(truth, 512, 64, 128, 128, 0.02, seed=10)
    other.draw_pool(0)
    assert not np.allclose(first, other.points.to_numpy())
