"""The NeRF-synthetic dataset layout (Mildenhall et al. 2020; Blender's Lego, Chair, ...): a folder holding
``transforms_train.json`` and ``transforms_test.json`` (``transforms_val.json`` is not used), each::

    {"camera_angle_x": 0.6911,                      # horizontal field of view, radians
     "frames": [{"file_path": "./train/r_0",        # the image, relative to the folder; ".png" added when missing
                 "transform_matrix": [[...4 x 4 camera-to-world...]]}, ...]}

with PNG frames (RGBA, RGB, grey, grey + alpha or a palette; 8 or 16 bits, at their own levels) composited here
on the background (``rgb * a + background * (1 - a)``, in linear values as NeRF's loaders do) and downscaled (area
average) so the longer side is at most ``max_side``. Each file is bounded before it is parsed (its bytes, its JSON
nesting, each frame's pixels from its header), and each camera is checked: ``camera_angle_x`` a number of radians in
(0, pi), each ``transform_matrix`` a rotation and a translation of numbers float32 holds.
"""

from __future__ import annotations

import json
import math
import os
import pathlib
from typing import Any

import numpy as np
from PIL import Image

from sopt.data.image import as_rgba, image_header_size, read_levels, resize
from sopt.utils.nesting import text_depth
from problems.neural_radiance.cameras import Cameras
from problems.neural_radiance.views import Views
from sopt.utils.regular_file import FileTooLargeError, file_problem, read_bytes

MAX_JSON_BYTES = 16 * 2**20
MAX_JSON_DEPTH = 8   # a transforms file nests 4 levels: the object, frames, a frame, its matrix's rows
SPLITS = ("train", "test")
MIN_ANGLE = 1e-3     # radians: below it neighbouring pixels' rays are one ray in float32
MAX_ANGLE = math.pi - 1e-3
MAX_TRANSLATION = 1e6   # world units of a camera's position
RIGID_TOLERANCE = 1e-3  # of |R^T R - I| (the matrices are written to 6-7 digits) and of the bottom row


