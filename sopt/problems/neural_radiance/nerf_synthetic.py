"""The NeRF-synthetic dataset layout (Mildenhall et al. 2020; Blender's Lego, Chair, ...): a folder holding
``transforms_train.json`` and ``transforms_test.json`` (``transforms_val.json`` is not used), each::

    {"camera_angle_x": 0.6911,                      # horizontal field of view, radians
     "frames": [{"file_path": "./train/r_0",        # the image, relative to the folder; ".png" added when missing
                 "transform_matrix": [[...4 x 4 camera-to-world...]]}, ...]}

with RGBA PNG frames composited here on the background (``rgb * a + background * (1 - a)``, in linear 8-bit
values as NeRF's loaders do) and downscaled (area average) so the longer side is at most ``max_side``.
"""

from __future__ import annotations

import json
import os
import pathlib
from typing import Any

import numpy as np
from PIL import Image, UnidentifiedImageError

from sopt.problems.neural_radiance.cameras import Cameras
from sopt.problems.neural_radiance.views import Views
from sopt.regular_file import file_problem, read_bytes

MAX_JSON_BYTES = 16 * 2**20
SPLITS = ("train", "test")


def _transforms(folder: pathlib.Path, split: str) -> dict[str, Any]:
    path = folder / f"transforms_{split}.json"
    problem = file_problem(path)
    if problem is not None:
        raise ValueError(f"NeRF-synthetic data {str(folder)!r}: {path.name} {problem}; expected the files "
                         f"{', '.join(f'transforms_{s}.json' for s in SPLITS)} and their PNG frames")
    try:
        data = json.loads(read_bytes(path, MAX_JSON_BYTES))
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"{str(path)!r} is not valid JSON: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("frames"), list) or not data["frames"]:
        raise ValueError(f"{str(path)!r}: expected an object with a non-empty 'frames' list")
    angle = data.get("camera_angle_x")
    if not isinstance(angle, (int, float)) or not 0.0 < float(angle) < np.pi:
        raise ValueError(f"{str(path)!r}: camera_angle_x = {angle!r}; expected a number of radians in (0, pi)")
    return data


def _frame(folder: pathlib.Path, frame: Any, where: str, background: np.ndarray, max_side: int
           ) -> tuple[np.ndarray, np.ndarray]:
    """(image (H, W, 3) float32 on the background, downscaled; c2w (4, 4)) of one frame entry."""
    if not isinstance(frame, dict) or not isinstance(frame.get("file_path"), str):
        raise ValueError(f"{where}: expected an object with a 'file_path' string and a 'transform_matrix'")
    c2w = np.asarray(frame.get("transform_matrix"), dtype=object)
    try:
        c2w = c2w.astype(np.float64)
    except (TypeError, ValueError):
        c2w = np.zeros(0)
    if c2w.shape != (4, 4) or not np.isfinite(c2w).all():
        raise ValueError(f"{where}: transform_matrix must be a 4 x 4 array of finite numbers")
    path = folder / frame["file_path"]
    if path.suffix.lower() != ".png":
        path = path.with_name(path.name + ".png")
    problem = file_problem(path)
    if problem is not None:
        raise ValueError(f"{where}: the frame {str(path)!r} {problem}")
    try:
        with Image.open(path) as img:
            img.load()
            rgba = np.asarray(img.convert("RGBA"), np.float64) / 255.0
    except (UnidentifiedImageError, OSError, SyntaxError, Image.DecompressionBombError) as exc:
        raise ValueError(f"{where}: {str(path)!r} is not an image Pillow can read: {exc}") from None
    rgb = rgba[..., :3] * rgba[..., 3:] + background * (1.0 - rgba[..., 3:])
    h, w = rgb.shape[:2]
    if max(h, w) > max_side:
        scale = max_side / max(h, w)
        size = (max(1, round(w * scale)), max(1, round(h * scale)))
        rgb = np.stack([np.asarray(Image.fromarray(rgb[..., c].astype(np.float32), mode="F").resize(
            size, Image.Resampling.BOX)) for c in range(3)], axis=-1)
    return np.clip(rgb, 0.0, 1.0).astype(np.float32), c2w


def load_split(folder: str | os.PathLike[str], split: str, background: tuple[float, float, float], max_side: int,
               limit: int | None = None) -> Views:
    """The views of ``transforms_<split>.json`` in ``folder`` (the first ``limit`` frames when given), composited on
    ``background`` and downscaled to at most ``max_side`` pixels on the longer side. ValueError naming the file
    and what is wrong (missing, malformed, frames of different sizes)."""
    folder = pathlib.Path(folder)
    data = _transforms(folder, split)
    frames = data["frames"][:limit] if limit is not None else data["frames"]
    bg = np.asarray(background, np.float64)
    images, poses = [], []
    for i, frame in enumerate(frames):
        image, c2w = _frame(folder, frame, f"transforms_{split}.json frames[{i}]", bg, max_side)
        if images and image.shape != images[0].shape:
            raise ValueError(f"transforms_{split}.json frames[{i}]: image of {image.shape[1]} x {image.shape[0]} "
                             f"pixels after downscaling, the first frame's is {images[0].shape[1]} x "
                             f"{images[0].shape[0]}; every frame must have one size")
        images.append(image)
        poses.append(c2w)
    h, w = images[0].shape[:2]
    cameras = Cameras(np.stack(poses), w, h, float(data["camera_angle_x"]))
    return Views(np.stack(images), cameras)
