"""MeshTruth: a triangle mesh on the GPU and what is exactly known about it there: the signed distance of any
points (negative inside; sign from the generalised winding number) and training points drawn on, near and around it
(kernels in neural_sdf.slang)."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import slangpy as spy

from sopt.runtime import device as dev
from problems.neural_sdf import kernels

_MAX_THREADS = 64 * 65535   # one dispatch's threads (groups of 64, per-dimension group limit)


class SignedDistance(NamedTuple):
    """``sdf`` (N,) signed distance (box units, negative inside; never negative for an unsigned MeshTruth) and
    ``winding`` (N,) generalised winding number."""

    sdf: np.ndarray
    winding: np.ndarray


class MeshTruth:
    """The triangles ``(T, 3, 3)`` (float32, unit-box coordinates) uploaded once, with their cumulative areas for
    drawing surface points in proportion to area. ``unsigned``: the distance is never negative (an open mesh, whose
    inside is undefined); ``winding`` is computed either way."""

    def __init__(self, triangles: np.ndarray, unsigned: bool = False) -> None:
        triangles = np.ascontiguousarray(triangles, np.float32)
        if triangles.ndim != 3 or triangles.shape[1:] != (3, 3) or len(triangles) == 0:
            raise ValueError(f"triangles must have shape (T, 3, 3) with T >= 1, got {triangles.shape}")
        t64 = triangles.astype(np.float64)
        areas = 0.5 * np.linalg.norm(np.cross(t64[:, 1] - t64[:, 0], t64[:, 2] - t64[:, 0]), axis=1)
        if not areas.sum() > 0.0:
            raise ValueError("the mesh's triangles have no area: there is no surface to draw points on")
        cdf = np.cumsum(areas) / areas.sum()
        cdf[-1] = 1.0   # the binary search's last bin catches u up to 1 - 2^-24
        self.n_triangles = len(triangles)
        self.unsigned = bool(unsigned)
        device = dev.get_device()
        self.triangles = spy.Tensor.from_numpy(device, triangles.reshape(-1))
        self.cdf = spy.Tensor.from_numpy(device, cdf.astype(np.float32))
        self._distance: dev.BoundKernel | None = None
        self._sample: dev.BoundKernel | None = None

    def size(self, n_points: int) -> str:
        """How much computing the signed distance of ``n_points`` points is, for a notice: ``N points x T
        triangles (P point-triangle distances)``."""
        return f"{n_points} points x {self.n_triangles} triangles ({n_points * self.n_triangles:.2g} point-triangle " \
               "distances)"

    def record_signed_distance(self, points: spy.Tensor, sdf: spy.Tensor, winding: spy.Tensor,
                               encoder: spy.CommandEncoder | None = None) -> None:
        """Record ``sdf[i]``, ``winding[i]`` of the (N, 3) float32 ``points`` into (N-element) ``sdf`` and
        ``winding`` (or run it now without an ``encoder``)."""
        n = int(points.shape[0])
        if n > _MAX_THREADS:
            raise ValueError(f"at most {_MAX_THREADS} points per call, got {n}")
        if self._distance is None:
            self._distance = kernels.SIGNED_DISTANCE.bind(triangles=self.triangles.storage)
        self._distance.set(args={"n_points": n, "n_triangles": self.n_triangles, "points_offset": int(points.offset),
                                 "unsigned_distance": int(self.unsigned)},
                           points=points.storage, sdf=sdf.storage, winding=winding.storage)
        self._distance.dispatch(n, encoder)

    def signed_distance(self, points: np.ndarray) -> SignedDistance:
        """The signed distance and winding number of ``points`` ((N, 3), unit-box coordinates), computed on the GPU
        in chunks; waits for it."""
        points = np.ascontiguousarray(points, np.float32).reshape(-1, 3)
        device = dev.get_device()
        sdf, winding = np.empty(len(points), np.float32), np.empty(len(points), np.float32)
        for start in range(0, len(points), _MAX_THREADS):
            chunk = points[start:start + _MAX_THREADS]
            tensors = [spy.Tensor.from_numpy(device, chunk), spy.Tensor.empty(device, (len(chunk),), "float"),
                       spy.Tensor.empty(device, (len(chunk),), "float")]
            self.record_signed_distance(*tensors)
            sdf[start:start + len(chunk)] = tensors[1].to_numpy()
            winding[start:start + len(chunk)] = tensors[2].to_numpy()
        return SignedDistance(sdf, winding)

    def record_sample(self, points: spy.Tensor, seed: int, round: int, n_uniform: int, n_surface: int,
                      near_sigma: float, encoder: spy.CommandEncoder | None = None) -> None:
        """Record the draw of round ``round`` into ``points`` (N, 3): rows [0, n_uniform) uniform in the box, the
        next ``n_surface`` uniform on the surface (triangles by area), the rest such surface points moved by
        N(0, near_sigma^2 I), clamped to the box. A pure function of (seed, round, row)."""
        n = int(points.shape[0])
        if not 0 <= n_uniform <= n or not 0 <= n_surface <= n - n_uniform:
            raise ValueError(f"n_uniform = {n_uniform} and n_surface = {n_surface} must fit in the {n} points")
        if n > _MAX_THREADS:
            raise ValueError(f"at most {_MAX_THREADS} points per draw, got {n}")
        if self._sample is None:
            self._sample = kernels.SAMPLE_POINTS.bind(triangles=self.triangles.storage, cdf=self.cdf.storage)
        self._sample.set(args={"seed": seed, "round": round, "n_points": n, "n_uniform": n_uniform,
                               "n_surface": n_surface, "n_triangles": self.n_triangles,
                               "near_sigma": float(near_sigma)}, points=points.storage)
        self._sample.dispatch(n, encoder)
