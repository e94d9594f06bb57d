"""Regularisers of the conductivity field, computed on the tape (kernels in heat_inverse.slang).

The field kappa (H, W) is taken in units of its scale, z = kappa / scale (dimensionless), and each cell owns the
forward differences to its right and lower neighbours, a = z[r, c+1] - z[r, c] and b = z[r+1, c] - z[r, c] (0 past
the last column / row). With weight w and N = H W cells:

- ``"Tikhonov"`` (gradient smoothness):  R = w / N * sum_cells (a^2 + b^2)
- ``"TV"`` (smoothed total variation):  R = w / N * sum_cells (sqrt(a^2 + b^2 + eps^2) - eps)

Tikhonov prefers smooth fields and blurs an inclusion's edge; TV charges a jump by its height times its length
only, so it keeps piecewise-constant fields (an inclusion of one material in another) sharp. ``eps`` rounds TV's
kink at zero gradient (it is differentiable everywhere; eps in units of the scale).
"""

from __future__ import annotations

import pathlib

import numpy as np
import slangpy as spy

from sopt.autodiff import tape as tp
from sopt.runtime.kernel import Function, launch
from sopt.autodiff.parameter import Parameter

_SOURCE = pathlib.Path(__file__).with_name("heat_inverse.slang")
_REGULARIZER_TERMS = Function(_SOURCE, "regularizer_terms")
_REGULARIZER_ADJOINT = Function(_SOURCE, "regularizer_adjoint")

KINDS = {"Tikhonov": 0, "TV": 1}


class FieldRegularizer:
    """``R(kappa)`` of the module docstring for a (H, W) field: ``__call__(kappa)`` records the per-cell terms
    (H * W,) on the tape (their sum is R; the tape's backward seeds each with 1) and a backward that adds dR/dkappa
    into the Parameter's gradient (one thread per cell, gathering its own and its left and upper neighbours'
    terms: no atomics)."""

    def __init__(self, kind: str, weight: float, shape: tuple[int, int], scale: float, eps: float = 0.01) -> None:
        if kind not in KINDS:
            raise ValueError(f"FieldRegularizer kind {kind!r}: allowed {', '.join(KINDS)}")
        if not (np.isfinite(weight) and weight >= 0):
            raise ValueError(f"FieldRegularizer weight = {weight!r}: must be a finite number >= 0")
        if not (np.isfinite(scale) and scale > 0):
            raise ValueError(f"FieldRegularizer scale = {scale!r}: must be a finite number > 0")
        if not (np.isfinite(eps) and eps > 0):
            raise ValueError(f"FieldRegularizer eps = {eps!r}: must be a finite number > 0")
        self.kind, self.weight, self.shape, self.scale, self.eps = kind, float(weight), shape, float(scale), float(eps)
        h, w = shape
        self.cells = h * w
        self._grid = {"H": h, "W": w, "inv_scale": 1.0 / self.scale, "coef": self.weight / self.cells,
                      "eps": self.eps, "kind": KINDS[kind]}

    def __call__(self, kappa: Parameter) -> spy.Tensor:
        """The (H * W,) terms of R at ``kappa`` (a (H, W) Parameter), recorded (run now without a tape)."""
        if tuple(kappa.shape) != self.shape:
            raise ValueError(f"FieldRegularizer: kappa has shape {kappa.shape}, expected {self.shape}")
        terms = tp.new_tensor((self.cells,))
        threads = spy.grid((self.cells,))

        def forward(enc: spy.CommandEncoder) -> None:
            launch(_REGULARIZER_TERMS, enc, i=threads, g=self._grid, kappa=tp.flat(kappa.values), terms=terms)

        def backward(enc: spy.CommandEncoder, redirect: dict[int, spy.Tensor]) -> None:
            launch(_REGULARIZER_ADJOINT, enc, i=threads, g=self._grid, kappa=tp.flat(kappa.values),
                   terms_grad=terms.grad, kappa_grad=tp.flat(kappa.grad))

        tp.record(f"{self.kind} regularizer", forward, backward, writes=[terms], params=[kappa])
        return terms

    def value(self, kappa: np.ndarray) -> float:
        """R of a host field (float64 numpy): the reference of the kernels."""
        z = np.asarray(kappa, np.float64) / self.scale
        a = np.zeros_like(z)
        b = np.zeros_like(z)
        a[:, :-1] = z[:, 1:] - z[:, :-1]
        b[:-1, :] = z[1:, :] - z[:-1, :]
        s = a * a + b * b
        per_cell = s if self.kind == "Tikhonov" else np.sqrt(s + self.eps ** 2) - self.eps
        return float(self.weight / self.cells * per_cell.sum())

    def hessian(self, kappa: np.ndarray) -> np.ndarray:
        """The Hessian of R at a host field (H, W), in kappa (m^2/s): (H W, H W) float64, cells in row-major order
        (the uncertainty's prior precision). With D_a, D_b the forward-difference matrices (z -> a, b) and per cell
        the Hessian of its term in (a, b), h = 2 I (Tikhonov) or I / s - (a, b)(a, b)^T / s^3 with s = sqrt(a^2 + b^2
        + eps^2) (TV; positive definite, 1 / eps at a flat cell)::

            d^2R/dkappa^2 = w / (N scale^2) [D_a^T h_aa D_a + D_a^T h_ab D_b + D_b^T h_ab D_a + D_b^T h_bb D_b]
        """
        z = np.asarray(kappa, np.float64) / self.scale
        h, w = z.shape
        if (h, w) != self.shape:
            raise ValueError(f"FieldRegularizer.hessian: kappa has shape {z.shape}, expected {self.shape}")
        n = h * w
        index = np.arange(n).reshape(h, w)
        d_a, d_b = np.zeros((n, n)), np.zeros((n, n))
        d_a[index[:, :-1], index[:, :-1]], d_a[index[:, :-1], index[:, 1:]] = -1.0, 1.0   # a = z[r, c+1] - z[r, c]
        d_b[index[:-1, :], index[:-1, :]], d_b[index[:-1, :], index[1:, :]] = -1.0, 1.0   # b = z[r+1, c] - z[r, c]
        a, b = d_a @ z.ravel(), d_b @ z.ravel()
        if self.kind == "Tikhonov":
            h_aa, h_bb, h_ab = np.full(n, 2.0), np.full(n, 2.0), np.zeros(n)
        else:
            s = np.sqrt(a * a + b * b + self.eps ** 2)
            h_aa, h_bb, h_ab = 1.0 / s - a * a / s ** 3, 1.0 / s - b * b / s ** 3, -a * b / s ** 3
        cross = d_a.T @ (h_ab[:, None] * d_b)
        hess = d_a.T @ (h_aa[:, None] * d_a) + d_b.T @ (h_bb[:, None] * d_b) + cross + cross.T
        return self.weight / (self.cells * self.scale ** 2) * hess
