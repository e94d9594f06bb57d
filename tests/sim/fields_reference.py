"""Float64 numpy references of Diffusion2D and Wave2D (the same integrators, written with ghost-cell padding
rather than the kernels' per-face branches), and central finite differences of a scalar function."""

from __future__ import annotations

from typing import Callable

import numpy as np


def _padded(a: np.ndarray, boundary: str, value: float) -> np.ndarray:
    """``a`` with a ring of ghost cells: ``value`` (Dirichlet) or a copy of the edge (insulated: no gradient)."""
    if boundary == "dirichlet":
        return np.pad(a, 1, mode="constant", constant_values=value)
    return np.pad(a, 1, mode="edge")


def _across_faces(p: np.ndarray) -> tuple[np.ndarray, ...]:
    """The values across the four faces (row - 1, row + 1, col - 1, col + 1) of every cell of a padded array."""
    return p[:-2, 1:-1], p[2:, 1:-1], p[1:-1, :-2], p[1:-1, 2:]


def diffusion_step(u: np.ndarray, kappa: np.ndarray, source: np.ndarray | float, dt: float, dx: float,
                   boundary: str, value: float = 0.0) -> np.ndarray:
    """u' = u + dt/dx^2 sum_f (kappa + kappa_f)/2 (u_f - u) + dt s; a Dirichlet ghost takes the cell's kappa."""
    kappa = np.broadcast_to(np.asarray(kappa, np.float64), u.shape)
    up = _padded(u, boundary, value)
    kp = np.pad(kappa, 1, mode="edge")
    flux = sum(0.5 * (kappa + kf) * (uf - u) for uf, kf in zip(_across_faces(up), _across_faces(kp)))
    return u + dt / dx ** 2 * flux + dt * np.broadcast_to(np.asarray(source, np.float64), u.shape)


def diffusion_rollout(u0: np.ndarray, steps: int, **kw) -> np.ndarray:
    u = np.asarray(u0, np.float64)
    for _ in range(steps):
        u = diffusion_step(u, **kw)
    return u


def wave_step(u: np.ndarray, v: np.ndarray, c: np.ndarray, damping: np.ndarray | float, dt: float, dx: float,
              boundary: str, value: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """Symplectic Euler: v' = (1 - dt gamma) v + dt c^2 lap(u), u' = u + dt v' (5-point lap, ghost cells)."""
    lap = (sum(_across_faces(_padded(u, boundary, value))) - 4.0 * u) / dx ** 2
    c = np.broadcast_to(np.asarray(c, np.float64), u.shape)
    gamma = np.broadcast_to(np.asarray(damping, np.float64), u.shape)
    v_next = (1.0 - dt * gamma) * v + dt * c ** 2 * lap
    return u + dt * v_next, v_next


def wave_rollout(u0: np.ndarray, v0: np.ndarray, steps: int, **kw) -> tuple[np.ndarray, np.ndarray]:
    u, v = np.asarray(u0, np.float64), np.asarray(v0, np.float64)
    for _ in range(steps):
        u, v = wave_step(u, v, **kw)
    return u, v


def central_fd(f: Callable[[np.ndarray], float], x: np.ndarray, h: float = 1e-6) -> np.ndarray:
    """df/dx by central differences (step ``h`` times max(1, |x_i|)), same shape as ``x``."""
    x = np.array(x, np.float64)
    grad = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        step = h * max(1.0, abs(x[i]))
        x[i] += step
        up = f(x.copy())
        x[i] -= 2 * step
        down = f(x.copy())
        x[i] += step
        grad[i] = (up - down) / (2 * step)
    return grad



DX = 0.1
BOUNDARIES = ("dirichlet", "insulated")


def f32(a) -> np.ndarray:
    """float64 values exactly representable in float32 (what the GPU sees), so both sides start equal."""
    return np.asarray(a, np.float32).astype(np.float64)


def rel_err(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.linalg.norm(got - want) / np.linalg.norm(want))