def _number_problem(value: Any) -> str | None:
    """Why a JSON value is not a number a camera can use (a string, true/false, null, NaN/Infinity, a value float32
    stores as inf), or None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"is {json.dumps(value)[:40]}, not a number"
    if not math.isfinite(value):
        return f"is {value}, not a finite number"
    if abs(value) > float(np.finfo(np.float32).max):
        return f"is {value:g}, which float32 stores as inf"
    return None


def _transforms(folder: pathlib.Path, split: str) -> tuple[pathlib.Path, dict[str, Any]]:
    path = folder / f"transforms_{split}.json"
    problem = file_problem(path)
    if problem is not None:
        raise ValueError(f"NeRF-synthetic data {str(folder)!r}: {path.name} {problem}; expected the files "
                         f"{', '.join(f'transforms_{s}.json' for s in SPLITS)} and their PNG frames")
    name = repr(str(path))
    try:
        text = read_bytes(path, MAX_JSON_BYTES).decode("utf-8-sig")
    except FileTooLargeError as exc:
        raise ValueError(f"{name} holds {exc.size} bytes or more; at most {MAX_JSON_BYTES} bytes "
                         f"({MAX_JSON_BYTES // 2**20} MiB) are read") from None
    except UnicodeDecodeError as exc:
        raise ValueError(f"{name} is not UTF-8 text: {exc}") from None
    depth = text_depth(text)   # before json, which recurses on brackets
    if depth > MAX_JSON_DEPTH:
        raise ValueError(f"{name} is nested {depth} levels deep; at most {MAX_JSON_DEPTH} (a transforms file "
                         "nests 4: the object, frames, a frame, its matrix's rows)")
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"{name} is not valid JSON: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("frames"), list) or not data["frames"]:
        raise ValueError(f"{name}: expected an object with a non-empty 'frames' list")
    angle = data.get("camera_angle_x")
    problem = _number_problem(angle) if "camera_angle_x" in data else "is missing"
    if problem is None and not MIN_ANGLE <= angle <= MAX_ANGLE:
        problem = f"is {angle!r} radians"
    if problem is not None:
        raise ValueError(f"{name}: camera_angle_x {problem}; expected the horizontal field of view, a number of "
                         f"radians from {MIN_ANGLE:g} to pi - {MIN_ANGLE:g} (Lego's: 0.6911)")
    return path, data


def _pose(frame: dict[str, Any], where: str) -> np.ndarray:
    """The 4 x 4 camera-to-world matrix of a frame entry: rows of numbers that float32 holds, a rotation (R^T R = I,
    det R = +1) and a translation of at most MAX_TRANSLATION, the bottom row (0, 0, 0, 1)."""
    where = f"{where}.transform_matrix"
    allowed = "a camera-to-world matrix: 4 rows of 4 numbers, a rotation and a translation over the row 0 0 0 1"
    rows = frame.get("transform_matrix")
    if "transform_matrix" not in frame:
        raise ValueError(f"{where} is missing; expected {allowed}")
    if not (isinstance(rows, list) and len(rows) == 4 and all(isinstance(r, list) and len(r) == 4 for r in rows)):
        shape = (f"{len(rows)} rows of {', '.join(str(len(r)) if isinstance(r, list) else 'a non-list' for r in rows)}"
                 if isinstance(rows, list) else json.dumps(rows)[:40])
        raise ValueError(f"{where} is {shape}; expected {allowed}")
    for i, row in enumerate(rows):
        for j, value in enumerate(row):
            problem = _number_problem(value)
            if problem is not None:
                raise ValueError(f"{where}[{i}][{j}] {problem}; expected {allowed}")
    c2w = np.array(rows, np.float64)
    if np.abs(c2w[3] - (0.0, 0.0, 0.0, 1.0)).max() > RIGID_TOLERANCE:
        raise ValueError(f"{where}: the bottom row is {c2w[3].tolist()}, not [0, 0, 0, 1]; expected {allowed}")
    rotation = c2w[:3, :3]
    error = float(np.abs(rotation.T @ rotation - np.eye(3)).max())
    if error > RIGID_TOLERANCE or np.linalg.det(rotation) < 0.0:
        what = (f"is not orthonormal (|R^T R - I| up to {error:.3g}, at most {RIGID_TOLERANCE:g}: scaled, sheared "
                "or singular)" if error > RIGID_TOLERANCE else "is a reflection (determinant -1)")
        raise ValueError(f"{where}: the rotation (the top left 3 x 3) {what}; expected {allowed}")
    distance = float(np.linalg.norm(c2w[:3, 3]))
    if distance > MAX_TRANSLATION:
        raise ValueError(f"{where}: the camera is {distance:g} world units from the origin; at most "
                         f"{MAX_TRANSLATION:g}")
    return c2w


def _frame_path(folder: pathlib.Path, file_path: str) -> pathlib.Path:
    """The PNG a frame's ``file_path`` names (".png" added when it has another suffix or none)."""
    path = folder / file_path
    return path if path.suffix.lower() == ".png" else path.with_name(path.name + ".png")


def _frame(folder: pathlib.Path, frame: Any, where: str, background: np.ndarray, max_side: int
           ) -> tuple[np.ndarray, np.ndarray]:
    """(image (H, W, 3) float32 on the background, downscaled; c2w (4, 4)) of one frame entry."""
    if not isinstance(frame, dict) or not isinstance(frame.get("file_path"), str):
        raise ValueError(f"{where}: expected an object with a 'file_path' string and a 'transform_matrix'")
    c2w = _pose(frame, where)
    path = _frame_path(folder, frame["file_path"])
    problem = file_problem(path)
    if problem is not None:
        raise ValueError(f"{where}: the frame {str(path)!r} {problem}")
    try:
        rgba = as_rgba(read_levels(path))
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None
    rgb = rgba[..., :3] * rgba[..., 3:] + background.astype(np.float32) * (1.0 - rgba[..., 3:])
    h, w = rgb.shape[:2]
    if max(h, w) > max_side:
        scale = max_side / max(h, w)
        rgb = resize(rgb, (max(1, round(w * scale)), max(1, round(h * scale))), Image.Resampling.BOX)
    return np.clip(rgb, 0.0, 1.0).astype(np.float32), c2w


