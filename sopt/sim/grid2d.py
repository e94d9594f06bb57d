"""The 2-D cell grid shared by the field simulators (Diffusion2D, Wave2D): its shape, its boundary condition,
and how its per-cell coefficients reach the kernels (``Grid2D``, ``CellCoefficient`` and
``CellCoefficientGrad`` of slang_lib/sim/grid2d.slang).

A field of H x W cells is a float32 array of shape (H, W), row-major (cell (row, col) is element
``row * W + col`` of the flat buffer the kernels index). Boundary conditions of the 5-point stencil:

- ``"dirichlet"``: a ghost cell outside every boundary face holds ``boundary_value``;
- ``"insulated"``: the ghost cell mirrors the cell (zero normal derivative: no flux through the face).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import slangpy as spy

from sopt.runtime.kernel import dummy
from sopt.autodiff.parameter import Parameter
from sopt.sim.coefficient import Coefficient
from sopt.utils.validation import as_real_array, check_choice, check_float, check_int

BOUNDARIES = ("dirichlet", "insulated")


def grid_shape(u0: Any, name: str) -> tuple[int, int]:
    """(H, W) of an initial field (an array or a Parameter), else ValueError naming ``name``."""
    shape = u0.shape if isinstance(u0, Parameter) else as_real_array(u0, name).shape
    if len(shape) != 2 or min(shape) < 1:
        raise ValueError(f"{name} must be a 2-D field of shape (H, W) with H, W >= 1, got shape {tuple(shape)}")
    return int(shape[0]), int(shape[1])


class Grid2D:
    """H x W cells of spacing ``dx`` (m) with a boundary condition (``"dirichlet"`` or ``"insulated"``) and,
    for Dirichlet, the ghost cells' ``boundary_value``. ``who`` names the simulator in error messages."""

    def __init__(self, shape: tuple[int, int], dx: float, boundary: str, boundary_value: float, who: str) -> None:
        self.shape = shape
        self.dx = check_float(dx, f"{who} dx", low=0.0, low_inclusive=False)
        self.boundary = check_choice(boundary, f"{who} boundary", BOUNDARIES)
        self.boundary_value = check_float(boundary_value, f"{who} boundary_value")
        if abs(self.boundary_value) > float(np.finfo(np.float32).max):
            raise ValueError(f"{who} boundary_value must be within float32's range, got {boundary_value!r}")
        self.cells = shape[0] * shape[1]
        self.threads = spy.grid((self.cells,))   # one thread per cell (kept: built once, not per step)
        self._args = {"H": shape[0], "W": shape[1], "dirichlet": int(boundary == "dirichlet"),
                      "boundary_value": self.boundary_value}

    def args(self) -> dict[str, Any]:
        """The kernels' ``Grid2D`` struct."""
        return self._args

    def flat(self, t: spy.Tensor) -> spy.Tensor:
        """A (H, W) tensor as the flat (H * W,) view the kernels index."""
        return t.view((self.cells,))

    def __repr__(self) -> str:
        value = f", boundary_value={self.boundary_value}" if self.boundary == "dirichlet" else ""
        return f"Grid2D({self.shape[0]}x{self.shape[1]}, dx={self.dx}, {self.boundary}{value})"


def coefficient_args(c: Coefficient) -> dict[str, Any]:
    """The kernels' ``CellCoefficient``: the values now (a Parameter's move into an optimiser's arena), flat,
    read at ``stride * i`` (stride 0: shared by every cell)."""
    n = int(np.prod(c.shape))
    return {"values": c.values.view((n,)), "stride": 0 if c.shared else 1}


def coefficient_grad_args(c: Coefficient) -> dict[str, Any]:
    """The kernels' ``CellCoefficientGrad``: the Parameter's gradient (mode 1 field, 2 shared), or, for a
    constant, mode 0 and a dummy the kernel never touches."""
    if not c.trainable:
        return {"grad": dummy(1), "mode": 0}
    n = int(np.prod(c.shape))
    return {"grad": c.grad.view((n,)), "mode": 2 if c.shared else 1}


@dataclass(frozen=True)
class TemporalBlocking:
    """How a field simulator's ``steps(state, n)`` fuses time steps (temporal blocking): ``steps`` (K) steps per
    dispatch, the grid cut into tiles of ``forward_tile`` / ``backward_tile`` = (rows, cols) output cells, one
    thread group per tile. A group loads its *region*, the tile plus a halo of K cells on every side, advances
    it K steps in groupshared memory (the exact part shrinking by one cell per step) and writes the tile; so n
    steps cost ceil(n / K) dispatches forward and as many backward, and a tile of T x T cells costs
    (T + 2K)^2 / T^2 times its own work per step (the halo is recomputed by the neighbouring groups)."""

    steps: int = 8
    forward_tile: tuple[int, int] = (48, 48)
    backward_tile: tuple[int, int] = (32, 32)


class BlockTiling:
    """``grid`` cut into tiles of ``tile`` = (rows, cols) cells (clamped to the grid) for a kernel that steps a
    region of the tile plus a ``halo`` of cells on every side (``GridTile`` of slang_lib/sim/grid2d.slang).

    ``capacity``: the region cells one thread group holds; a larger region is a ValueError naming ``who``.
    ``groups``: thread groups per dispatch; :meth:`args` the kernel's tiling uniforms."""

    def __init__(self, grid: Grid2D, tile: tuple[int, int], halo: int, capacity: int, who: str) -> None:
        if not (isinstance(tile, tuple) and len(tile) == 2):
            raise ValueError(f"{who} must be a (rows, cols) tuple, got {tile!r}")
        rows, cols = (check_int(t, f"{who} {side}", low=1) for t, side in zip(tile, ("rows", "cols")))
        if (rows + 2 * halo) * (cols + 2 * halo) > capacity:
            raise ValueError(f"{who} {tile} with a halo of {halo} cells needs a region of {rows + 2 * halo} x "
                             f"{cols + 2 * halo} = {(rows + 2 * halo) * (cols + 2 * halo)} cells; the kernel's thread "
                             f"group holds at most {capacity}: use smaller tiles or fewer steps per block")
        H, W = grid.shape
        rows, cols = min(rows, H), min(cols, W)
        self.tile = (rows, cols)
        self.tiles_x = -(-W // cols)
        self.groups = -(-H // rows) * self.tiles_x
        self._args = {"block_steps": halo, "region_h": rows + 2 * halo, "region_w": cols + 2 * halo,
                      "tiles_x": self.tiles_x}

    def args(self) -> dict[str, int]:
        return self._args
