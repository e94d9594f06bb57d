"""The mesh neural_sdf fits: read with trimesh (OBJ, PLY, STL, OFF) from bytes read here, scaled into the unit box,
and its triangles as the float32 array the kernels take.

The file is read as bytes (a regular file, at most MAX_MESH_BYTES) and parsed from memory with materials skipped,
so trimesh resolves no other file (a PLY's ``comment TextureFile``, an OBJ's ``mtllib``): nothing but the named
file is read. Text formats are decoded here, so a damaged file is a line naming it and its format, whatever text
decoders are installed.
"""

from __future__ import annotations

import dataclasses
import importlib
import io
import os
import pathlib
from typing import Any

import numpy as np

from problems.neural_sdf.default_mesh import DEFAULT_MESH
from sopt.utils.regular_file import FileTooLargeError, file_problem, read_bytes

SUFFIXES = (".obj", ".ply", ".stl", ".off")
FORMATS = {".obj": "an OBJ", ".ply": "a PLY", ".stl": "an STL", ".off": "an OFF"}   # as a line names them
MAX_TRIANGLES = 1 << 22   # the brute-force distance reads every triangle for every point
MAX_MESH_BYTES = 1 << 30
EXTRA = ("trimesh", "skimage", "scipy")   # the mesh extra's modules
EXTRA_NAMES = {"trimesh": "trimesh", "skimage": "scikit-image", "scipy": "scipy"}


def missing_extra() -> str | None:
    """The line saying which of neural_sdf's optional dependencies (trimesh, scikit-image, scipy: ``sopt[mesh]``)
    cannot be imported here, or None when all can."""
    missing = []
    for module in EXTRA:
        try:
            importlib.import_module(module)
        except ImportError:
            missing.append(EXTRA_NAMES[module])
    if not missing:
        return None
    return f"neural_sdf needs {' and '.join(missing)} (pip install 'sopt[mesh]')"


def trimesh_module() -> Any:
    """The trimesh module; ValueError (the one line of :func:`missing_extra`) when it cannot be imported."""
    try:
        import trimesh
    except ImportError:
        raise ValueError(missing_extra() or "neural_sdf needs trimesh (pip install 'sopt[mesh]')") from None
    return trimesh


def _stream(data: bytes, suffix: str, name: str) -> io.IOBase:
    """What trimesh parses: bytes for PLY and binary STL, text decoded here for OBJ, OFF and ASCII STL."""
    fmt = FORMATS[suffix]
    if suffix == ".ply":
        return io.BytesIO(data)
    if suffix == ".stl" and len(data) >= 84:
        count = int.from_bytes(data[80:84], "little")
        if len(data) == 84 + 50 * count:   # a binary STL: its header's triangle count gives its length
            return io.BytesIO(data)
    nul = data.find(b"\0")
    if nul >= 0:
        extra = ("; a binary STL of N triangles holds 84 + 50 N bytes as its header's N says, this file holds "
                 f"{len(data)}") if suffix == ".stl" else ""
        raise ValueError(f"{name} is not {fmt} file: it holds binary data (a NUL byte at offset "
                         f"{nul}){extra}")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        text = data.decode("latin-1")   # a comment or name in a legacy encoding; numbers are ASCII either way
    return io.StringIO(text)


def open_edges(mesh: Any) -> int:
    """How many edges of ``mesh`` (``vertices``, ``faces``) border one triangle only, once coincident vertices are
    merged (an STL stores each triangle's own three): 0 for a closed surface, more where it has a boundary."""
    vertices = np.asarray(mesh.vertices, np.float64)
    faces = np.asarray(mesh.faces, np.int64)
    _, merged = np.unique(vertices, axis=0, return_inverse=True)
    faces = merged.reshape(-1)[faces]
    edges = np.sort(faces[:, [[0, 1], [1, 2], [2, 0]]].reshape(-1, 2), axis=1)
    edges = edges[edges[:, 0] != edges[:, 1]]   # a triangle with merged corners has no such edge
    _, counts = np.unique(edges, axis=0, return_counts=True)
    return int((counts == 1).sum())


def read_mesh(path: str | os.PathLike[str] | None) -> Any:
    """The triangle mesh in the file at ``path`` (None: the packaged wavy torus) as a ``trimesh.Trimesh``, vertices
    and faces as stored (no merging), no other file read (see the module docstring). ValueError naming the file
    (and its format) for a suffix other than :data:`SUFFIXES`, a file that is missing, no regular file, larger
    than MAX_MESH_BYTES or not readable as its format, no triangles, more than :data:`MAX_TRIANGLES`, non-finite
    vertices or no area; ValueError saying what to install without trimesh."""
    trimesh = trimesh_module()
    path = pathlib.Path(DEFAULT_MESH if path is None else path)
    name = repr(str(path))
    suffix = path.suffix.lower()
    if suffix not in SUFFIXES:
        raise ValueError(f"{name} has the suffix {path.suffix!r}; allowed: {', '.join(SUFFIXES)}")
    fmt = FORMATS[suffix]
    problem = file_problem(path)
    if problem is not None:
        raise ValueError(f"{name} {problem}; expected an OBJ/PLY/STL/OFF file")
    try:
        data = read_bytes(path, MAX_MESH_BYTES)
    except FileTooLargeError as exc:
        raise ValueError(f"{name} holds {exc.size} bytes or more; at most {MAX_MESH_BYTES} are read") from None
    except OSError as exc:
        raise ValueError(f"{name} cannot be read: {exc.strerror or exc}") from None
    stream = _stream(data, suffix, name)
    try:
        mesh = trimesh.load(stream, file_type=suffix[1:], force="mesh", process=False, skip_materials=True)
    except Exception as exc:   # trimesh raises many kinds for a damaged file
        raise ValueError(f"{name} is not {fmt} file trimesh can read: {type(exc).__name__}: {exc}") from None
    faces = getattr(mesh, "faces", None)
    if faces is None or len(faces) == 0:
        raise ValueError(f"{name} holds no triangles read as {fmt} file")
    if len(faces) > MAX_TRIANGLES:
        raise ValueError(f"{name} holds {len(faces)} triangles, more than {MAX_TRIANGLES}; simplify it")
    faces = np.asarray(faces)
    if faces.min() < 0 or faces.max() >= len(mesh.vertices):
        raise ValueError(f"{name}: a triangle names vertex {int(faces.min() if faces.min() < 0 else faces.max())}; "
                         f"the file has vertices 0 to {len(mesh.vertices) - 1}")
    if not np.isfinite(mesh.vertices).all():
        raise ValueError(f"{name} has NaN or Inf vertex coordinates")
    if not float(mesh.area) > 0.0:
        raise ValueError(f"{name}: its triangles have no area (every one's vertices are collinear)")
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
    used vertices is centred at (0.5, 0.5, 0.5) and its longest side is ``1 - 2 margin``; its faces turned over
    when they enclose a negative volume (wound clockwise seen from outside), so that the winding number is +1, not
    -1, inside and the inside is found."""
    vertices = np.asarray(mesh.vertices, np.float64)
    faces = np.asarray(mesh.faces, np.int64)
    corners = vertices[faces]
    if np.einsum("ij,ij->i", corners[:, 0], np.cross(corners[:, 1], corners[:, 2])).sum() < 0.0:
        faces = faces[:, ::-1].copy()
    used = vertices[np.unique(faces)]
    lo, hi = used.min(axis=0), used.max(axis=0)
    centre = (lo + hi) / 2.0
    scale = (1.0 - 2.0 * margin) / float((hi - lo).max())
    return UnitBoxMesh((vertices - centre) * scale + 0.5, faces, centre, scale)
