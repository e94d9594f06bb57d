"""The mesh neural_sdf fits: read with trimesh (OBJ, PLY, STL, OFF), scaled into the unit box, and its triangles as
the float32 array the kernels take."""

from __future__ import annotations

import dataclasses
import os
import pathlib
from typing import Any

import numpy as np

from sopt.problems.neural_sdf.default_mesh import DEFAULT_MESH

SUFFIXES = (".obj", ".ply", ".stl", ".off")
MAX_TRIANGLES = 1 << 22   # the brute-force distance reads every triangle for every point


def trimesh_module() -> Any:
    """The trimesh module, or ImportError saying how to install it (an optional dependency, ``sopt[mesh]``)."""
    try:
        import trimesh
    except ImportError:
        raise ImportError("neural_sdf needs trimesh and scikit-image: pip install 'sopt[mesh]'") from None
    return trimesh


def read_mesh(path: str | os.PathLike[str] | None) -> Any:
    """The triangle mesh in the file at ``path`` (None: the packaged wavy torus) as a ``trimesh.Trimesh``, vertices
    and faces as stored (no merging). ValueError naming the file for a suffix other than :data:`SUFFIXES`, a file
    trimesh cannot read, no triangles, or more than :data:`MAX_TRIANGLES`."""
    trimesh = trimesh_module()
    path = pathlib.Path(DEFAULT_MESH if path is None else path)
    if path.suffix.lower() not in SUFFIXES:
        raise ValueError(f"{str(path)!r} has the suffix {path.suffix!r}; allowed: {', '.join(SUFFIXES)}")
    try:
        mesh = trimesh.load(str(path), force="mesh", process=False)
    except Exception as exc:   # trimesh raises many kinds for a damaged file
        raise ValueError(f"{str(path)!r} is not a mesh trimesh can read: {exc}") from None
    faces = getattr(mesh, "faces", None)
    if faces is None or len(faces) == 0:
        raise ValueError(f"{str(path)!r} holds no triangles")
    if len(faces) > MAX_TRIANGLES:
        raise ValueError(f"{str(path)!r} holds {len(faces)} triangles, more than {MAX_TRIANGLES}; simplify it")
    if not np.isfinite(mesh.vertices).all():
        raise ValueError(f"{str(path)!r} has NaN or Inf vertex coordinates")
    if not float(mesh.area) > 0.0:
        raise ValueError(f"{str(path)!r}: its triangles have no area (every one's vertices are collinear)")
    return mesh


@dataclasses.dataclass(frozen=True)
class UnitBoxMesh:
    """A mesh scaled into the unit box: ``vertices`` (V, 3) and ``faces`` (T, 3) of the scaled mesh (float64,
    int64), and the map from the file's coordinates, ``x_box = (x_file - centre) * scale + 0.5``."""

    vertices: np.ndarray
    faces: np.ndarray
    centre: np.ndarray
    scale: float

    @property
    def triangles(self) -> np.ndarray:
        """(T, 3, 3) float32: each triangle's three vertices, what the kernels read."""
        return self.vertices[self.faces].astype(np.float32)

    def trimesh(self) -> Any:
        """The scaled mesh as a ``trimesh.Trimesh`` (no processing)."""
        return trimesh_module().Trimesh(self.vertices, self.faces, process=False)


def to_unit_box(mesh: Any, margin: float) -> UnitBoxMesh:
    """``mesh`` (anything with ``vertices`` and ``faces``) moved and scaled uniformly so that the bounding box of its
    used vertices is centred at (0.5, 0.5, 0.5) and its longest side is ``1 - 2 margin``."""
    vertices = np.asarray(mesh.vertices, np.float64)
    faces = np.asarray(mesh.faces, np.int64)
    used = vertices[np.unique(faces)]
    lo, hi = used.min(axis=0), used.max(axis=0)
    centre = (lo + hi) / 2.0
    scale = (1.0 - 2.0 * margin) / float((hi - lo).max())
    return UnitBoxMesh((vertices - centre) * scale + 0.5, faces, centre, scale)
