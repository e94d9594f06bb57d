"""RayMarcher: the samples of rays through the scene box, skipping the occupancy grid's empty cells (march.slang)."""

from __future__ import annotations

import pathlib
import slangpy as spy

from sopt.autodiff import tape as tp
from sopt.runtime.kernel import Function, launch
from problems.neural_radiance.occupancy import OccupancyGrid

_FOLDER = pathlib.Path(__file__).resolve().parent
_MARCH_RAYS = Function(_FOLDER / "march.slang", "march_rays")


class RayMarcher:
    """``march(rays, step, jitter)`` -> (points (R S, 3) in unit-cube coordinates, deltas (R S, 1), depths (R S, 1)):
    march points ``dt`` apart (world units) along each ray in occupied cells of ``occupancy`` within
    [-bound, bound]^3, at most S = ``samples`` per ray (every k-th point, delta k dt, when the ray has more than S;
    march.slang); a ray's unused slots have delta 0. ``jitter``: the first point at a random fraction of dt from
    the box (seeded by (seed, step, ray)), else at dt / 2."""

    def __init__(self, bound: float, dt: float, samples: int, occupancy: OccupancyGrid, seed: int) -> None:
        self.bound, self.dt, self.samples, self.occupancy, self.seed = float(bound), float(dt), int(samples), \
            occupancy, int(seed)

    def march(self, rays: spy.Tensor, step: int, jitter: bool) -> tuple[spy.Tensor, spy.Tensor, spy.Tensor]:
        n = int(rays.shape[0])
        s = self.samples
        points = tp.new_tensor((n * s, 3), grads=False)
        deltas, depths = tp.new_tensor((n * s, 1), grads=False), tp.new_tensor((n * s, 1), grads=False)
        args = {"bound": self.bound, "dt": self.dt, "samples": s, "jitter": int(jitter)}
        occ = self.occupancy.slang(step)

        def forward(enc: spy.CommandEncoder) -> None:
            launch(_MARCH_RAYS, enc, r=spy.grid((n,)), seed=self.seed, step=int(step) & 0xFFFFFFFF,
                   rays=tp.flat(rays), occ=occ, m=args, points=tp.flat(points), deltas=tp.flat(deltas),
                   depths=tp.flat(depths))

        tp.record("RayMarcher.march", forward, None, reads=[rays], writes=[points, deltas, depths])
        return points, deltas, depths
