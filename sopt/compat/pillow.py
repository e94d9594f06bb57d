"""Pillow internals sopt's image loader uses.

- ``sixteen_bit_colour``: Pillow opens a 16-bit colour PNG (RGB, RGBA, grey + alpha) in an 8-bit mode, keeping
  the high byte of each sample; its public API has no 16-bit colour modes. The PNG's one decoder tile is decoded
  again with the raw mode swapped (``ImageFile.tile``'s ``args``), once for the low bytes, so each sample keeps its
  16 bits. On a Pillow that is not in CHECKED_VERSIONS the tile is checked to look as it does in those; where it
  does not, None is returned and the loader reads the 8 bits Pillow gives.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from sopt.compat import is_checked

CHECKED_VERSIONS = ("12.3.0", "13.0.0")

# (Pillow's raw mode for the high bytes) -> the raw mode that unpacks the low bytes in their place
_LOW_BYTES = {"RGB;16B": "RGB;16L", "RGBA;16B": "RGBA;16L"}


def version() -> str:
    import PIL
    return PIL.__version__


def checked() -> bool:
    return is_checked(version(), CHECKED_VERSIONS)


def sixteen_bit_colour(img: Any, reopen: Callable[[], Any]) -> np.ndarray | None:
    """(H, W, C) uint16 of the 16-bit colour PNG ``img`` (opened, not yet loaded), or None for any other image.
    ``reopen()`` opens the same file again (for the low bytes)."""
    tile = getattr(img, "tile", None)
    if not tile or len(tile) != 1 or tile[0][0] != "zip" or not hasattr(tile[0], "_replace"):
        return None
    rawmode = tile[0][3]
    if not isinstance(rawmode, str):
        return None
    if rawmode == "LA;16B":   # 4 bytes a pixel: unpacked byte for byte as RGBA, both bytes of L and A at once
        img.tile = [tile[0]._replace(args="RGBA")]
        img.load()
        raw = np.asarray(img).astype(np.uint16)
        return np.stack([raw[..., 0] * 256 + raw[..., 1], raw[..., 2] * 256 + raw[..., 3]], axis=-1)
    if rawmode not in _LOW_BYTES:
        return None
    img.load()
    high = np.asarray(img).astype(np.uint16)
    with reopen() as again:
        again.tile = [again.tile[0]._replace(args=_LOW_BYTES[rawmode])]
        again.load()
        low = np.asarray(again).astype(np.uint16)
    return high * 256 + low
