"""RadianceField: the network (encoding + MLP from a point to density and colour), the occupancy grid, the ray
marcher and the compositor of a neural-radiance config, rendering rays on the tape (training) and whole views
(evaluation)."""

from __future__ import annotations

import numpy as np

from sopt import nn
from sopt.config.registry import build
from problems.neural_radiance.composite import DENSITY_ACTIVATIONS, Compositor
from problems.neural_radiance.config import IN_FEATURES, OUT_FEATURES, NeuralRadianceConfig
from problems.neural_radiance.march import RayMarcher
from problems.neural_radiance.occupancy import OccupancyGrid
from problems.neural_radiance.rays import CameraRays
from sopt.autodiff.tape import Tape

import slangpy as spy


def build_model(config: NeuralRadianceConfig) -> nn.Module:
    """encoding + network sections -> a model from unit-cube points (N, 3) to raw (density, R, G, B) (N, 4), seeded
    with ``config.seed``: the encoding before the network in a Sequential (a Frequency encoding is fused into a
    FullyFusedMLP, a TensorCoreMLP or an MLP instead, as neural_field_image builds them)."""
    det, seed, encoding, network = config.deterministic, config.seed, config.encoding, config.network
    if encoding.otype == "Identity" and encoding.scale == 1.0 and encoding.offset == 0.0:
        encoding = None
    if encoding is not None and encoding.otype != "Frequency":
        enc = build("encoding", encoding, IN_FEATURES, seed=seed, deterministic=det)
        return nn.Sequential(enc, build("network", network, enc.out_features, OUT_FEATURES, seed=seed,
                                        deterministic=det))
    return build("network", network, IN_FEATURES, OUT_FEATURES, encoding=encoding, seed=seed, deterministic=det)


class RadianceField:
    """See the module docstring; ``model``, ``occupancy``, ``marcher`` and ``compositor`` are its parts."""

    def __init__(self, config: NeuralRadianceConfig) -> None:
        self.config = config
        self.model = build_model(config)
        occ = config.occupancy
        self.occupancy = OccupancyGrid(occ.resolution, occ.update_every, occ.warmup_steps, occ.decay,
                                       occ.min_optical_thickness, config.dt,
                                       DENSITY_ACTIVATIONS[config.density_activation], config.seed)
        self.marcher = RayMarcher(config.bound, config.dt, config.samples_per_ray, self.occupancy, config.seed)
        self.compositor = Compositor(config.samples_per_ray, config.density_activation, config.background_rgb)
        self._eval_tape = Tape()
        self._eval_tape.forward_only = True

    def render_rays(self, rays: spy.Tensor, step: int, jitter: bool) -> tuple[spy.Tensor, spy.Tensor, spy.Tensor]:
        """(rgb (R, 3), depth (R, 1), opacity (R, 1)) of rays (R, 6) at optimiser step ``step`` (its occupancy
        grid), recorded on the current tape: march, network, compositing."""
        points, deltas, depths = self.marcher.march(rays, step, jitter)
        raw = self.model(points)
        return self.compositor(raw, deltas, depths)

    def render_view(self, cameras: CameraRays, image: int, step: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(rgb (H, W, 3) clipped to [0, 1], depth (H, W), opacity (H, W)) of view ``image`` of ``cameras``, rendered
        in chunks of ``config.eval_rays`` rays without jitter (waits for the GPU)."""
        w, h = cameras.cameras.width, cameras.cameras.height
        pixels = w * h
        chunk = min(self.config.eval_rays, pixels)
        rgb, depth, opacity = np.zeros((pixels, 3), np.float32), np.zeros(pixels, np.float32), \
            np.zeros(pixels, np.float32)
        tape = self._eval_tape
        for first in range(0, pixels, chunk):
            # every chunk full-sized, the last one moved back to end at the last pixel (it renders some pixels
            # twice): one shape, so the tape's pool reuses its arrays for every chunk and view instead of
            # reallocating GiBs per view (which ran an H100 out of memory after a few evaluations)
            start = min(first, pixels - chunk)
            with tape:
                self.occupancy.ensure_mean(tape)
                out = self.render_rays(cameras.rays(image, start, chunk), step, jitter=False)
            tape.submit()
            keep = slice(first - start, chunk)
            rgb[first:start + chunk] = out[0].to_numpy().reshape(chunk, 3)[keep]
            depth[first:start + chunk] = out[1].to_numpy().reshape(chunk)[keep]
            opacity[first:start + chunk] = out[2].to_numpy().reshape(chunk)[keep]
        return np.clip(rgb, 0.0, 1.0).reshape(h, w, 3), depth.reshape(h, w), opacity.reshape(h, w)
