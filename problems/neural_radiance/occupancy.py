"""OccupancyGrid: which cells of the scene box hold density, so the ray marcher skips the empty ones
(occupancy.slang; Instant-NGP's density grid, one level).

``res``^3 cells over [-bound, bound]^3 hold a decayed maximum of the network's density: every ``update_every``
steps from ``warmup_steps`` on, one uniform random point per cell is put through the network and
``grid = max(decay * grid, sigma)`` (the first update replaces the grid). A cell is occupied when its value exceeds
``min(threshold, mean of the grid)``, with ``threshold = min_optical_thickness / dt`` (a density that makes one
march step at least that opaque). Before the first update every cell counts as occupied. The grid is a
Parameter no optimiser steps (``parameter``), so a checkpoint keeps it and a resumed run marches as one that never
stopped.
"""

from __future__ import annotations

import pathlib
from typing import Any

import numpy as np
import slangpy as spy

from sopt.autodiff import tape as tp
from sopt.runtime.device import get_device
from sopt.runtime.kernel import Function, launch
from sopt.nn.module import Module
from sopt.autodiff.parameter import Parameter

_FOLDER = pathlib.Path(__file__).resolve().parent
_OCCUPANCY_POINTS = Function(_FOLDER / "occupancy.slang", "occupancy_points")
_OCCUPANCY_UPDATE = Function(_FOLDER / "occupancy.slang", "occupancy_update")
_OCCUPANCY_PARTIAL_SUMS = Function(_FOLDER / "occupancy.slang", "occupancy_partial_sums")
_OCCUPANCY_MEAN = Function(_FOLDER / "occupancy.slang", "occupancy_mean")

MEAN_PARTS = 1024   # occupancy.slang's MEAN_PARTS


class OccupancyGrid:
    """See the module docstring. ``activation``: the density activation's code (density.slang)."""

    def __init__(self, res: int, update_every: int, warmup_steps: int, decay: float, min_optical_thickness: float,
                 dt: float, activation: int, seed: int) -> None:
        self.res, self.update_every, self.warmup_steps = int(res), int(update_every), int(warmup_steps)
        self.decay, self.threshold, self.activation, self.seed = float(decay), float(min_optical_thickness / dt), \
            int(activation), int(seed)
        self.cells = self.res ** 3
        self.parameter = Parameter(np.zeros(self.cells, np.float32), name="occupancy")
        device = get_device()
        self._partial = spy.Tensor.zeros(device, (MEAN_PARTS,), "float")
        self._mean = spy.Tensor.zeros(device, (1,), "float")
        self._mean_current = False   # whether _mean is the grid's (not after a checkpoint's grid is loaded)

    def due(self, step: int) -> bool:
        """Whether optimiser step ``step`` (0-based) begins with an update."""
        return step >= self.warmup_steps and (step - self.warmup_steps) % self.update_every == 0

    def active(self, step: int) -> bool:
        """Whether the grid culls at ``step`` (an update has happened by then, or happens at its start)."""
        return step >= self.warmup_steps

    def slang(self, step: int) -> dict[str, Any]:
        """occupancy.slang's ``Occupancy`` as step ``step``'s march sees it."""
        return {"grid": self.parameter.values, "mean": self._mean, "res": self.res,
                "threshold": self.threshold if self.active(step) else -1.0}

    def update(self, model: Module, step: int, tape: tp.Tape) -> None:
        """Record the update of step ``step`` into ``tape``'s encoder: the cells' random points, the network's
        density at them (on a child tape of its own, so its arrays are reused update after update), the decayed
        max and the grid's mean."""
        cells, grid = self.cells, self.parameter.values
        decay = -1.0 if step == self.warmup_steps else self.decay
        child = tape.child("occupancy")
        child.forward_only = True
        with child:
            points = tp.new_tensor((cells, 3), grads=False)

            def make_points(enc: spy.CommandEncoder) -> None:
                launch(_OCCUPANCY_POINTS, enc, cell=spy.grid((cells,)), seed=self.seed,
                       step=int(step) & 0xFFFFFFFF, res=self.res, points=tp.flat(points))

            child.record("OccupancyGrid.points", make_points, None, writes=[points])
            raw = model(points)

            def fold(enc: spy.CommandEncoder) -> None:
                launch(_OCCUPANCY_UPDATE, enc, cell=spy.grid((cells,)), activation=self.activation, decay=decay,
                       raw=tp.flat(raw), grid=grid)
                launch(_OCCUPANCY_PARTIAL_SUMS, enc, k=spy.grid((MEAN_PARTS,)), cells=cells, grid=grid,
                       partial=self._partial)
                launch(_OCCUPANCY_MEAN, enc, k=spy.grid((1,)), cells=cells, partial=self._partial, mean=self._mean)

            child.record("OccupancyGrid.update", fold, None)
        self._mean_current = True

    def ensure_mean(self, tape: tp.Tape) -> None:
        """Record the grid's mean into ``tape``'s encoder unless an update of this process computed it (the first
        step of a resumed run: the checkpoint holds the grid, not its mean)."""
        if self._mean_current:
            return
        cells, grid = self.cells, self.parameter.values

        def mean(enc: spy.CommandEncoder) -> None:
            launch(_OCCUPANCY_PARTIAL_SUMS, enc, k=spy.grid((MEAN_PARTS,)), cells=cells, grid=grid,
                   partial=self._partial)
            launch(_OCCUPANCY_MEAN, enc, k=spy.grid((1,)), cells=cells, partial=self._partial, mean=self._mean)

        tape.record("OccupancyGrid.mean", mean, None)
        self._mean_current = True

    def occupied_fraction(self, step: int) -> float:
        """The fraction of occupied cells at ``step`` (reads the grid; waits for the GPU)."""
        if not self.active(step):
            return 1.0
        grid = self.parameter.numpy()
        return float(np.mean(grid > min(self.threshold, float(grid.mean()))))
