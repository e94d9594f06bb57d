"""neural_sdf's metrics and sphere-traced picture on known shapes: the IoU of given sign patterns, marching cubes of a
sphere's exact signed distance (volume, outward faces), the chamfer distance of concentric spheres (their radii's
difference) and normal consistency, and the sphere tracing of a sphere's field (neural_sdf.slang's trace and shade
kernels): the pixels it hits are the analytic ray-sphere intersections and their shade is that of the true normal."""

from __future__ import annotations

import numpy as np
import pytest
import slangpy as spy

from sopt.runtime import device as dev
from problems.neural_sdf.metrics import SurfaceSample, grid_points, iou, marching_cubes, surface_agreement
from problems.neural_sdf.render import SphereTracer

trimesh = pytest.importorskip("trimesh", reason="the mesh extra (pip install 'sopt[mesh]') reads meshes")

CENTRE, RADIUS = np.array([0.5, 0.45, 0.55]), 0.3


def sphere_sdf(points: np.ndarray) -> np.ndarray:
    return np.linalg.norm(points - CENTRE, axis=-1) - RADIUS


def test_iou_counts_the_interiors() -> None:
    truth = np.array([-1.0, -1.0, -1.0, 1.0, 1.0, 1.0])
    assert iou(truth, truth) == 1.0
    assert iou(np.array([-1.0, -1.0, 1.0, -1.0, 1.0, 1.0]), truth) == pytest.approx(2 / 4)
    assert iou(np.ones(6), np.ones(6)) == 1.0 and iou(np.ones(6), truth) == 0.0


def test_marching_cubes_of_a_sphere_and_the_chamfer_distance_of_concentric_spheres() -> None:
    r = 40
    values = sphere_sdf(grid_points(r).astype(np.float64)).reshape(r, r, r)
    assert grid_points(r)[1, 2] == pytest.approx(1 / (r - 1))   # z fastest
    mesh = marching_cubes(values)
    assert mesh.volume == pytest.approx(4 / 3 * np.pi * RADIUS ** 3, rel=0.01)   # positive: faces outwards
    radii = np.linalg.norm(mesh.vertices - CENTRE, axis=1)
    assert np.abs(radii - RADIUS).max() < 2e-3
    assert marching_cubes(values + 1.0) is None
    sphere = trimesh.creation.icosphere(subdivisions=5, radius=RADIUS)
    sphere.apply_translation(CENTRE)
    truth = SurfaceSample.of(sphere, 20000, seed=0)
    same = surface_agreement(SurfaceSample.of(mesh, 20000, seed=1), truth)
    # two independent samplings of (nearly) one surface: the gap between samples, ~0.5 sqrt(area / N)
    assert same["chamfer"] < 0.6 * np.sqrt(4 * np.pi * RADIUS ** 2 / 20000)
    assert same["normal_consistency"] > 0.99
    bigger = trimesh.creation.icosphere(subdivisions=5, radius=RADIUS + 0.05)
    bigger.apply_translation(CENTRE)
    apart = surface_agreement(SurfaceSample.of(bigger, 20000, seed=2), truth)
    assert apart["chamfer"] == pytest.approx(0.05, abs=0.004)
    assert apart["normal_consistency"] > 0.99
    tilted = SurfaceSample(truth.points, np.roll(truth.normals, 1, axis=1))   # normals (y, z, x): wrong
    assert surface_agreement(tilted, truth)["normal_consistency"] < 0.8


class SphereField:
    """A model of the sphere's exact signed distance (forward only, as the tracer uses it)."""

    def forward(self, x: spy.Tensor, encoder: spy.CommandEncoder | None = None) -> spy.Tensor:
        d = sphere_sdf(x.to_numpy().reshape(-1, 3).astype(np.float64))
        return spy.Tensor.from_numpy(dev.get_device(), d.astype(np.float32)[:, None])


def test_sphere_tracing_hits_where_the_rays_meet_the_sphere_and_shades_by_its_normal() -> None:
    size = 48
    tracer = SphereTracer(size, size)
    rgb = tracer.render(SphereField())
    cam = {k: np.array([v.x, v.y, v.z]) if hasattr(v, "x") else v for k, v in tracer.camera.items()}
    x, y = np.meshgrid(np.arange(size), np.arange(size))
    sx, sy = 2 * (x + 0.5) / size - 1, 1 - 2 * (y + 0.5) / size
    d = cam["forward"] + cam["right"] * sx[..., None] + cam["up"] * sy[..., None]
    d /= np.linalg.norm(d, axis=-1, keepdims=True)
    oc = cam["eye"] - CENTRE
    b = (d * oc).sum(-1)
    disc = b ** 2 - (oc @ oc - RADIUS ** 2)
    hits = disc > 0
    edge = np.abs(np.sqrt(np.abs(disc))) < 0.03   # rays grazing the silhouette: either answer
    assert 0.2 < hits.mean() < 0.8
    np.testing.assert_array_equal(tracer.hits()[~edge], hits[~edge])
    np.testing.assert_array_equal(rgb[~hits & ~edge], 1.0)   # background
    t = -b - np.sqrt(np.maximum(disc, 0.0))
    n = (cam["eye"] + t[..., None] * d - CENTRE) / RADIUS
    key, fill = np.array([0.6, 0.5, 0.8]), np.array([-0.7, -0.3, 0.4])
    key, fill = key / np.linalg.norm(key), fill / np.linalg.norm(fill)
    shade = 0.75 * np.maximum(n @ key, 0) + 0.25 * np.maximum(n @ fill, 0) + 0.2 + 0.1 * n[..., 2]
    expected = shade[..., None] * np.array([0.85, 0.55, 0.35])
    np.testing.assert_allclose(rgb[hits & ~edge], expected[hits & ~edge], atol=0.02)
