"""Float64 numpy reference of sopt.sim.Projectile's integrator (the same step as projectile.slang)."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

UP = 1


@dataclass(frozen=True)
class Coefficients:
    """Physical coefficients, broadcast against the particles: gravity (dim,) or (N, dim) in m/s^2,
    linear_drag (1/s), drag (1/m) and restitution as numbers, (1,) or (N,); ground in m or None."""

    gravity: np.ndarray
    linear_drag: np.ndarray
    drag: np.ndarray
    restitution: np.ndarray
    ground: float | None = 0.0

    def with_value(self, name: str, value: np.ndarray) -> "Coefficients":
        return replace(self, **{name: value})


def accel(v: np.ndarray, g: np.ndarray, c1: np.ndarray, c2: np.ndarray) -> np.ndarray:
    """a = g - (c1 + c2 |v|) v, row-wise; c1, c2: (N, 1)."""
    return g - (c1 + c2 * np.linalg.norm(v, axis=1, keepdims=True)) * v


def step(x: np.ndarray, v: np.ndarray, c: Coefficients, dt: float) -> tuple[np.ndarray, np.ndarray]:
    """One semi-implicit Euler step with the time-of-impact ground contact; x, v: (N, dim) in m, m/s.

    a = a(v), vs = v + dt a, xs = x + dt vs. Where xs[UP] < ground and vs[UP] < 0 (contact):
    toi = (min(x[UP], ground) - x[UP]) / vs[UP], p = x + toi vs with p[UP] = min(x[UP], ground),
    r = v + toi a with r[UP] = -e r[UP], v' = r + (dt - toi) a(r), v'[UP] = max(v'[UP], 0), x' = p + (dt - toi) v'.
    """
    n = x.shape[0]
    c1 = np.broadcast_to(np.asarray(c.linear_drag, np.float64).reshape(-1), (n,))[:, None]
    c2 = np.broadcast_to(np.asarray(c.drag, np.float64).reshape(-1), (n,))[:, None]
    e = np.broadcast_to(np.asarray(c.restitution, np.float64).reshape(-1), (n,))
    g = np.broadcast_to(np.asarray(c.gravity, np.float64), x.shape)
    a = accel(v, g, c1, c2)
    vs = v + dt * a
    xs = x + dt * vs
    if c.ground is None:
        return xs, vs
    hit = (xs[:, UP] < c.ground) & (vs[:, UP] < 0.0)
    base = np.minimum(x[:, UP], c.ground)
    with np.errstate(divide="ignore", invalid="ignore"):
        toi = np.where(hit, np.clip((base - x[:, UP]) / vs[:, UP], 0.0, dt), dt)[:, None]
    p = x + toi * vs
    p[:, UP] = base
    r = v + toi * a
    r[:, UP] *= -e
    vn = r + (dt - toi) * accel(r, g, c1, c2)
    vn[:, UP] = np.maximum(vn[:, UP], 0.0)
    xn = p + (dt - toi) * vn
    return np.where(hit[:, None], xn, xs), np.where(hit[:, None], vn, vs)


def rollout(x0: np.ndarray, v0: np.ndarray, c: Coefficients, dt: float, steps: int,
            trajectory: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """The state after ``steps`` steps, or with ``trajectory`` every state, (steps + 1, N, dim) each."""
    x, v = np.asarray(x0, np.float64), np.asarray(v0, np.float64)
    xs, vs = [x], [v]
    for _ in range(steps):
        x, v = step(x, v, c, dt)
        xs.append(x)
        vs.append(v)
    return (np.stack(xs), np.stack(vs)) if trajectory else (x, v)
