"""The built-in scene: coloured spheres and boxes, rendered exactly by analytic ray intersection (numpy, float64),
so that neural_radiance runs offline with known truth.

Every shape is opaque and matte: a hit point's colour is ``albedo * (ambient + (1 - ambient) max(0, n . l))`` with
the shape's outward normal n and a fixed light direction l, a function of position alone (no view dependence, so
a radiance field without view direction can match it exactly). One box carries a checkerboard (two albedos by
the parity of floor(p / checker) summed over the axes), fine detail for the hash grid. A ray shows the nearest hit
along it, else the background. The shapes lie in the cube [-0.9, 0.9]^3.

A pixel is the mean of the rays through its area (a box filter, as a renderer's anti-aliased image or a camera's
sensor): with ``supersample`` n > 1, a pixel on the border or whose 3 x 3 neighbourhood of pixel centres sees more
than one surface (shape, box face, checker square or background: an edge may cross it) averages n x n rays on a
regular sub-pixel grid; the others see one smooth surface and keep their centre's ray (within 0.01 of the n x n
mean: 72-77 dB from it at 64 px, n = 4). One ray per pixel centre (n = 1) point-samples the edges: jaggies that no
radiance field seen from other poses can predict (at 200 px the held-out views' centre rays are 30.3 dB from their
16 x 16 average, about where the GPU config plateaued; 4 x 4 is 48 dB from it).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from problems.neural_radiance.cameras import Cameras, pixel_rays, sphere_poses

LIGHT = np.array([0.4, -0.3, 0.866]) / np.linalg.norm([0.4, -0.3, 0.866])
AMBIENT = 0.35
EXTENT = 0.9          # every shape lies in [-EXTENT, EXTENT]^3
CAMERA_RADIUS = 3.2   # the cameras' distance from the origin
CAMERA_ANGLE_X = 0.69  # horizontal field of view (radians), about Lego's


@dataclasses.dataclass(frozen=True)
class Sphere:
    centre: tuple[float, float, float]
    radius: float
    albedo: tuple[float, float, float]


@dataclasses.dataclass(frozen=True)
class Box:
    """An axis-aligned box; with ``checker`` > 0 its albedo alternates with ``albedo2`` on a checkerboard of that
    square size (world units)."""

    centre: tuple[float, float, float]
    half: tuple[float, float, float]
    albedo: tuple[float, float, float]
    albedo2: tuple[float, float, float] = (0.0, 0.0, 0.0)
    checker: float = 0.0


SHAPES: tuple[Sphere | Box, ...] = (
    Box((0.0, 0.0, -0.75), (0.85, 0.85, 0.1), (0.92, 0.9, 0.85), (0.25, 0.3, 0.45), checker=0.34),
    Sphere((-0.35, -0.3, -0.3), 0.35, (0.85, 0.2, 0.15)),
    Sphere((0.4, 0.25, -0.4), 0.25, (0.2, 0.65, 0.3)),
    Sphere((0.1, -0.2, 0.35), 0.2, (0.95, 0.8, 0.2)),
    Box((0.3, -0.45, -0.4), (0.15, 0.15, 0.25), (0.2, 0.35, 0.9)),
    Box((-0.4, 0.45, -0.35), (0.2, 0.12, 0.3), (0.7, 0.3, 0.8)),
)


def _hit_sphere(o: np.ndarray, d: np.ndarray, s: Sphere) -> tuple[np.ndarray, np.ndarray]:
    """(t of the first hit in front of the origin, inf where none; outward normals at it) for unit directions."""
    oc = o - np.asarray(s.centre)
    b = np.einsum("ij,ij->i", oc, d)
    c = np.einsum("ij,ij->i", oc, oc) - s.radius ** 2
    disc = b * b - c
    root = np.sqrt(np.maximum(disc, 0.0))
    t_near, t_far = -b - root, -b + root
    t = np.where(t_near > 1e-9, t_near, t_far)
    t = np.where((disc >= 0.0) & (t > 1e-9), t, np.inf)
    p = o + np.where(np.isfinite(t), t, 0.0)[:, None] * d
    return t, (p - np.asarray(s.centre)) / s.radius


def _hit_box(o: np.ndarray, d: np.ndarray, b: Box) -> tuple[np.ndarray, np.ndarray]:
    centre, half = np.asarray(b.centre), np.asarray(b.half)
    with np.errstate(divide="ignore", invalid="ignore"):
        inv = 1.0 / np.where(np.abs(d) > 1e-12, d, 1e-12)
    ta, tb = (centre - half - o) * inv, (centre + half - o) * inv
    tmin, tmax = np.minimum(ta, tb), np.maximum(ta, tb)
    t_near, t_far = tmin.max(axis=1), tmax.min(axis=1)
    t = np.where(t_near > 1e-9, t_near, t_far)
    t = np.where((t_far >= t_near) & (t > 1e-9), t, np.inf)
    p = o + np.where(np.isfinite(t), t, 0.0)[:, None] * d
    q = (p - centre) / half                      # the face hit has |q| = 1 on its axis
    axis = np.argmax(np.abs(q), axis=1)
    normal = np.zeros_like(p)
    normal[np.arange(len(p)), axis] = np.sign(q[np.arange(len(p)), axis])
    return t, normal


def _albedo(shape: Sphere | Box, p: np.ndarray) -> np.ndarray:
    albedo = np.broadcast_to(np.asarray(shape.albedo, np.float64), p.shape)
    if isinstance(shape, Box) and shape.checker > 0.0:
        parity = np.floor(p / shape.checker).sum(axis=1).astype(np.int64) % 2
        albedo = np.where(parity[:, None] == 1, np.asarray(shape.albedo2, np.float64), albedo)
    return albedo


def _trace_surfaces(o: np.ndarray, d: np.ndarray, shapes: tuple[Sphere | Box, ...]
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(colour (N, 3), depth (N,) inf where missed, surface (N,) int64: -1 on a miss, else 16 x shape index +
    2 x face (a box's 0..5, a sphere's 0) + checker parity, constant where the colour is smooth)."""
    best = np.full(len(o), np.inf)
    colour = np.zeros((len(o), 3))
    surface = np.full(len(o), -1, np.int64)
    for index, shape in enumerate(shapes):
        t, normal = (_hit_sphere if isinstance(shape, Sphere) else _hit_box)(o, d, shape)
        nearer = t < best
        if not nearer.any():
            continue
        p = o[nearer] + t[nearer, None] * d[nearer]
        n = normal[nearer]
        shade = AMBIENT + (1.0 - AMBIENT) * np.maximum(n @ LIGHT, 0.0)
        colour[nearer] = _albedo(shape, p) * shade[:, None]
        best[nearer] = t[nearer]
        face = 0
        if isinstance(shape, Box):   # the face's axis and side: box edges are colour discontinuities
            axis = np.argmax(np.abs(n), axis=1)
            face = 2 * axis + (n[np.arange(len(n)), axis] > 0.0)
        parity = 0
        if isinstance(shape, Box) and shape.checker > 0.0:
            parity = np.floor(p / shape.checker).sum(axis=1).astype(np.int64) % 2
        surface[nearer] = 16 * index + 2 * face + parity
    return colour, best, surface


