"""Float64 numpy reference of SpringSystem's step (sopt/sim/spring_system.py): the same equations, written
independently of the kernels (per-spring forces scattered with np.add.at, not gathered)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class SpringParams:
    """Everything a step reads, float64 (shared coefficients as shape (1,) arrays broadcast by numpy)."""

    springs: np.ndarray                 # (S, 2) int
    stiffness: np.ndarray               # (S,) or (1,) N/m
    damping: np.ndarray                 # (S,) or (1,) N s/m
    rest_length: np.ndarray             # (S,) or (1,) m
    mass: np.ndarray                    # (N,) or (1,) kg
    gravity: np.ndarray                 # (dim,) m/s^2
    dt: float
    pinned: np.ndarray                  # (N,) bool
    ground: float | None = None
    actuators: np.ndarray = field(default_factory=lambda: np.zeros(0, int))
    strength: float = 1.0


def step(p: SpringParams, x: np.ndarray, v: np.ndarray,
         control: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """One semi-implicit Euler step: v' = v + dt (F/m + g), x' = x + dt v'; pinned: x' = x, v' = 0; sticky
    ground contact with time of impact."""
    a, b = p.springs[:, 0], p.springs[:, 1]
    s_count = len(a)
    rest = np.broadcast_to(p.rest_length, (s_count,)).astype(np.float64).copy()
    if len(p.actuators):
        rest[p.actuators] = rest[p.actuators] * (1.0 + p.strength * np.asarray(control, np.float64))
    dx = x[b] - x[a]
    dv = v[b] - v[a]
    length = np.linalg.norm(dx, axis=1)
    d = dx / length[:, None]
    tension = p.stiffness * (length - rest) + p.damping * np.sum(dv * d, axis=1)
    f = tension[:, None] * d
    force = np.zeros_like(x)
    np.add.at(force, a, f)
    np.add.at(force, b, -f)
    m = np.broadcast_to(p.mass, (len(x),))[:, None]
    v_new = v + p.dt * (force / m + p.gravity)
    x_new = x + p.dt * v_new
    if p.ground is not None:
        hit = (x_new[:, 1] < p.ground) & ~p.pinned
        for i in np.flatnonzero(hit):
            toi = (p.ground - x[i, 1]) / v_new[i, 1] if x[i, 1] >= p.ground else 0.0
            x_new[i] = x[i] + toi * v_new[i]
            x_new[i, 1] = p.ground
            v_new[i] = 0.0
    x_new[p.pinned] = x[p.pinned]
    v_new[p.pinned] = 0.0
    return x_new, v_new


def rollout(p: SpringParams, x0: np.ndarray, v0: np.ndarray, steps: int,
            controls: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The state after ``steps`` steps (``controls``: (steps, A) when the system has actuators)."""
    x, v = np.asarray(x0, np.float64), np.asarray(v0, np.float64)
    for t in range(steps):
        x, v = step(p, x, v, None if controls is None else controls[t])
    return x, v
