"""float64 numpy references of neural_sdf's ground truth: the distance from points to triangles (by projecting on
the plane and on each edge, a route unlike the kernel's Voronoi regions) and the generalised winding number."""

from __future__ import annotations

import numpy as np


def _segment_distance2(p: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(N, T) squared distances from points p (N, 1, 3) to the segments a-b (1, T, 3)."""
    ab = b - a
    t = np.clip(((p - a) * ab).sum(-1) / np.maximum((ab * ab).sum(-1), 1e-300), 0.0, 1.0)
    q = a + t[..., None] * ab - p
    return (q * q).sum(-1)


def unsigned_distance(points: np.ndarray, triangles: np.ndarray) -> np.ndarray:
    """(N,) distance from each point to the nearest of the triangles (T, 3, 3): the distance to the plane where the
    projection falls inside the triangle (all three edge tests agree), else the nearest edge."""
    p = np.asarray(points, np.float64)[:, None, :]
    a, b, c = (np.asarray(triangles, np.float64)[None, :, k] for k in range(3))
    n = np.cross(b - a, c - a)
    n_len2 = np.maximum((n * n).sum(-1), 1e-300)
    height = ((p - a) * n).sum(-1) / np.sqrt(n_len2)
    projected = p - (height / np.sqrt(n_len2))[..., None] * n
    inside = np.broadcast_to(n_len2 > 1e-200, height.shape).copy()   # a zero-area triangle has no face region: its edges decide
    for u, v in ((a, b), (b, c), (c, a)):
        inside &= (np.cross(v - u, projected - u) * n).sum(-1) >= 0.0
    edges = np.minimum(np.minimum(_segment_distance2(p, a, b), _segment_distance2(p, b, c)), _segment_distance2(p, c, a))
    d2 = np.where(inside, height ** 2, edges)
    return np.sqrt(d2.min(axis=1))


def winding_number(points: np.ndarray, triangles: np.ndarray) -> np.ndarray:
    """(N,) generalised winding number: the triangles' signed solid angles over 4 pi (Van Oosterom & Strackee)."""
    p = np.asarray(points, np.float64)[:, None, :]
    A, B, C = (np.asarray(triangles, np.float64)[None, :, k] - p for k in range(3))
    la, lb, lc = (np.linalg.norm(x, axis=-1) for x in (A, B, C))
    det = (A * np.cross(B, C)).sum(-1)
    den = la * lb * lc + (A * B).sum(-1) * lc + (B * C).sum(-1) * la + (C * A).sum(-1) * lb
    return (2.0 * np.arctan2(det, den)).sum(axis=1) / (4.0 * np.pi)
