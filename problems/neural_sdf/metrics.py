"""How well a learned signed distance matches the mesh: the IoU of the two interiors on a dense grid, and the
chamfer distance and normal consistency between the mesh marching cubes extracts from the field and the input mesh
(scikit-image's marching cubes, trimesh's surface sampling, scipy's k-d tree). An unsigned distance (an open mesh:
no inside, so no IoU, and no zero crossing for marching cubes) is measured by :func:`distance_error`."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from problems.neural_sdf.mesh import trimesh_module


def grid_points(resolution: int) -> np.ndarray:
    """(resolution^3, 3) float32: the vertices ``i / (resolution - 1)`` of a grid over the unit box, x slowest (the
    order of ``values.reshape(R, R, R)[ix, iy, iz]``)."""
    axis = np.linspace(0.0, 1.0, resolution)
    return np.stack(np.meshgrid(axis, axis, axis, indexing="ij"), -1).reshape(-1, 3).astype(np.float32)


def iou(predicted: np.ndarray, truth: np.ndarray) -> float:
    """|inside_pred & inside_true| / |inside_pred | inside_true| of two signed distances at the same points (inside:
    negative); 1 when both are empty."""
    a, b = np.asarray(predicted) < 0.0, np.asarray(truth) < 0.0
    union = int((a | b).sum())
    return float((a & b).sum()) / union if union else 1.0


def distance_error(predicted: np.ndarray, truth: np.ndarray) -> float:
    """The mean ``|predicted - truth|`` of two distances at the same points (box units): 0 for a perfect field, about
    the mean distance itself for an untrained one near 0."""
    a, b = np.asarray(predicted, np.float64).ravel(), np.asarray(truth, np.float64).ravel()
    if a.shape != b.shape or a.size == 0:
        raise ValueError(f"distance_error needs two distances at the same points, got {a.size} and {b.size}")
    return float(np.abs(a - b).mean())


def marching_cubes(values: np.ndarray) -> Any | None:
    """The zero level set of ``values`` ((R, R, R), on :func:`grid_points`' grid) as a ``trimesh.Trimesh`` in unit-box
    coordinates, faces counter-clockwise seen from outside (positive side); None when the field has no zero crossing
    there."""
    from skimage.measure import marching_cubes as skimage_marching_cubes

    values = np.asarray(values, np.float32)
    if not (values.min() < 0.0 < values.max()):
        return None
    spacing = (1.0 / (values.shape[0] - 1),) * 3
    vertices, faces, _, _ = skimage_marching_cubes(values, level=0.0, spacing=spacing, gradient_direction="descent")
    return trimesh_module().Trimesh(vertices.astype(np.float64), faces, process=False)


@dataclasses.dataclass(frozen=True)
class SurfaceSample:
    """Points drawn uniformly on a mesh's surface (by area) and the unit normals of their triangles, (N, 3) each."""

    points: np.ndarray
    normals: np.ndarray

    @classmethod
    def of(cls, mesh: Any, count: int, seed: int) -> "SurfaceSample":
        """``count`` points of the ``trimesh.Trimesh`` ``mesh`` (seeded: the same points every call)."""
        trimesh = trimesh_module()
        points, faces = trimesh.sample.sample_surface(mesh, count, seed=seed)
        return cls(np.asarray(points, np.float64), np.asarray(mesh.face_normals[faces], np.float64))


def surface_agreement(predicted: SurfaceSample, truth: SurfaceSample) -> dict[str, float]:
    """``chamfer``: the mean distance from each sample's points to the nearest point of the other, averaged over the
    two directions (box units); ``normal_consistency``: the mean |n . n'| of each point's normal and its nearest
    point's, averaged over the two directions (1: the normals agree up to orientation)."""
    from scipy.spatial import cKDTree

    to_truth, nearest_truth = cKDTree(truth.points).query(predicted.points)
    to_pred, nearest_pred = cKDTree(predicted.points).query(truth.points)
    chamfer = 0.5 * (float(to_truth.mean()) + float(to_pred.mean()))
    cos_a = np.abs((predicted.normals * truth.normals[nearest_truth]).sum(-1))
    cos_b = np.abs((truth.normals * predicted.normals[nearest_pred]).sum(-1))
    return {"chamfer": chamfer, "normal_consistency": 0.5 * (float(cos_a.mean()) + float(cos_b.mean()))}