def trace(origins: np.ndarray, directions: np.ndarray, shapes: tuple[Sphere | Box, ...] = SHAPES
          ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(colour (N, 3), hit (N,) bool, depth (N,), inf where missed) of rays (N, 3) with unit directions."""
    colour, best, _ = _trace_surfaces(np.asarray(origins, np.float64), np.asarray(directions, np.float64), shapes)
    return colour, np.isfinite(best), best


def _edge_pixels(surface: np.ndarray) -> np.ndarray:
    """(H, W) bool: pixels whose 3 x 3 neighbourhood holds more than one surface id, and the border's pixels (their
    outer side is unseen)."""
    h, w = surface.shape
    padded = np.pad(surface, 1, mode="edge")
    edge = np.zeros((h, w), bool)
    edge[0, :] = edge[-1, :] = edge[:, 0] = edge[:, -1] = True
    for dy in range(3):
        for dx in range(3):
            edge |= padded[dy:dy + h, dx:dx + w] != surface
    return edge


def render(cameras: Cameras, background: tuple[float, float, float], supersample: int = 1
           ) -> tuple[np.ndarray, np.ndarray]:
    """(images (N, H, W, 3) float32 composited on ``background``, depth (N, H, W) float32 at each pixel's centre,
    inf where missed) of every camera; ``supersample`` n: a pixel near an edge is the mean of n x n rays through
    the points ((a + 1/2) / n, (b + 1/2) / n) of its area (the module docstring), 1: one ray through its centre."""
    if supersample < 1:
        raise ValueError(f"render: supersample must be >= 1, got {supersample}")
    bg = np.asarray(background, np.float64)
    h, w = cameras.height, cameras.width
    images, depths = [], []
    for i in range(len(cameras)):
        o, d = pixel_rays(cameras, i)
        colour, depth, surface = _trace_surfaces(o, d, SHAPES)
        colour = np.where(np.isfinite(depth)[:, None], colour, bg)
        if supersample > 1:
            edge = _edge_pixels(surface.reshape(h, w)).reshape(-1)
            total = np.zeros((int(edge.sum()), 3))
            for a in range(supersample):
                for b in range(supersample):
                    so, sd = pixel_rays(cameras, i, ((b + 0.5) / supersample, (a + 0.5) / supersample))
                    sub, sub_depth, _ = _trace_surfaces(so[edge], sd[edge], SHAPES)
                    total += np.where(np.isfinite(sub_depth)[:, None], sub, bg)
            colour[edge] = total / supersample ** 2
        images.append(colour.reshape(h, w, 3))
        depths.append(depth.reshape(h, w))
    return np.stack(images).astype(np.float32), np.stack(depths).astype(np.float32)


def builtin_cameras(train: int, test: int, size: int, seed: int) -> tuple[Cameras, Cameras]:
    """(training cameras, held-out cameras) of the built-in scene: ``train`` and ``test`` square views of ``size``
    pixels on the sphere of radius CAMERA_RADIUS (sphere_poses), the held-out ones on a spiral of their own (other
    azimuths and elevations than the training views')."""
    train_poses = sphere_poses(train, CAMERA_RADIUS, seed)
    test_poses = sphere_poses(test, CAMERA_RADIUS, seed + 7919, min_elevation=0.3, max_elevation=1.0)
    return (Cameras(train_poses, size, size, CAMERA_ANGLE_X), Cameras(test_poses, size, size, CAMERA_ANGLE_X))
