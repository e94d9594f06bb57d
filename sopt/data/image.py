"""RGB images as float arrays: loading (any format Pillow reads), saving as PNG, a procedural test image,
and the pixel-centre coordinates a neural field is fitted on.

Images are ``(H, W, 3)`` float32 arrays with values in [0, 1], row 0 at the top. A file loads at its own levels:
``v / 255`` of an 8-bit one, ``v / 65535`` of a 16-bit one (grey, grey + alpha, RGB and RGBA PNGs: Pillow keeps
only the high byte of 16-bit colour PNGs, so :func:`read_levels` decodes their low bytes too). The size in a
file's header is checked before anything is decoded (:func:`image_size_problem`).
"""

from __future__ import annotations

import os
import pathlib
from typing import BinaryIO

import numpy as np
from PIL import Image, UnidentifiedImageError

from sopt.compat import pillow as compat_pillow
from sopt.utils import atomic_write
from sopt.utils.validation import as_real_array, check_int

MAX_IMAGE_SIDE = 8192        # pixels of either side of an image file that is decoded
DECODE_BYTES_PER_PIXEL = 48  # what decoding one pixel may take at its peak (16-bit RGBA twice, float32 copies)
_EXPECTED = "expected a PNG/JPEG/... file"


class ImageRefused(ValueError):
    """An image file refused with a line naming it (too large, levels of an unknown range)."""


def image_size_problem(width: int, height: int, memory: int | None = None) -> str | None:
    """Why an image of ``width`` x ``height`` pixels is not decoded (a side over MAX_IMAGE_SIDE, or more than half
    of ``memory`` bytes, default the host's available memory, to decode it), in words, or None."""
    if max(width, height) > MAX_IMAGE_SIDE:
        return f"is {width} x {height} pixels; at most {MAX_IMAGE_SIDE} pixels a side are decoded"
    if memory is None:
        from sopt.runtime.device import host_memory_available
        memory = host_memory_available()
    need = width * height * DECODE_BYTES_PER_PIXEL
    if need > memory // 2:
        return (f"is {width} x {height} pixels; decoding it takes about {need / 2**30:.3g} GiB, more than half of "
                f"the {memory / 2**30:.3g} GiB of host memory available")
    return None


def _open_checked(file: BinaryIO, name: str) -> Image.Image:
    """The image in ``file`` (from its start) opened lazily (header only), its size checked before any pixel is
    decoded."""
    file.seek(0)
    img = Image.open(file)
    problem = image_size_problem(*img.size)
    if problem is not None:
        img.close()
        raise ImageRefused(f"image {name} {problem}; downscale it first")
    return img


def image_header_size(path: str | os.PathLike[str]) -> tuple[int, int]:
    """(width, height) of the image file at ``path`` from its header alone (nothing decoded); ValueError naming
    the file when it is no regular file, not an image or too large to decode (:func:`image_size_problem`)."""
    from sopt.utils.regular_file import open_regular

    name = repr(str(path))
    try:
        with open_regular(path) as f, Image.open(f) as img:
            size = img.size
    except Image.DecompressionBombError as exc:
        raise ValueError(f"image {name} is too large to load: {exc}") from None
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as exc:
        raise ValueError(f"{name} is not an image Pillow can read (expected PNG, JPEG, ...): {exc}") from None
    problem = image_size_problem(*size)
    if problem is not None:
        raise ImageRefused(f"image {name} {problem}; downscale it first")
    return size


