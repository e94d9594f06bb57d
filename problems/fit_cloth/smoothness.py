"""Smoothness regulariser of a per-spring stiffness field on a cloth, computed on the tape (fit_cloth.slang).

The cloth's springs come in four families (SpringSystem.cloth's order: horizontal, vertical, shear "/", shear
"\\"), each a grid of springs. With z = k / scale (k in N/m) and S springs, the regulariser is the weight times
the mean over springs of the squared differences to the spring's right and upper neighbours in its family::

    R = weight / S * sum_s [(z_s - z_right(s))^2 + (z_s - z_up(s))^2]

(a discrete gradient-smoothness Tikhonov term per family; a missing neighbour's part is left out). It pulls the
stiffness of springs the motion hardly loads (their data gradient is small) towards their neighbours'.
"""

from __future__ import annotations

import pathlib

import numpy as np
import slangpy as spy

from sopt.runtime import device as dev
from sopt.autodiff import tape as tp
from sopt.runtime.kernel import Function, launch
from sopt.autodiff.parameter import Parameter

_SOURCE = pathlib.Path(__file__).with_name("fit_cloth.slang")
_SMOOTHNESS_TERMS = Function(_SOURCE, "smoothness_terms")
_SMOOTHNESS_ADJOINT = Function(_SOURCE, "smoothness_adjoint")


def family_shapes(nx: int, ny: int) -> list[tuple[int, int]]:
    """(rows, cols) of each spring family's grid, in SpringSystem.cloth's order (horizontal, vertical, /, \\)."""
    return [(ny, nx - 1), (ny - 1, nx), (ny - 1, nx - 1), (ny - 1, nx - 1)]


def cloth_neighbours(nx: int, ny: int) -> np.ndarray:
    """(S, 4) int64: each spring's (right, up, left, down) neighbour in its family's grid, -1 where none."""
    out = []
    offset = 0
    for rows, cols in family_shapes(nx, ny):
        index = offset + np.arange(rows * cols).reshape(rows, cols)
        right = np.full((rows, cols), -1)
        up = np.full((rows, cols), -1)
        left = np.full((rows, cols), -1)
        down = np.full((rows, cols), -1)
        right[:, :-1], left[:, 1:] = index[:, 1:], index[:, :-1]
        up[:-1, :], down[1:, :] = index[1:, :], index[:-1, :]
        out.append(np.stack([right.ravel(), up.ravel(), left.ravel(), down.ravel()], axis=1))
        offset += rows * cols
    return np.concatenate(out).astype(np.int64)


class SpringSmoothness:
    """``R`` of the module docstring for the springs of an ``nx`` x ``ny`` cloth: ``__call__(k)`` records the
    per-spring terms (S,) on the tape (their sum is R) and a backward adding dR/dk into the Parameter's gradient."""

    def __init__(self, nx: int, ny: int, weight: float, scale: float) -> None:
        if not (np.isfinite(weight) and weight >= 0):
            raise ValueError(f"SpringSmoothness weight = {weight!r}: must be a finite number >= 0")
        if not (np.isfinite(scale) and scale > 0):
            raise ValueError(f"SpringSmoothness scale = {scale!r}: must be a finite number > 0")
        self.neighbours = cloth_neighbours(nx, ny)
        self.count = int(self.neighbours.shape[0])
        self.weight, self.scale = float(weight), float(scale)
        self._neighbours = spy.Tensor.from_numpy(dev.get_device(), self.neighbours.astype(np.int32).ravel())

    def __call__(self, k: Parameter) -> spy.Tensor:
        """The (S,) terms of R at ``k`` (an (S,) Parameter), recorded (run now without a tape)."""
        if tuple(k.shape) != (self.count,):
            raise ValueError(f"SpringSmoothness: k has shape {k.shape}, expected ({self.count},)")
        terms = tp.new_tensor((self.count,))
        threads = spy.grid((self.count,))
        inv_scale, coef = 1.0 / self.scale, self.weight / self.count

        def forward(enc: spy.CommandEncoder) -> None:
            launch(_SMOOTHNESS_TERMS, enc, s=threads, inv_scale=inv_scale, coef=coef, neighbours=self._neighbours,
                   k=k.values, terms=terms)

        def backward(enc: spy.CommandEncoder, redirect: dict[int, spy.Tensor]) -> None:
            launch(_SMOOTHNESS_ADJOINT, enc, s=threads, inv_scale=inv_scale, coef=coef, neighbours=self._neighbours,
                   k=k.values, terms_grad=terms.grad, k_grad=k.grad)

        tp.record("SpringSmoothness", forward, backward, writes=[terms], params=[k])
        return terms

    def value(self, k: np.ndarray) -> float:
        """R of a host field (float64 numpy): the reference of the kernels."""
        z = np.asarray(k, np.float64).reshape(-1) / self.scale
        total = 0.0
        for side in (0, 1):
            n = self.neighbours[:, side]
            has = n >= 0
            total += float(np.sum((z[has] - z[n[has]]) ** 2))
        return self.weight / self.count * total
