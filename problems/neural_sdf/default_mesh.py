"""The mesh neural_sdf fits by default, made here rather than downloaded: a wavy torus (a tube of varying thickness
around a circle that rises and falls), written once to ``data/wavy_torus.ply`` (``python -m
problems.neural_sdf.default_mesh`` rewrites it; the file is what runs read, so results do not depend on this
code's floating-point details). Genus 1 with thin and thick parts: harder than a sphere, small enough (1920
triangles) for the brute-force distance on the software driver."""

from __future__ import annotations

import pathlib

import numpy as np

DEFAULT_MESH = pathlib.Path(__file__).with_name("data") / "wavy_torus.ply"
AROUND, ACROSS = 48, 20   # vertices along the ring and around the tube


def wavy_torus(around: int = AROUND, across: int = ACROSS) -> tuple[np.ndarray, np.ndarray]:
    """(vertices (around * across, 3) float64, faces (2 * around * across, 3) int64) of the wavy torus, faces
    counter-clockwise seen from outside. Ring radius 1 around the z axis with height 0.25 sin(2u); tube radius
    0.35 (1 + 0.35 sin(3u)) (1 + 0.08 cos(2v)) at ring angle u and tube angle v."""
    u = 2.0 * np.pi * np.arange(around) / around
    v = 2.0 * np.pi * np.arange(across) / across
    uu, vv = np.meshgrid(u, v, indexing="ij")
    radius = 0.35 * (1.0 + 0.35 * np.sin(3.0 * uu)) * (1.0 + 0.08 * np.cos(2.0 * vv))
    centre = np.stack([np.cos(uu), np.sin(uu), 0.25 * np.sin(2.0 * uu)], axis=-1)
    outward = np.stack([np.cos(uu), np.sin(uu), np.zeros_like(uu)], axis=-1)
    up = np.array([0.0, 0.0, 1.0])
    vertices = centre + radius[..., None] * (np.cos(vv)[..., None] * outward + np.sin(vv)[..., None] * up)
    i, j = np.meshgrid(np.arange(around), np.arange(across), indexing="ij")
    a = i * across + j
    b = ((i + 1) % around) * across + j
    c = ((i + 1) % around) * across + (j + 1) % across
    d = i * across + (j + 1) % across
    faces = np.concatenate([np.stack([a, b, c], -1).reshape(-1, 3), np.stack([a, c, d], -1).reshape(-1, 3)])
    return vertices.reshape(-1, 3), faces


def write_default_mesh(path: pathlib.Path = DEFAULT_MESH) -> None:
    """Write :func:`wavy_torus` as a binary PLY (float32 vertices) at ``path``, faces oriented outwards."""
    import trimesh

    vertices, faces = wavy_torus()
    mesh = trimesh.Trimesh(vertices.astype(np.float32), faces, process=False)
    if mesh.volume < 0:
        mesh.invert()
    assert mesh.is_watertight and mesh.is_winding_consistent and mesh.volume > 0
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(mesh.export(file_type="ply", encoding="binary"))


if __name__ == "__main__":
    write_default_mesh()
