"""PyTorch eager implementations of benchmarks/physics.py's cases, for comparison with sopt.

Each integrator is sopt's (sopt/sim/spring_system.py, projectile.py, diffusion2d.py and their kernels in
slang_lib/sim/), written with vectorised torch operations: one Python step per time step over every spring,
particle or cell, every step's intermediates kept by autograd for ``loss.backward()``. Spring forces are
scattered onto particles with ``index_add_``. The expressions follow the kernels' order of operations, so the
two differ only by float32 rounding (summation order of the spring forces, fused multiply-adds).

``build(kind, problem, device)`` returns a run: ``iteration()`` zeroes the gradients (``set_to_none``, torch's
default), rolls the system out, computes the loss and calls ``backward()``; ``gradients()`` and ``loss()`` read
the last iteration's results (the caller synchronises first).
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import torch


class TorchRun:
    """One case set up on ``device``: ``params`` (name -> leaf tensor with requires_grad), ``objective()``
    returning the loss of one rollout."""

    def __init__(self, params: dict[str, torch.Tensor], objective: Callable[[], torch.Tensor]) -> None:
        self.params = params
        self.objective = objective
        self._loss: torch.Tensor | None = None

    def iteration(self) -> None:
        for p in self.params.values():
            p.grad = None
        loss = self.objective()
        loss.backward()
        self._loss = loss.detach()

    def gradients(self) -> dict[str, np.ndarray]:
        return {name: p.grad.detach().cpu().numpy().astype(np.float64) for name, p in self.params.items()}

    def loss(self) -> float:
        return float(self._loss) if self._loss is not None else float("nan")


def _tensor(a: Any, device: torch.device, grad: bool = False) -> torch.Tensor:
    return torch.tensor(np.ascontiguousarray(a, np.float32), device=device, requires_grad=grad)


# -- A, B, C: cloth (SpringSystem without ground or actuators) --------------------------------------------------
def cloth(problem: Any, device: torch.device) -> TorchRun:
    """Per step: d = (x_b - x_a) / l, T = k (l - L) + c (v_b - v_a).d, f = T d on a, -f on b (index_add_);
    free particles v' = v + dt (F / m + g), x' = x + dt v'; pinned x' = x, v' = 0. Loss: mean over all
    elements of (x_T - target)^2. Parameter: per-spring stiffness k (S,)."""
    a = torch.tensor(problem.springs[:, 0], device=device, dtype=torch.long)
    b = torch.tensor(problem.springs[:, 1], device=device, dtype=torch.long)
    k = _tensor(problem.stiffness, device, grad=True)
    rest = _tensor(problem.rest_length, device)
    x0 = _tensor(problem.x0, device)
    v0 = torch.zeros_like(x0)
    gravity = _tensor(problem.gravity, device)
    free = _tensor((~problem.pinned).astype(np.float32)[:, None], device)   # pinned: v' = 0, so x' = x + 0
    target = _tensor(problem.target, device)
    c, m, dt = float(problem.damping), float(problem.mass), float(problem.dt)

    def step(x: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        dx = x[b] - x[a]
        dv = v[b] - v[a]
        length = torch.linalg.vector_norm(dx, dim=1, keepdim=True)
        d = dx / length
        tension = k[:, None] * (length - rest[:, None]) + c * (dv * d).sum(dim=1, keepdim=True)
        f = tension * d
        force = torch.zeros_like(x).index_add_(0, a, f).index_add_(0, b, f, alpha=-1.0)
        v_new = (v + dt * (force / m + gravity)) * free
        return x + dt * v_new, v_new

    def objective() -> torch.Tensor:
        x, v = x0, v0
        for _ in range(problem.steps):
            x, v = step(x, v)
        return torch.mean((x - target) ** 2)

    return TorchRun({"stiffness": k}, objective)


# -- D: projectiles with drag and ground contact ----------------------------------------------------------------
def projectile(problem: Any, device: torch.device) -> TorchRun:
    """sopt's Projectile step (projectile.slang: kick, drift, time-of-impact contact with restitution, the
    rest of the step from the bounce, clamp of a settled particle), every branch computed and selected with
    ``torch.where``; divisions in the branch not taken get a safe denominator so that no NaN/Inf enters the
    backward. Parameters: per-particle drag (N,), restitution (N,) and v0 (N, 2)."""
    up = 1
    x0 = _tensor(problem.x0, device)
    v0 = _tensor(problem.v0, device, grad=True)
    drag = _tensor(problem.drag, device, grad=True)
    restitution = _tensor(problem.restitution, device, grad=True)
    gravity = _tensor(problem.gravity, device)
    target = _tensor(problem.target, device)
    c1, dt, h = float(problem.linear_drag), float(problem.dt), float(problem.ground)
    c2 = drag[:, None]
    e = restitution

    def accel(v: torch.Tensor) -> torch.Tensor:
        return gravity - (c1 + c2 * torch.linalg.vector_norm(v, dim=1, keepdim=True)) * v

    def step(x: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        a = accel(v)
        vs = v + dt * a
        xs = x + dt * vs
        contact = (xs[:, up] < h) & (vs[:, up] < 0.0)
        # min(x[UP], h), constant h (no gradient) where x[UP] >= h, as the kernel's adjoint
        base = torch.where(x[:, up] >= h, h, x[:, up])
        denominator = torch.where(contact, vs[:, up], -1.0)
        toi = torch.where(contact, torch.clamp((base - x[:, up]) / denominator, 0.0, dt), dt)
        rest = (dt - toi)[:, None]
        p = x + toi[:, None] * vs
        p = torch.stack([p[:, 0], base], dim=1)
        vi = v + toi[:, None] * a
        r = torch.stack([vi[:, 0], -e * vi[:, up]], dim=1)
        v_bounce = r + rest * accel(r)
        v_bounce = torch.stack([v_bounce[:, 0], torch.where(v_bounce[:, up] < 0.0, 0.0, v_bounce[:, up])], dim=1)
        x_bounce = p + rest * v_bounce
        hit = contact[:, None]
        return torch.where(hit, x_bounce, xs), torch.where(hit, v_bounce, vs)

    def objective() -> torch.Tensor:
        x, v = x0, v0
        for _ in range(problem.steps):
            x, v = step(x, v)
        return torch.mean((x - target) ** 2)

    return TorchRun({"drag": drag, "restitution": restitution, "v0": v0}, objective)


# -- E: heat diffusion with a conductivity field ----------------------------------------------------------------
def heat(problem: Any, device: torch.device) -> TorchRun:
    """sopt's Diffusion2D step with Dirichlet boundaries: u'_i = u_i + r sum_f kappa_f (u_f - u_i), faces in
    the kernel's order (row - 1, row + 1, col - 1, col + 1), kappa_f = (kappa_i + kappa_n) / 2, a ghost cell
    holding the boundary value and the cell's own kappa (replicate padding: (k + k) / 2 = k exactly).
    Parameter: the conductivity field (H, W)."""
    kappa = _tensor(problem.conductivity, device, grad=True)
    u0 = _tensor(problem.u0, device)
    target = _tensor(problem.target, device)
    r = float(problem.dt) / float(problem.dx) ** 2
    b = float(problem.boundary_value)

    def objective() -> torch.Tensor:
        kp = torch.nn.functional.pad(kappa[None, None], (1, 1, 1, 1), mode="replicate")[0, 0]
        faces = [0.5 * (kappa + kp[:-2, 1:-1]), 0.5 * (kappa + kp[2:, 1:-1]),
                 0.5 * (kappa + kp[1:-1, :-2]), 0.5 * (kappa + kp[1:-1, 2:])]
        u = u0
        for _ in range(problem.steps):
            up = torch.nn.functional.pad(u, (1, 1, 1, 1), value=b)
            flux = faces[0] * (up[:-2, 1:-1] - u) + faces[1] * (up[2:, 1:-1] - u)
            flux = flux + faces[2] * (up[1:-1, :-2] - u)
            flux = flux + faces[3] * (up[1:-1, 2:] - u)
            u = u + r * flux
        return torch.mean((u - target) ** 2)

    return TorchRun({"conductivity": kappa}, objective)


BUILDERS = {"cloth": cloth, "projectile": projectile, "heat": heat}


def build(kind: str, problem: Any, device: torch.device) -> TorchRun:
    """The torch run of a case of ``kind`` ("cloth", "projectile" or "heat")."""
    return BUILDERS[kind](problem, device)
