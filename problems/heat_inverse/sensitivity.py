"""The sensors' readings and their exact Jacobian in the conductivity field, in float64 on the host: the tangent-linear
model of Diffusion2D's explicit step (Dirichlet edges), for heat_inverse's uncertainty.

Diffusion2D's step (sopt.sim.Diffusion2D; c = dt / dx^2, faces f of cell i, edge ghosts at b with the cell's own
kappa)::

    u'_i = u_i + c sum_f K_if (u_f - u_i),   K_if = (kappa_i + kappa_f) / 2 inside, kappa_i across an edge

Differentiating in kappa_j gives each step's sensitivity T^j = du / dkappa_j (a field per cell j)::

    T'^j_i = T^j_i + c sum_f K_if (T^j_f - T^j_i) + c sum_f dK_if/dkappa_j (u_f - u_i),   T^j(0) = 0

the first part the same stencil as the step (the ghosts' temperature is fixed: T = 0 there), the last a source
only at j (weight 1/2 per inner face, 1 per edge face) and at its four neighbours i (c (u_j - u_i) / 2). All C
sensitivities are stepped at once as a (C, H, W) array: C^2 numbers, C^2 x ~15 flops per step. That is exact
where central differences in float32 are not (a 0.1% change of one cell's kappa moves a reading by ~1e-5 K,
close to float32's rounding of 1 K) and at the defaults (24 x 24 cells, 75 steps) far cheaper than the 1153
GPU rollouts of central differences on the software driver. It grows as C^2 x steps, so heat_inverse computes it
only within the limits of :func:`affordable`.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

MAX_CELLS = 1024          # up to 32 x 32 cells: the sensitivities are 8 MiB, a few seconds of numpy per 100 steps
MAX_WORK = 2 ** 30        # cells^2 x steps: the most numpy work a run waits for (the defaults: 2.5e7)
MAX_JACOBIAN = 2 ** 24    # readings x cells: 128 MiB of float64 (the defaults: 2.1e6)


def affordable(cells: int, steps: int, readings: int) -> bool:
    """Whether :func:`reading_jacobian` fits its limits for a plate of ``cells`` cells, ``steps`` simulated steps
    and ``readings`` readings (sensors x observation times): MAX_CELLS, MAX_WORK, MAX_JACOBIAN."""
    return cells <= MAX_CELLS and cells * cells * steps <= MAX_WORK and readings * cells <= MAX_JACOBIAN


def _faces(a: np.ndarray) -> tuple[np.ndarray, ...]:
    """The values across the four faces (row - 1, row + 1, col - 1, col + 1) of every cell of ``a`` (..., H, W),
    0 beyond the edges (a padded copy's slices)."""
    p = np.pad(a, [(0, 0)] * (a.ndim - 2) + [(1, 1), (1, 1)])
    return p[..., :-2, 1:-1], p[..., 2:, 1:-1], p[..., 1:-1, :-2], p[..., 1:-1, 2:]


def reading_jacobian(u0: np.ndarray, kappa: np.ndarray, dx: float, dt: float, at: Sequence[int],
                     cells: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(readings (K, S) K, Jacobian (K * S, H * W) K per m^2/s) of the sensors at ``cells`` ((S, 2) (row, col)) at
    the steps ``at`` (K increasing step counts, 0 the initial field) of Diffusion2D from ``u0`` (H, W) K with
    conductivity ``kappa`` (H, W) m^2/s, spacing ``dx`` m, step ``dt`` s, Dirichlet edges at 0 K. Row k * S + s
    of the Jacobian is reading (k, s) (``readings.ravel()``'s order); column r * W + c is cell (r, c)."""
    u = np.asarray(u0, np.float64).copy()
    kappa = np.asarray(kappa, np.float64)
    h, w = u.shape
    if kappa.shape != (h, w):
        raise ValueError(f"reading_jacobian: kappa has shape {kappa.shape}, u0 {u.shape}")
    n = h * w
    steps = [int(s) for s in at]
    if not steps or min(steps) < 0 or any(b <= a for a, b in zip(steps, steps[1:])):
        raise ValueError(f"reading_jacobian: at must be increasing step counts >= 0, got {steps}")
    c = dt / dx ** 2
    # face conductances K_if (H, W) per face, kappa_i across an edge (the ghost takes the cell's kappa)
    padded = np.pad(kappa, 1, mode="edge")
    across = padded[:-2, 1:-1], padded[2:, 1:-1], padded[1:-1, :-2], padded[1:-1, 2:]
    conductance = [0.5 * (kappa + k) for k in across]
    # each face's neighbour offset (in flat cells) and which cells have it inside the plate
    rows, cols = np.indices((h, w))
    inside = [rows > 0, rows < h - 1, cols > 0, cols < w - 1]
    offsets = [-w, w, -1, 1]
    flat = np.arange(n).reshape(h, w)
    sens = np.zeros((n, h, w))              # sens[j] = du / dkappa_j
    readings, jac = [], []
    for t in range(steps[-1] + 1):
        if t in steps:
            readings.append(u[cells[:, 0], cells[:, 1]])
            jac.append(sens[:, cells[:, 0], cells[:, 1]].T)          # (S, C)
        if t == steps[-1]:
            break
        u_faces = _faces(u)
        source = np.zeros((n, h, w))
        # at j itself: dK_jf/dkappa_j = 1/2 inside, 1 across an edge (whose ghost reads 0 K)
        self_term = sum(np.where(ins, 0.5, 1.0) * (uf - u) for ins, uf in zip(inside, u_faces))
        source[flat.ravel(), rows.ravel(), cols.ravel()] = c * self_term.ravel()
        # at each inner neighbour i of j: dK_ij/dkappa_j = 1/2, times (u_j - u_i)
        for ins, off in zip(inside, offsets):
            i = flat[ins]                     # cells i whose face in this direction is inner
            j = i + off                       # the neighbour j across it
            source[j, i // w, i % w] += 0.5 * c * (u.ravel()[j] - u.ravel()[i])
        sens_faces = _faces(sens)
        sens = sens + c * sum(k * (tf - sens) for k, tf in zip(conductance, sens_faces)) + source
        u = u + c * sum(k * (uf - u) for k, uf in zip(conductance, u_faces))
    return np.stack(readings), np.concatenate(jac)
