"""RGB images as float arrays: loading (any format Pillow reads), saving as PNG, a procedural test image,
and the pixel-centre coordinates a neural field is fitted on.

Images are ``(H, W, 3)`` float32 arrays with values in [0, 1], row 0 at the top.
"""

from __future__ import annotations

import os
import pathlib

import numpy as np
from PIL import Image, UnidentifiedImageError

from sopt import atomic_write
from sopt.validation import as_real_array, check_int


def load_image(path: str | os.PathLike[str], max_side: int | None = None) -> np.ndarray:
    """Read the image at ``path`` as ``(H, W, 3)`` float32 RGB in [0, 1] (alpha dropped, grey replicated).

    ``max_side``: when the longer side exceeds it, the image is downscaled (Lanczos) to that size, keeping
    its aspect ratio. ValueError when the path does not exist, is not a file, or is not an image.
    """
    if max_side is not None:
        max_side = check_int(max_side, "max_side", low=1)
    file = pathlib.Path(path)
    if not file.exists():
        raise ValueError(f"image path {str(file)!r} does not exist; expected a PNG/JPEG/... file")
    if not file.is_file():
        raise ValueError(f"image path {str(file)!r} is not a file; expected a PNG/JPEG/... file")
    try:
        with Image.open(file) as img:   # Pillow refuses images of more than 2 * Image.MAX_IMAGE_PIXELS pixels
            img.load()
            rgb = img.convert("RGB")
    except Image.DecompressionBombError as exc:
        raise ValueError(f"image {str(file)!r} is too large to load: {exc}") from None
    except (UnidentifiedImageError, OSError, SyntaxError) as exc:
        raise ValueError(f"{str(file)!r} is not an image Pillow can read (expected PNG, JPEG, ...): {exc}") from None
    if max_side is not None and max(rgb.size) > max_side:
        scale = max_side / max(rgb.size)
        size = (max(1, round(rgb.width * scale)), max(1, round(rgb.height * scale)))
        rgb = rgb.resize(size, Image.Resampling.LANCZOS)
    return np.asarray(rgb, dtype=np.float32) / 255.0


def save_image(path: str | os.PathLike[str], image: np.ndarray) -> None:
    """Write an ``(H, W, 3)`` (or ``(H, W)``) float image in [0, 1] as an 8-bit PNG (values clipped), atomically
    (:func:`sopt.atomic_write.write_image`: a link at ``path`` is replaced, not followed)."""
    array = as_real_array(image, "image")
    if array.ndim not in (2, 3) or (array.ndim == 3 and array.shape[2] not in (1, 3, 4)):
        raise ValueError(f"image must have shape (H, W), (H, W, 3) or (H, W, 4), got {array.shape}")
    if array.ndim == 3 and array.shape[2] == 1:
        array = array[:, :, 0]
    if not np.isfinite(array).all():
        raise ValueError(f"image holds {int((~np.isfinite(array)).sum())} NaN/Inf value(s); cannot save it")
    target = pathlib.Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    image_8bit = Image.fromarray(np.round(np.clip(array, 0.0, 1.0) * 255.0).astype(np.uint8))
    atomic_write.write_image(target, image_8bit, format="PNG")


def generated_image(size: int = 64) -> np.ndarray:
    """A deterministic ``(size, size, 3)`` test image: smooth colour gradients, soft-edged discs and a ring,
    and a sinusoidal pattern; detailed enough that a field must learn edges and mid frequencies, smooth
    enough (edges about 1.5 px wide) to be representable without aliasing. No randomness, no download."""
    n = check_int(size, "size", low=4)
    t = (np.arange(n) + 0.5) / n
    x, y = np.meshgrid(t, t)  # x to the right, y downwards
    img = np.stack([0.25 + 0.5 * x, 0.2 + 0.35 * y + 0.15 * np.sin(2 * np.pi * x), 0.7 - 0.45 * x * y], axis=-1)
    soft = 1.5 / n  # edge width in image units

    def disc(cx: float, cy: float, r: float) -> np.ndarray:
        return np.clip((r - np.hypot(x - cx, y - cy)) / soft + 0.5, 0.0, 1.0)[..., None]

    img = img * (1 - disc(0.32, 0.35, 0.2)) + disc(0.32, 0.35, 0.2) * np.array([0.95, 0.8, 0.2])
    ring = disc(0.7, 0.68, 0.22) * (1 - disc(0.7, 0.68, 0.13))
    img = img * (1 - ring) + ring * np.array([0.15, 0.35, 0.85])
    stripes = 0.5 + 0.5 * np.sin(2 * np.pi * 3 * (x + 0.5 * y))
    band = disc(0.3, 0.78, 0.15)
    img = img * (1 - band) + band * (0.2 + 0.6 * stripes[..., None] * np.array([1.0, 0.3, 0.5]))
    return np.clip(img, 0.0, 1.0).astype(np.float32)


def pixel_coordinates(height: int, width: int) -> np.ndarray:
    """Pixel-centre coordinates ``(height * width, 2)`` float32, row-major (row 0 first), columns
    ``(x, y) = ((j + 0.5) / width, (i + 0.5) / height)`` in (0, 1) for pixel (row i, column j)."""
    h, w = check_int(height, "height", low=1), check_int(width, "width", low=1)
    x, y = np.meshgrid((np.arange(w) + 0.5) / w, (np.arange(h) + 0.5) / h)
    return np.stack([x.ravel(), y.ravel()], axis=1).astype(np.float32)
