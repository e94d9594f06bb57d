"""Rays on the GPU (cameras.slang): the training batch of each step (random pixels of the training views, their
rays and colours) and the rays of every pixel of a view."""

from __future__ import annotations

import pathlib
from typing import Any

import numpy as np
import slangpy as spy

from sopt.autodiff import tape as tp
from sopt.runtime.device import get_device
from sopt.runtime.kernel import Function, launch
from problems.neural_radiance.cameras import Cameras
from problems.neural_radiance.views import Views

_FOLDER = pathlib.Path(__file__).resolve().parent
_VIEW_RAYS = Function(_FOLDER / "cameras.slang", "view_rays")
_TRAINING_RAYS = Function(_FOLDER / "cameras.slang", "training_rays")

MAX_PIXELS = (2**31 - 1) // 3   # 32-bit indices of the (views, H, W, 3) pixel tensor


class CameraRays:
    """``cameras`` on the GPU: ``rays(image, first, count)`` -> (count, 6) rays (origin | unit direction) of pixels
    [first, first + count) of view ``image`` in row-major order."""

    def __init__(self, cameras: Cameras) -> None:
        self.cameras = cameras
        self._c2w = spy.Tensor.from_numpy(get_device(), cameras.c2w_rows())

    def slang(self) -> dict[str, Any]:
        """cameras.slang's ``Cameras`` struct."""
        return {"c2w": self._c2w, **self.cameras.slang()}

    def rays(self, image: int, first: int, count: int) -> spy.Tensor:
        """(count, 6) float32 rays (recorded on the tape, else run now)."""
        pixels = self.cameras.width * self.cameras.height
        if not (0 <= image < len(self.cameras) and 0 <= first and count >= 1 and first + count <= pixels):
            raise ValueError(f"CameraRays.rays: image {image} of {len(self.cameras)}, pixels [{first}, {first + count}) "
                             f"of {pixels}")
        out = tp.new_tensor((count, 6), grads=False)

        def forward(enc: spy.CommandEncoder) -> None:
            launch(_VIEW_RAYS, enc, r=spy.grid((count,)), cams=self.slang(), image=image, first=first,
                   rays=tp.flat(out))

        tp.record("CameraRays.rays", forward, None, writes=[out])
        return out


class TrainingRays:
    """The training views on the GPU; ``sample(step)`` -> (rays (R, 6), colours (R, 3)) of ``rays_per_batch``
    pixels drawn uniformly (with replacement) from every pixel of every view, a pure function of (seed, step); with
    ``jitter`` each ray passes through a uniform random point of its pixel (the pixel's colour is the mean over its
    area), else through its centre."""

    def __init__(self, views: Views, rays_per_batch: int, seed: int, jitter: bool = False) -> None:
        if views.images.size // 3 > MAX_PIXELS:
            raise ValueError(f"TrainingRays: {views.images.size // 3} pixels, more than {MAX_PIXELS} (32-bit indices)")
        self.views, self.rays_per_batch, self.seed, self.jitter = views, int(rays_per_batch), int(seed), bool(jitter)
        self.cameras = CameraRays(views.cameras)
        self._pixels = spy.Tensor.from_numpy(get_device(), np.ascontiguousarray(views.images.reshape(-1)))

    def sample(self, step: int) -> tuple[spy.Tensor, spy.Tensor]:
        r = self.rays_per_batch
        rays, colours = tp.new_tensor((r, 6), grads=False), tp.new_tensor((r, 3), grads=False)

        def forward(enc: spy.CommandEncoder) -> None:
            launch(_TRAINING_RAYS, enc, r=spy.grid((r,)), seed=self.seed, step=int(step) & 0xFFFFFFFF,
                   jitter=int(self.jitter), cams=self.cameras.slang(), images=len(self.views), pixels=self._pixels,
                   rays=tp.flat(rays), target=tp.flat(colours))

        tp.record("TrainingRays.sample", forward, None, writes=[rays, colours])
        return rays, colours