def load_split(folder: str | os.PathLike[str], split: str, background: tuple[float, float, float], max_side: int,
               limit: int | None = None) -> Views:
    """The views of ``transforms_<split>.json`` in ``folder`` (the first ``limit`` frames when given), composited on
    ``background`` and downscaled to at most ``max_side`` pixels on the longer side. ValueError naming the file
    and what is wrong (missing, malformed, frames of different sizes)."""
    folder = pathlib.Path(folder)
    path, data = _transforms(folder, split)
    frames = data["frames"][:limit] if limit is not None else data["frames"]
    bg = np.asarray(background, np.float64)
    images, poses = [], []
    for i, frame in enumerate(frames):
        image, c2w = _frame(folder, frame, f"{str(path)!r} frames[{i}]", bg, max_side)
        if images and image.shape != images[0].shape:
            raise ValueError(f"{str(path)!r} frames[{i}]: image of {image.shape[1]} x {image.shape[0]} "
                             f"pixels after downscaling, the first frame's is {images[0].shape[1]} x "
                             f"{images[0].shape[0]}; every frame must have one size")
        images.append(image)
        poses.append(c2w)
    h, w = images[0].shape[:2]
    cameras = Cameras(np.stack(poses), w, h, float(data["camera_angle_x"]))
    return Views(np.stack(images), cameras)


def check_data(folder: str | os.PathLike[str], limits: dict[str, int | None]) -> None:
    """What :func:`load_split` checks of each split in ``limits`` (split -> its ``limit``) short of decoding a pixel:
    the transforms file, each loaded frame's entry and camera, that its PNG exists and the size in its header;
    ValueError (load_split's line) for the first problem. Cheap enough for config validation."""
    folder = pathlib.Path(folder)
    for split, limit in limits.items():
        path, data = _transforms(folder, split)
        frames = data["frames"][:limit] if limit is not None else data["frames"]
        for i, frame in enumerate(frames):
            where = f"{str(path)!r} frames[{i}]"
            if not isinstance(frame, dict) or not isinstance(frame.get("file_path"), str):
                raise ValueError(f"{where}: expected an object with a 'file_path' string and a 'transform_matrix'")
            _pose(frame, where)
            png = _frame_path(folder, frame["file_path"])
            problem = file_problem(png)
            if problem is not None:
                raise ValueError(f"{where}: the frame {str(png)!r} {problem}")
            try:
                image_header_size(png)
            except ValueError as exc:
                raise ValueError(f"{where}: {exc}") from None


def input_files(folder: str | os.PathLike[str], limits: dict[str, int | None]) -> list[pathlib.Path]:
    """The files :func:`load_split` reads for each split of ``limits`` (split -> its ``limit``): the split's
    transforms file, then the PNG of each frame it loads. ValueError as load_split's for a malformed transforms
    file."""
    folder = pathlib.Path(folder)
    files = []
    for split, limit in limits.items():
        path, data = _transforms(folder, split)
        files.append(path)
        frames = data["frames"][:limit] if limit is not None else data["frames"]
        for i, frame in enumerate(frames):
            if not isinstance(frame, dict) or not isinstance(frame.get("file_path"), str):
                raise ValueError(f"{str(path)!r} frames[{i}]: expected an object with a 'file_path' string and a "
                                 "'transform_matrix'")
            files.append(_frame_path(folder, frame["file_path"]))
    return files
