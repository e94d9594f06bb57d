"""Views: posed images a radiance field is trained on or evaluated against."""

from __future__ import annotations

import dataclasses

import numpy as np

from problems.neural_radiance.cameras import Cameras


@dataclasses.dataclass(frozen=True)
class Views:
    """``images`` (N, H, W, 3) float32 in [0, 1], composited on the background, seen by ``cameras`` (N views of
    W x H pixels); ``depth`` (N, H, W) float32, the true distance along each pixel's ray (inf where it sees the
    background), or None when unknown (a loaded dataset)."""

    images: np.ndarray
    cameras: Cameras
    depth: np.ndarray | None = None

    def __post_init__(self) -> None:
        n, h, w = len(self.cameras), self.cameras.height, self.cameras.width
        if self.images.shape != (n, h, w, 3) or self.images.dtype != np.float32:
            raise ValueError(f"Views images must be float32 of shape ({n}, {h}, {w}, 3) for {n} cameras of {w} x {h} "
                             f"pixels, got {self.images.dtype} {self.images.shape}")
        if self.depth is not None and self.depth.shape != (n, h, w):
            raise ValueError(f"Views depth must have shape ({n}, {h}, {w}), got {self.depth.shape}")

    def __len__(self) -> int:
        return len(self.cameras)
