"""neural_sdf's ground truth on the GPU (neural_sdf.slang's signed_distance) against float64 numpy references: the
exact distance to triangles in every Voronoi region (vertices, edges, faces, on the surface, a degenerate triangle),
the generalised winding number (1 inside a closed mesh, 0 outside, 1/2 on a lone triangle's plane side ...), and the
packaged mesh: its file is what default_mesh.py makes, closed, small, and its sign agrees with the reference."""

from __future__ import annotations

import numpy as np
import pytest

from problems.neural_sdf.default_mesh import DEFAULT_MESH, wavy_torus
from problems.neural_sdf.mesh import read_mesh, to_unit_box
from problems.neural_sdf.truth import MeshTruth
from tests.problems.neural_sdf.reference import unsigned_distance, winding_number

# a tetrahedron, faces counter-clockwise seen from outside
TETRA_VERTICES = np.array([[0.2, 0.2, 0.2], [0.8, 0.2, 0.2], [0.2, 0.8, 0.2], [0.2, 0.2, 0.8]])
TETRA_FACES = np.array([[0, 2, 1], [0, 1, 3], [0, 3, 2], [1, 2, 3]])
TETRA = TETRA_VERTICES[TETRA_FACES]


def test_the_tetrahedron_s_signed_distance_matches_float64_in_every_region() -> None:
    rng = np.random.default_rng(1)
    special = np.array([
        [0.3, 0.3, 0.3],        # inside, nearest the three axis faces equally
        [0.25, 0.25, 0.25],     # inside near the corner
        [0.1, 0.1, 0.1],        # vertex region of (0.2, 0.2, 0.2): distance sqrt(3) * 0.1
        [0.9, 0.1, 0.1],        # vertex region of (0.8, 0.2, 0.2)
        [0.5, 0.1, 0.1],        # edge region of the x edge: distance sqrt(2) * 0.1
        [0.4, 0.4, 0.1],        # face region of z = 0.2: distance 0.1
        [0.5, 0.5, 0.5],        # outside the slanted face x + y + z = 1.2
        [0.4, 0.3, 0.2],        # on the face z = 0.2: distance 0
        [0.2, 0.2, 0.2],        # a vertex: distance 0
    ])
    points = np.concatenate([special, rng.uniform(0.0, 1.0, (400, 3))])
    result = MeshTruth(TETRA).signed_distance(points)
    distance, winding = unsigned_distance(points, TETRA), winding_number(points, TETRA)
    np.testing.assert_allclose(np.abs(result.sdf), distance, rtol=0, atol=2e-7)
    np.testing.assert_allclose(result.winding[distance > 1e-4], winding[distance > 1e-4], rtol=0, atol=2e-6)
    assert np.isin(np.round(winding[distance > 1e-4], 9), [0.0, 1.0]).all()   # closed: 1 inside, 0 outside
    inside = winding > 0.5
    far = distance > 1e-4
    np.testing.assert_array_equal((result.sdf < 0)[far], inside[far])
    np.testing.assert_allclose(result.sdf[:7], [-0.1, -0.05, np.sqrt(3) * 0.1, np.sqrt(3) * 0.1, np.sqrt(2) * 0.1,
                                                0.1, (1.5 - 1.2) / np.sqrt(3)], rtol=0, atol=2e-7)
    assert abs(result.sdf[7]) < 1e-7 and abs(result.sdf[8]) < 1e-7


def test_a_lone_and_a_degenerate_triangle() -> None:
    """An open surface: the winding number is the solid angle's share (not 0 or 1); a zero-area triangle's distance is
    that to its segment."""
    lone = np.array([[[0.2, 0.2, 0.5], [0.8, 0.2, 0.5], [0.2, 0.8, 0.5]],
                     [[0.1, 0.9, 0.9], [0.3, 0.9, 0.9], [0.5, 0.9, 0.9]]])   # the second: collinear vertices
    rng = np.random.default_rng(2)
    points = np.concatenate([[[0.3, 0.3, 0.6], [0.3, 0.3, 0.4], [0.2, 0.9, 0.9], [0.7, 0.9, 0.95]],
                             rng.uniform(0.0, 1.0, (300, 3))])
    result = MeshTruth(lone).signed_distance(points)
    distance = unsigned_distance(points, lone)
    np.testing.assert_allclose(np.abs(result.sdf), distance, rtol=0, atol=2e-7)
    off = distance > 1e-4   # on the surface the winding number jumps: either side's value is right
    np.testing.assert_allclose(result.winding[off], winding_number(points, lone)[off], rtol=0, atol=2e-6)
    assert abs(result.sdf[2]) < 1e-7 and result.sdf[3] == pytest.approx(np.hypot(0.2, 0.05), abs=1e-7)
    # counter-clockwise seen from above (+z, its outside): 0.1 above and below the same point, opposite shares
    assert -0.5 < result.winding[0] < -0.2 and result.winding[1] == pytest.approx(-result.winding[0], abs=1e-6)


def test_the_packaged_mesh_is_the_generated_wavy_torus_and_its_sign_is_right() -> None:
    assert DEFAULT_MESH.stat().st_size < 200_000
    mesh = read_mesh(None)
    vertices, faces = wavy_torus()
    np.testing.assert_allclose(mesh.vertices, vertices, rtol=0, atol=1e-6)   # stored as float32
    flipped = faces[:, ::-1]
    assert np.array_equal(mesh.faces, faces) or np.array_equal(mesh.faces, flipped)
    assert mesh.is_watertight and mesh.is_winding_consistent and mesh.volume > 0 and mesh.euler_number == 0
    box = to_unit_box(mesh, 0.1)
    used = box.vertices[np.unique(box.faces)]
    np.testing.assert_allclose(used.min(0) + used.max(0), 1.0, atol=1e-12)    # centred at 0.5
    assert np.ptp(used, axis=0).max() == pytest.approx(0.8, abs=1e-12)
    rng = np.random.default_rng(3)
    points = rng.uniform(0.0, 1.0, (400, 3))
    triangles = box.triangles
    result = MeshTruth(triangles).signed_distance(points)
    reference_winding = winding_number(points, triangles.astype(np.float64))
    np.testing.assert_allclose(np.abs(result.sdf), unsigned_distance(points, triangles), rtol=0, atol=3e-7)
    np.testing.assert_allclose(result.winding, reference_winding, rtol=0, atol=5e-5)
    np.testing.assert_array_equal(result.sdf < 0, reference_winding > 0.5)
    assert 0.03 < (result.sdf < 0).mean() < 0.3   # the torus fills a part of the box, not none or all of it
