"""SDFSampler: the training batches of neural_sdf, drawn on the GPU from a pool of points whose exact signed
distance is known.

Round r's pool (``pool_size`` points, a pure function of (seed, r)) is drawn as instant-ngp draws its SDF training
points: a share uniform in the unit box, a share on the surface (triangles by area), the rest near it (surface
points moved by Gaussian offsets); then :class:`MeshTruth` computes their signed distance. Each step's batch is
``batch_size`` rows of the pool (sopt.train.BatchSampler: uniform with replacement, a pure function of (seed, step)).
With ``resample_every = k > 0`` the pool is redrawn at steps 0, k, 2k, ... (round step // k) within that step's
command buffer, so a resumed run sees the same pools and batches as one that never stopped.
"""

from __future__ import annotations

import slangpy as spy

from sopt.runtime import device as dev
from problems.neural_sdf.truth import MeshTruth
from sopt.train import BatchSampler
from sopt.train.batch_sampler import Batch
from sopt.train.progress import notice
from sopt.utils.validation import check_float, check_int


class SDFSampler:
    """Batches of (points (B, 3) in [0, 1]^3, signed distances (B, 1)) of ``truth``'s mesh; see the module
    docstring. ``n_uniform`` and ``n_surface`` of the ``pool_size`` points are uniform and on the surface, the
    rest near it with offsets N(0, near_sigma^2 I) (box units)."""

    def __init__(self, truth: MeshTruth, pool_size: int, batch_size: int, n_uniform: int, n_surface: int,
                 near_sigma: float, resample_every: int = 0, seed: int = 0) -> None:
        self.truth = truth
        self.pool_size = check_int(pool_size, "pool_size", low=1)
        self.n_uniform = check_int(n_uniform, "n_uniform", low=0)
        self.n_surface = check_int(n_surface, "n_surface", low=0)
        if self.n_uniform + self.n_surface > self.pool_size:
            raise ValueError(f"n_uniform + n_surface = {self.n_uniform + self.n_surface} exceeds pool_size "
                             f"{self.pool_size}")
        self.near_sigma = check_float(near_sigma, "near_sigma", low=0.0)
        self.resample_every = check_int(resample_every, "resample_every", low=0)
        self.seed = check_int(seed, "seed", low=0)
        device = dev.get_device()
        self.points = spy.Tensor.empty(device, (self.pool_size, 3), "float")
        self.sdf = spy.Tensor.empty(device, (self.pool_size, 1), "float")
        self.winding = spy.Tensor.empty(device, (self.pool_size,), "float")
        self.round: int | None = None   # the round the pool holds (None: not drawn yet)
        self.batches = BatchSampler(self.points, self.sdf, batch_size, seed=seed)

    def round_of(self, step: int) -> int:
        """The pool round step ``step`` trains on."""
        return step // self.resample_every if self.resample_every else 0

    def draw_pool(self, round: int, encoder: spy.CommandEncoder | None = None) -> None:
        """Record the draw of round ``round``'s points and their signed distances (or run them now)."""
        if self.round is None:   # the first pool: a step's GPU work that the next wait for the GPU sees whole
            again = f", again every {self.resample_every} steps" if self.resample_every else ""
            notice(f"neural_sdf: ground truth of the training pool: {self.truth.size(self.pool_size)}"
                   f"{', computed with the first step' if encoder is not None else ''}{again}")
        self.truth.record_sample(self.points, self.seed, round, self.n_uniform, self.n_surface, self.near_sigma,
                                 encoder)
        self.truth.record_signed_distance(self.points, self.sdf, self.winding, encoder)
        self.round = round

    def sample(self, step: int, encoder: spy.CommandEncoder | None = None) -> Batch:
        """The batch of ``step`` (the pool redrawn first when the step starts a new round)."""
        round = self.round_of(step)
        if round != self.round:
            self.draw_pool(round, encoder)
        return self.batches.sample(step, encoder)

    def __repr__(self) -> str:
        return (f"SDFSampler(pool_size={self.pool_size}, batch_size={self.batches.batch_size}, "
                f"n_uniform={self.n_uniform}, n_surface={self.n_surface}, near_sigma={self.near_sigma}, "
                f"resample_every={self.resample_every}, seed={self.seed})")
