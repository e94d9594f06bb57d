"""Pinhole cameras in the NeRF-synthetic convention, and their rays in numpy (cameras.slang computes the same on the
GPU; the tests compare them).

A camera-to-world matrix ``c2w`` (4 x 4, or its top 3 x 4) maps camera coordinates to world coordinates; the camera
looks along its -z axis with +y up (OpenGL's, Blender's). Pixel (px, py) (column, row from the top left corner) of a
W x H image looks along camera-space ``((px + 1/2 - cx) / fx, -(py + 1/2 - cy) / fy, -1)`` through its centre, with
``fx = fy = W / (2 tan(camera_angle_x / 2))`` and ``(cx, cy) = (W / 2, H / 2)`` from a horizontal field of view
``camera_angle_x`` (radians), as NeRF's ``transforms_*.json`` give it; the point at fraction (ox, oy) in [0, 1)^2 of
the pixel from its top left corner replaces the 1/2 with ox and oy (sub-pixel rays: the built-in scene's
supersampled pixels, the training rays jittered inside their pixel).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np


@dataclasses.dataclass(frozen=True)
class Cameras:
    """``c2w`` (N, 4, 4) float64 camera-to-world matrices of N views of ``width`` x ``height`` pixels with a
    horizontal field of view ``camera_angle_x`` (radians, in (0, pi))."""

    c2w: np.ndarray
    width: int
    height: int
    camera_angle_x: float

    def __post_init__(self) -> None:
        c2w = np.asarray(self.c2w, np.float64)
        if c2w.ndim != 3 or c2w.shape[1:] != (4, 4) or c2w.shape[0] < 1:
            raise ValueError(f"Cameras c2w must have shape (N, 4, 4) with N >= 1, got {c2w.shape}")
        if not np.isfinite(c2w).all():
            raise ValueError("Cameras c2w holds NaN or Inf")
        if not (0.0 < self.camera_angle_x < math.pi):
            raise ValueError(f"Cameras camera_angle_x must be in (0, pi) radians, got {self.camera_angle_x!r}")
        if self.width < 1 or self.height < 1:
            raise ValueError(f"Cameras width and height must be >= 1, got {self.width} x {self.height}")
        object.__setattr__(self, "c2w", c2w)

    def __len__(self) -> int:
        return int(self.c2w.shape[0])

    @property
    def focal(self) -> float:
        """Focal length in pixels: ``W / (2 tan(camera_angle_x / 2))``."""
        return 0.5 * self.width / math.tan(0.5 * self.camera_angle_x)

    def select(self, indices: np.ndarray | list[int]) -> "Cameras":
        return Cameras(self.c2w[np.asarray(indices, np.int64)], self.width, self.height, self.camera_angle_x)

    def slang(self) -> dict[str, float | int]:
        """The scalar members of cameras.slang's ``Cameras`` (the caller adds ``c2w``)."""
        f = self.focal
        return {"width": self.width, "height": self.height, "fx": f, "fy": f, "cx": 0.5 * self.width,
                "cy": 0.5 * self.height}

    def c2w_rows(self) -> np.ndarray:
        """(N * 12,) float32: each camera's top 3 x 4 rows, flat (what cameras.slang reads)."""
        return np.ascontiguousarray(self.c2w[:, :3, :4], np.float32).reshape(-1)


def pixel_rays(cameras: Cameras, image: int, offset: tuple[float, float] = (0.5, 0.5)
               ) -> tuple[np.ndarray, np.ndarray]:
    """(origins, directions), each (H W, 3) float64, of every pixel of view ``image`` in row-major order, through
    the point ``offset`` = (ox, oy) (fractions of a pixel from its top left corner, default its centre) of each
    pixel; directions have unit length."""
    w, h, f = cameras.width, cameras.height, cameras.focal
    ox, oy = offset
    py, px = np.meshgrid(np.arange(h, dtype=np.float64), np.arange(w, dtype=np.float64), indexing="ij")
    d = np.stack([(px + ox - 0.5 * w) / f, -(py + oy - 0.5 * h) / f, -np.ones_like(px)], axis=-1).reshape(-1, 3)
    m = cameras.c2w[image]
    d = d @ m[:3, :3].T
    d /= np.linalg.norm(d, axis=1, keepdims=True)
    return np.broadcast_to(m[:3, 3], d.shape).copy(), d


def look_at(eye: np.ndarray, target: np.ndarray, up: np.ndarray = np.array([0.0, 0.0, 1.0])) -> np.ndarray:
    """The 4 x 4 camera-to-world matrix of a camera at ``eye`` looking at ``target`` (its -z axis towards it) with
    ``up`` (world; default +z, as Blender's NeRF scenes) projecting to its +y."""
    eye, target = np.asarray(eye, np.float64), np.asarray(target, np.float64)
    back = eye - target
    norm = np.linalg.norm(back)
    if norm == 0.0:
        raise ValueError("look_at: eye and target coincide")
    z = back / norm
    x = np.cross(up, z)
    if np.linalg.norm(x) < 1e-9:   # looking along up: any perpendicular will do
        x = np.cross(np.array([1.0, 0.0, 0.0]), z)
    x /= np.linalg.norm(x)
    y = np.cross(z, x)
    m = np.eye(4)
    m[:3, 0], m[:3, 1], m[:3, 2], m[:3, 3] = x, y, z, eye
    return m


def sphere_poses(count: int, radius: float, seed: int, min_elevation: float = 0.15,
                 max_elevation: float = 1.2) -> np.ndarray:
    """(count, 4, 4) poses of cameras at distance ``radius`` from the origin looking at it, spread over a band of
    the upper hemisphere: azimuths on a golden-angle spiral turned by a seeded random offset, elevations (radians
    above the xy plane) evenly from ``min_elevation`` to ``max_elevation``, as NeRF-synthetic's training views."""
    rng = np.random.default_rng(seed)
    golden = math.pi * (3.0 - math.sqrt(5.0))
    turn = rng.uniform(0.0, 2.0 * math.pi)
    poses = []
    for i in range(count):
        azimuth = turn + i * golden
        elevation = min_elevation + (max_elevation - min_elevation) * ((i + 0.5) / count)
        eye = radius * np.array([math.cos(elevation) * math.cos(azimuth), math.cos(elevation) * math.sin(azimuth),
                                 math.sin(elevation)])
        poses.append(look_at(eye, np.zeros(3)))
    return np.stack(poses)
