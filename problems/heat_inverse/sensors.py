"""Sensors: the temperatures a grid of point sensors reads from a simulated trajectory, recorded on the tape."""

from __future__ import annotations

import pathlib

import numpy as np
import slangpy as spy

from sopt.autodiff import tape as tp
from sopt.runtime.device import get_device
from sopt.runtime.kernel import Function, launch

_SOURCE = pathlib.Path(__file__).with_name("heat_inverse.slang")
_SENSOR_READ = Function(_SOURCE, "sensor_read")
_SENSOR_READ_ADJOINT = Function(_SOURCE, "sensor_read_adjoint")


def sensor_cells(grid: int, rows: int, cols: int) -> np.ndarray:
    """(rows * cols, 2) (row, col) cells of a rows x cols sensor grid spread evenly over a grid x grid plate: sensor
    (i, j) sits in the cell holding the point ((j + 1/2) / cols, (i + 1/2) / rows) of the unit square (the
    centres of a rows x cols tiling). ValueError unless 1 <= rows, cols <= grid (then the cells are distinct)."""
    for name, n in (("rows", rows), ("cols", cols)):
        if not 1 <= n <= grid:
            raise ValueError(f"sensor grid {name} = {n}: must be in [1, {grid}] (one sensor per cell at most)")
    r = np.floor((np.arange(rows) + 0.5) * grid / rows).astype(np.int64)
    c = np.floor((np.arange(cols) + 0.5) * grid / cols).astype(np.int64)
    rr, cc = np.meshgrid(r, c, indexing="ij")
    return np.stack([rr.ravel(), cc.ravel()], axis=1)


class Sensors:
    """Point sensors at distinct cells of an H x W field: ``read(trajectory)`` gathers (K, S) readings from a
    (K, H, W) trajectory (K observation times) on the tape; the backward adds each reading's gradient into its
    cell's (the cells being distinct, without atomics). ``cells``: (S, 2) (row, col)."""

    def __init__(self, cells: np.ndarray, shape: tuple[int, int]) -> None:
        cells = np.asarray(cells, np.int64)
        h, w = shape
        if cells.ndim != 2 or cells.shape[1] != 2 or cells.shape[0] < 1:
            raise ValueError(f"Sensors cells must have shape (S, 2) with S >= 1, got {cells.shape}")
        if (cells < 0).any() or (cells[:, 0] >= h).any() or (cells[:, 1] >= w).any():
            raise ValueError(f"Sensors cells must lie in the {h} x {w} grid")
        flat = cells[:, 0] * w + cells[:, 1]
        if np.unique(flat).size != flat.size:
            raise ValueError("Sensors cells must be distinct (two sensors in one cell)")
        self.cells, self.shape, self.count = cells, (h, w), int(cells.shape[0])
        self.flat = flat
        self._cells = spy.Tensor.from_numpy(get_device(), flat.astype(np.int32))

    def read(self, trajectory: spy.Tensor) -> spy.Tensor:
        """(K, S) readings of a (K, H, W) trajectory (a new array; recorded on the tape, run now without one)."""
        k = int(trajectory.shape[0])
        if tuple(trajectory.shape)[1:] != self.shape:
            raise ValueError(f"Sensors.read: trajectory has shape {tuple(trajectory.shape)}, expected (K, "
                             f"{self.shape[0]}, {self.shape[1]})")
        out = tp.new_tensor((k, self.count))
        cells = self.shape[0] * self.shape[1]
        grid = spy.grid((k * self.count,))

        def forward(enc: spy.CommandEncoder) -> None:
            launch(_SENSOR_READ, enc, i=grid, n_sensors=self.count, cells=cells, cell=self._cells,
                   trajectory=tp.flat(trajectory), readings=tp.flat(out))

        def backward(enc: spy.CommandEncoder, redirect: dict[int, spy.Tensor]) -> None:
            launch(_SENSOR_READ_ADJOINT, enc, i=grid, n_sensors=self.count, cells=cells, cell=self._cells,
                   readings_grad=tp.flat(out.grad), trajectory_grad=tp.flat(trajectory.grad))

        tp.record("Sensors.read", forward, backward, writes=[out], add_grads=[trajectory])
        return out

    def of(self, fields: np.ndarray) -> np.ndarray:
        """The readings of host fields (..., H, W) -> (..., S) (numpy, for the data and the pictures)."""
        return np.asarray(fields)[..., self.cells[:, 0], self.cells[:, 1]]
