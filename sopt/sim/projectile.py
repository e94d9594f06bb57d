"""Projectile: independent point particles in 2D or 3D under gravity and drag, bouncing on a ground plane
(kernels: slang_lib/sim/projectile.slang)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import numpy as np
import slangpy as spy
from pydantic import Field

from sopt.autodiff import tape as tp
from sopt.config.registry import ComponentConfig, register
from sopt.runtime.device import get_device
from sopt.runtime.kernel import Function, launch
from sopt.autodiff.parameter import Parameter
from sopt.sim.coefficient import Coefficient
from sopt.sim.simulator import Simulator
from sopt.sim.state import State
from sopt.utils.validation import as_float32_array, check_float, check_int

UP = 1                   # the "up" axis (y)
STANDARD_GRAVITY = 9.81  # m/s^2
SEGMENT = 32             # steps between the states Projectile.steps saves for its adjoint (~sqrt(1000))


class ProjectileConfig(ComponentConfig):
    """Point particles under gravity and drag bouncing on a ground plane (sopt.sim.Projectile); the initial
    positions and velocities are build arguments."""

    otype: Literal["Projectile"] = "Projectile"
    dt: float = Field(1e-2, gt=0.0, le=1e3, description="time step (s)")
    gravity: Annotated[list[Annotated[float, Field(ge=-1e6, le=1e6)]], Field(min_length=2, max_length=3)] | None = Field(
        None, description="acceleration per axis, axis 1 up (m/s^2; None: 9.81 down)")
    drag: float = Field(0.0, ge=0.0, le=1e6, description="quadratic drag coefficient (1/m)")
    linear_drag: float = Field(0.0, ge=0.0, le=1e6, description="linear drag coefficient (1/s)")
    restitution: float = Field(1.0, ge=0.0, le=1.0, description="fraction of the normal speed kept at a bounce")
    ground: float | None = Field(0.0, ge=-1e9, le=1e9, description="height of the ground plane (m; None: no ground)")


@register("simulator", "Projectile", ProjectileConfig)
class Projectile(Simulator):
    """N independent particles in ``dim`` = 2 or 3 dimensions (axis 1 is up), semi-implicit Euler.

    State: ``x`` (N, dim) positions in m, ``v`` (N, dim) velocities in m/s. With the acceleration
    a(u) = g - (linear_drag + drag * |u|) * u (m/s^2), one step of length ``dt`` (s) is::

        vs = v + dt * a(v)                 (kick)
        xs = x + dt * vs                   (drift)
        x', v' = xs, vs                    (no contact)

    Ground contact (the plane x[1] = ``ground`` = h): when the drift would carry a particle below the plane
    (xs[1] < h and vs[1] < 0), its straight path x + s * vs, 0 <= s <= dt, reaches the plane at the time of
    impact toi = (h - x[1]) / vs[1]. The particle is moved there, p = x + toi * vs (p[1] = h); its velocity
    at that time, vi = v + toi * a(v), has its normal component reflected, r = vi with r[1] = -e * vi[1] (e =
    ``restitution``; no friction: the tangential components are kept); the rest of the step is a
    semi-implicit Euler step from (p, r)::

        v' = r + (dt - toi) * a(r),   v'[1] = max(v'[1], 0),   x' = p + (dt - toi) * v'

    The clamp ends the step on the ground at rest when the rebound does not outlast the rest of the step (e = 0,
    or the last small bounces): particles never end a step below the ground, and resting contact is exact.
    toi -> dt gives the drift's end point and toi -> 0 the step after a bounce at the step boundary, so x' and
    v' do not jump when an impact moves across a step boundary, and their gradients see the impact time
    (DiffTaichi's billiards' time-of-impact correction; taking the impact velocity at toi makes the post-bounce
    velocity, and so d(height)/d(drop height), converge to the continuous answer as dt -> 0). A particle that a
    hand-made state puts below the plane bounces from where it is (toi = 0, p = x). The contact test itself
    has no gradient.

    Args:
        x0, v0: initial positions (m) and velocities (m/s), arrays of shape (N, dim) or Parameters; every
            particle starts on or above the ground.
        dt: the time step in s (> 0). With drag it must keep the kick stable: dt * (linear_drag + 2 * drag *
            u) < 2 per particle, u = max(|v0|, sqrt(|g| / drag)) bounding its speed (the linearised bound).
        gravity: acceleration in m/s^2, shared (dim,) or per particle (N, dim); default (0, -9.81[, 0]).
        linear_drag: in 1/s (>= 0), shared (a number or (1,)) or per particle (N,).
        drag: quadratic drag in 1/m (>= 0), shared or per particle.
        restitution: e in [0, 1], shared or per particle.
        ground: the plane's height in m, or None for no ground.

    Every coefficient and ``x0``, ``v0`` may be a :class:`sopt.Parameter` (trainable) or a constant; a
    Parameter's values are checked here, not again after an optimiser moves them. ``step`` records one
    forward dispatch and, at ``tape.backward``, one adjoint dispatch (slang_lib/sim/projectile.slang);
    ``steps(state, n)`` records n steps as one forward and one adjoint dispatch.
    """

    state_names = ("x", "v")

    def __init__(self, x0: Any, v0: Any, *, dt: float, gravity: Any = None, drag: Any = 0.0,
                 linear_drag: Any = 0.0, restitution: Any = 1.0, ground: float | None = 0.0) -> None:
        super().__init__(dt)
        n, dim = _particles(x0)
        self.n, self.dim = n, dim
        self.ground = None if ground is None else check_float(ground, "Projectile ground")
        x = self._initial("x", x0, (n, dim), unit="m")
        v = self._initial("v", v0, (n, dim), unit="m/s")
        if gravity is None:
            gravity = [0.0, -STANDARD_GRAVITY, 0.0][:dim]
        self.gravity = self._coefficient("gravity", gravity, _gravity_shape(gravity, n, dim), shareable=False,
                                         unit="m/s^2")
        self.linear_drag = self._coefficient("linear_drag", linear_drag, (n,), low=0.0, unit="1/s")
        self.drag = self._coefficient("drag", drag, (n,), low=0.0, unit="1/m")
        self.restitution = self._coefficient("restitution", restitution, (n,), low=0.0)
        e = self.restitution.numpy()
        if (e > 1.0).any():
            raise ValueError(f"Projectile restitution must be in [0, 1], got {float(e.max()):g}")
        x0_values = x.numpy()
        if self.ground is not None and (x0_values[:, UP] < self.ground).any():
            i = int(np.argmin(x0_values[:, UP]))
            raise ValueError(f"Projectile x0: particle {i} starts below the ground (height {x0_values[i, UP]:g} m < "
                             f"ground {self.ground:g} m); particles must start on or above it")
        self._check_stability(v.numpy())
        self._forward_fn = Function("sim/projectile", "projectile_step", dim)
        self._adjoint_fn = Function("sim/projectile", "projectile_step_adjoint", dim)
        self._steps_fn = Function("sim/projectile", "projectile_steps", dim)
        self._steps_adjoint_fn = Function("sim/projectile", "projectile_steps_adjoint", dim, SEGMENT)
        device = get_device()
        self._no_grad = spy.Tensor.zeros(device, (1, dim), "float")   # for a dL/dstate not wanted: never touched
        self._no_starts = spy.Tensor.zeros(device, (1, 1, 2 * dim), "float")   # steps with nothing to save

    def _check_stability(self, v0: np.ndarray) -> None:
        """ValueError where dt * (c1 + 2 c2 u) >= 2 (the kick's linearisation grows), u bounding the speed."""
        c1 = np.broadcast_to(self.linear_drag.numpy(), (self.n,))
        c2 = np.broadcast_to(self.drag.numpy(), (self.n,))
        g = np.linalg.norm(np.broadcast_to(self.gravity.numpy(), (self.n, self.dim)), axis=1)
        terminal = np.where(c2 > 0, np.sqrt(g / np.where(c2 > 0, c2, 1.0)), 0.0)   # sqrt(|g| / drag)
        speed = np.maximum(np.linalg.norm(v0, axis=1), terminal)
        rate = self.dt * (c1 + 2.0 * c2 * speed)
        if (rate >= 2.0).any():
            i = int(np.argmax(rate))
            limit = 2.0 / (c1[i] + 2.0 * c2[i] * speed[i])
            raise ValueError(f"Projectile dt={self.dt:g} s is unstable for particle {i}: dt * (linear_drag + 2 * drag"
                             f" * speed) = {rate[i]:.4g} >= 2 (linear_drag {c1[i]:g} 1/s, drag {c2[i]:g} 1/m, speed "
                             f"bound {speed[i]:.4g} m/s); use dt < {limit:.4g} s")

    def to_config(self) -> ProjectileConfig:
        """The config of this simulator (x0, v0 are build arguments: ``from_config(config, x0, v0)``); ValueError
        for a per-particle coefficient."""
        return ProjectileConfig(dt=self.dt, gravity=self.config_vector("gravity", self.dim),
                                drag=self.config_number("drag"), linear_drag=self.config_number("linear_drag"),
                                restitution=self.config_number("restitution"), ground=self.ground)

    def _arg(self, c: Coefficient, width: int) -> dict[str, Any]:
        """The ``Coefficient`` struct of projectile.slang (values fetched now: a Parameter's view can move)."""
        size = int(np.prod(c.shape))
        return {"values": c.values.view((size,)), "grad": c.grad.view((size,)),
                "shared": int(c.shape == (width,)), "want_grad": int(c.trainable)}

    def _coefficient_args(self) -> dict[str, dict[str, Any]]:
        """The four ``Coefficient`` arguments of every projectile kernel, by their Slang parameter names."""
        return {"gravity": self._arg(self.gravity, self.dim), "linear_drag": self._arg(self.linear_drag, 1),
                "drag": self._arg(self.drag, 1), "restitution": self._arg(self.restitution, 1)}

    def _ground_arg(self) -> dict[str, Any]:
        return {"enabled": int(self.ground is not None), "height": 0.0 if self.ground is None else self.ground}

    def step(self, state: State, control: spy.Tensor | None = None) -> State:
        """The state ``dt`` later (new arrays): one dispatch now, its adjoint (one dispatch) at ``tape.backward``."""
        self.check_no_control(control)
        state = self.check_state(state, "Projectile.step")
        out = self.new_state()
        grid = spy.grid((self.n,))
        tape = tp.current_tape()
        want_dx = tape is not None and tape.requires_grad(state.x)
        want_dv = tape is not None and tape.requires_grad(state.v)

        def forward(enc: spy.CommandEncoder) -> None:
            launch(self._forward_fn, enc, i=grid, x=state.x, v=state.v, **self._coefficient_args(), dt=self.dt,
                   ground=self._ground_arg(), x_out=out.x, v_out=out.v)

        def backward(enc: spy.CommandEncoder, redirect: dict[int, spy.Tensor]) -> None:
            launch(self._adjoint_fn, enc, i=grid, x=state.x, v=state.v, **self._coefficient_args(), dt=self.dt,
                   ground=self._ground_arg(), dx_out=out.x.grad, dv_out=out.v.grad, want_dx=int(want_dx),
                   dx=state.x.grad if want_dx else self._no_grad, want_dv=int(want_dv),
                   dv=state.v.grad if want_dv else self._no_grad)

        tp.record("Projectile.step", forward, backward, reads=[state.x, state.v], writes=[out.x, out.v],
                  add_grads=[state.x, state.v], params=self._trainable())
        return out

    def fuses_steps(self) -> bool:
        """True: :meth:`steps` is a fused kernel."""
        return True

    def steps(self, state: State, n: int) -> State:
        """The state ``n * dt`` later (new arrays): the same values and gradients as n calls of :meth:`step`,
        in one forward dispatch now and one adjoint dispatch at ``tape.backward``.

        The forward advances every particle n steps in registers. On a tape whose backward will need it, it
        also saves the state (x, v) at steps SEGMENT, 2 SEGMENT, ... < n into a pooled array of shape
        (ceil(n / SEGMENT) - 1, N, 2 dim) (24 bytes per particle and segment in 3D); the adjoint recomputes
        each segment from its start and runs the per-step adjoint through it in reverse. Outside a tape it runs
        at once and saves nothing. ``n = 0`` returns ``state`` itself.
        """
        n = check_int(n, "Projectile.steps n", low=0)
        state = self.check_state(state, "Projectile.steps")
        if n == 0:
            return state
        out = self.new_state()
        grid = spy.grid((self.n,))
        tape = tp.current_tape()
        want_dx = tape is not None and tape.requires_grad(state.x)
        want_dv = tape is not None and tape.requires_grad(state.v)
        params = self._trainable()
        save = tape is not None and not tape.forward_only and (bool(params) or want_dx or want_dv)
        rows = (n - 1) // SEGMENT   # segment starts after the input state
        starts = tp.new_tensor((rows, self.n, 2 * self.dim), grads=False) if save and rows > 0 else self._no_starts

        def forward(enc: spy.CommandEncoder) -> None:
            launch(self._steps_fn, enc, i=grid, x=state.x, v=state.v, **self._coefficient_args(), dt=self.dt,
                   ground=self._ground_arg(), n=n, segment=SEGMENT, save=int(save), starts=starts, x_out=out.x,
                   v_out=out.v)

        def backward(enc: spy.CommandEncoder, redirect: dict[int, spy.Tensor]) -> None:
            launch(self._steps_adjoint_fn, enc, i=grid, x=state.x, v=state.v, **self._coefficient_args(), dt=self.dt,
                   ground=self._ground_arg(), n=n, starts=starts, dx_out=out.x.grad, dv_out=out.v.grad,
                   want_dx=int(want_dx), dx=state.x.grad if want_dx else self._no_grad, want_dv=int(want_dv),
                   dv=state.v.grad if want_dv else self._no_grad)

        tp.record(f"Projectile.steps({n})", forward, backward if save else None,
                  reads=[state.x, state.v] + ([starts] if starts is not self._no_starts else []),
                  writes=[out.x, out.v], add_grads=[state.x, state.v], params=params)
        return out

    def _trainable(self) -> list[Parameter]:
        """The Parameters among the coefficients a step reads (what its adjoint adds gradients into)."""
        coefficients = (self.gravity, self.linear_drag, self.drag, self.restitution)
        return [c.parameter for c in coefficients if c.parameter is not None]


def _particles(x0: Any) -> tuple[int, int]:
    """(N, dim) of the initial positions, else ValueError (dim must be 2 or 3)."""
    shape = x0.shape if isinstance(x0, Parameter) else as_float32_array(x0, "Projectile initial x").shape
    if len(shape) != 2 or shape[1] not in (2, 3):
        raise ValueError(f"Projectile initial x must have shape (N, dim) with dim 2 or 3, got {tuple(shape)}")
    return int(shape[0]), int(shape[1])


def _gravity_shape(gravity: Any, n: int, dim: int) -> tuple[int, ...]:
    """(dim,) for a shared gravity vector, (n, dim) per particle; ValueError for any other shape."""
    shape = gravity.shape if isinstance(gravity, Parameter) else as_float32_array(gravity, "Projectile gravity").shape
    if tuple(shape) not in ((dim,), (n, dim)):
        raise ValueError(f"Projectile gravity has shape {tuple(shape)}, expected ({dim},) (shared) or ({n}, {dim}) "
                         "(per particle)")
    return tuple(shape)
