"""Float64 numpy reference of sopt.sim.NBody: the same softened gravity and kick-drift-kick leapfrog."""

from __future__ import annotations

import numpy as np


def accelerations(x: np.ndarray, masses: np.ndarray, G: float, softening: float) -> np.ndarray:
    """a_i = G sum_{j != i} m_j (x_j - x_i) / (|x_j - x_i|^2 + eps^2)^(3/2); x (N, D), masses (N,) or (1,)."""
    m = np.broadcast_to(np.asarray(masses, np.float64), (x.shape[0],))
    r = x[None, :, :] - x[:, None, :]                       # r[i, j] = x_j - x_i
    d2 = (r**2).sum(axis=2) + softening**2
    np.fill_diagonal(d2, 1.0)                               # j == i: r = 0, any finite d keeps the term 0
    w = m[None, :] / d2**1.5
    np.fill_diagonal(w, 0.0)
    return G * (w[:, :, None] * r).sum(axis=1)


def step(x: np.ndarray, v: np.ndarray, a: np.ndarray, masses: np.ndarray, G: float, softening: float,
         dt: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One leapfrog step: v_half = v + dt/2 a; x' = x + dt v_half; a' = a(x'); v' = v_half + dt/2 a'."""
    v_half = v + 0.5 * dt * a
    x_new = x + dt * v_half
    a_new = accelerations(x_new, masses, G, softening)
    return x_new, v_half + 0.5 * dt * a_new, a_new


def rollout(x0: np.ndarray, v0: np.ndarray, masses: np.ndarray, G: float, softening: float, dt: float,
            steps: int) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """The states (x, v, a) from the initial one (a = a(x0)) through ``steps`` steps: steps + 1 of them."""
    x, v = np.asarray(x0, np.float64), np.asarray(v0, np.float64)
    states = [(x, v, accelerations(x, masses, G, softening))]
    for _ in range(steps):
        states.append(step(*states[-1], masses, G, softening, dt))
    return states


def energy(x: np.ndarray, v: np.ndarray, masses: np.ndarray, G: float, softening: float) -> float:
    """sum_i m_i |v_i|^2 / 2 - G sum_{i<j} m_i m_j / sqrt(|x_j - x_i|^2 + eps^2)."""
    m = np.broadcast_to(np.asarray(masses, np.float64), (x.shape[0],))
    i, j = np.triu_indices(x.shape[0], 1)
    d = np.sqrt(((x[j] - x[i]) ** 2).sum(axis=1) + softening**2)
    return float(0.5 * (m * (v**2).sum(axis=1)).sum() - G * (m[i] * m[j] / d).sum())