def read_levels(path: str | os.PathLike[str]) -> np.ndarray:
    """The image at ``path`` as ``(H, W, C)`` float32 in [0, 1] at the file's own levels: C = 1 (grey), 2 (grey +
    alpha), 3 (RGB) or 4 (RGBA); a palette's colours (and its transparency) as RGB(A), 16-bit files divided by
    65535, 8-bit ones by 255. ValueError naming the file when it does not exist, is no regular file, is larger
    than :func:`image_size_problem` allows (found from its header, before decoding) or is not an image."""
    from sopt.utils.regular_file import file_problem, open_regular

    name = repr(str(path))
    problem = file_problem(path)
    if problem == "does not exist":
        raise ValueError(f"image path {name} does not exist; {_EXPECTED}")
    if problem is not None:
        raise ValueError(f"image path {name} {'is not a file' if problem == 'is a folder' else problem}; {_EXPECTED}")
    try:
        with open_regular(path) as file, _open_checked(file, name) as img:
            wide = compat_pillow.sixteen_bit_colour(img, lambda: _open_checked(file, name))
            if wide is not None:
                return wide.astype(np.float32) / np.float32(65535.0)
            img.load()
            mode = img.mode
            if mode.startswith("I;16"):
                return (np.asarray(img).astype(np.float32) / np.float32(65535.0))[..., None]
            if mode == "I":   # 32-bit integers: 16-bit grey as older Pillow versions open it
                grey = np.asarray(img)
                if grey.size and (grey.min() < 0 or grey.max() > 65535):
                    raise ImageRefused(f"image {name} holds 32-bit integer levels from {grey.min()} to {grey.max()}; "
                                     "expected 8- or 16-bit levels")
                return (grey.astype(np.float32) / np.float32(65535.0))[..., None]
            if mode == "F":
                grey = np.asarray(img, np.float32)
                if grey.size and not (np.isfinite(grey).all() and grey.min() >= 0.0 and grey.max() <= 1.0):
                    raise ImageRefused(f"image {name} holds floating-point levels outside [0, 1] (or NaN); "
                                     "expected levels in [0, 1]")
                return grey[..., None]
            has_alpha = "A" in mode or "a" in mode or "transparency" in img.info
            grey = mode in ("1", "L", "LA", "La")
            target = ("LA" if has_alpha else "L") if grey else ("RGBA" if has_alpha else "RGB")
            array = np.asarray(img if mode == target else img.convert(target), np.float32) / np.float32(255.0)
            return array[..., None] if array.ndim == 2 else array
    except ImageRefused:
        raise
    except Image.DecompressionBombError as exc:
        raise ValueError(f"image {name} is too large to load: {exc}") from None
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as exc:   # Pillow's, for a damaged file
        raise ValueError(f"{name} is not an image Pillow can read (expected PNG, JPEG, ...): {exc}") from None


def as_rgba(levels: np.ndarray) -> np.ndarray:
    """``(H, W, 4)``: :func:`read_levels`' array with grey replicated to RGB and alpha 1 where the file has none."""
    channels = levels.shape[2]
    rgb = np.repeat(levels[..., :1], 3, axis=2) if channels <= 2 else levels[..., :3]
    alpha = levels[..., -1:] if channels in (2, 4) else np.ones_like(levels[..., :1])
    return np.concatenate([rgb, alpha], axis=2)


def resize(image: np.ndarray, size: tuple[int, int], method: Image.Resampling) -> np.ndarray:
    """``(H, W, C)`` float32 ``image`` resampled to ``size`` = (width, height), each channel in floating point
    (no rounding to 8 bits)."""
    return np.stack([np.asarray(Image.fromarray(np.ascontiguousarray(image[..., c], np.float32), mode="F").resize(
        size, method)) for c in range(image.shape[2])], axis=-1)


def load_image(path: str | os.PathLike[str], max_side: int | None = None) -> np.ndarray:
    """Read the image at ``path`` as ``(H, W, 3)`` float32 RGB in [0, 1] (alpha dropped, grey replicated) at its
    own levels (:func:`read_levels`: 16-bit files keep their 16 bits).

    ``max_side``: when the longer side exceeds it, the image is downscaled (Lanczos, in floating point) to that
    size, keeping its aspect ratio. ValueError when the path does not exist, is not a file, is too large or is
    not an image.
    """
    if max_side is not None:
        max_side = check_int(max_side, "max_side", low=1)
    rgb = as_rgba(read_levels(path))[..., :3]
    h, w = rgb.shape[:2]
    if max_side is not None and max(h, w) > max_side:
        scale = max_side / max(h, w)
        rgb = np.clip(resize(rgb, (max(1, round(w * scale)), max(1, round(h * scale))), Image.Resampling.LANCZOS),
                      0.0, 1.0)
    return np.ascontiguousarray(rgb, np.float32)


def save_image(path: str | os.PathLike[str], image: np.ndarray) -> None:
    """Write an ``(H, W, 3)`` (or ``(H, W)``) float image in [0, 1] as an 8-bit PNG (values clipped), atomically
    (:func:`sopt.utils.atomic_write.write_image`: a link at ``path`` is replaced, not followed)."""
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
