"""Wave2D: the damped scalar wave equation on a 2-D grid with a spatially varying wave speed (symplectic Euler)."""

from __future__ import annotations

import math
from typing import Any, Literal

import numpy as np
import slangpy as spy
from pydantic import Field

from sopt.autodiff import tape as tp
from sopt.config.registry import ComponentConfig, register
from sopt.runtime.kernel import Function, dummy, launch
from sopt.sim.grid2d import Grid2D, coefficient_args, coefficient_grad_args, grid_shape
from sopt.sim.simulator import Simulator
from sopt.sim.state import State

# dt may exceed the float64 bound by float32 rounding of c (a dt computed from the same numbers)
_BOUND_RTOL = 1e-6


class Wave2DConfig(ComponentConfig):
    """The damped wave equation on a grid, symplectic Euler (sopt.sim.Wave2D), with a uniform wave speed and
    damping; the initial displacement (and velocity, ``v0=``) are build arguments."""

    otype: Literal["Wave2D"] = "Wave2D"
    c: float = Field(1.0, gt=0.0, le=1e9, description="wave speed (m/s)")
    damping: float = Field(0.0, ge=0.0, le=1e9, description="velocity damping gamma (1/s)")
    dx: float = Field(1e-2, gt=0.0, le=1e6, description="grid spacing (m)")
    dt: float = Field(5e-3, gt=0.0, le=1e9, description="time step (s; at most dx / (c sqrt(2)) without damping)")
    boundary: Literal["dirichlet", "insulated"] = Field("dirichlet", description="clamped edge, or a free "
                                                                                 "(reflecting) one")
    boundary_value: float = Field(0.0, ge=-1e30, le=1e30, description="displacement outside a Dirichlet boundary "
                                                                      "(m)")


@register("simulator", "Wave2D", Wave2DConfig)
class Wave2D(Simulator):
    """u_tt = c^2 lap(u) - gamma u_t on H x W cells of spacing ``dx``, symplectic (semi-implicit) Euler in time.

    States: ``u`` (H, W), displacement (m); ``v`` (H, W), velocity (m/s). One step (dt in s, dx in m):

        L_i  = sum_f (u_f - u_i) / dx^2          (5-point Laplacian, u_f the value across face f of cell i)
        v'_i = v_i + dt (c_i^2 L_i - gamma_i v_i)
        u'_i = u_i + dt v'_i

    with c^2 taken per cell. Boundaries (see sopt.sim.grid2d): ``"dirichlet"``: ghost cells outside hold
    ``boundary_value`` (m; a clamped membrane at 0); ``"insulated"``: the ghost mirrors the cell (zero normal
    derivative: a reflecting, free edge; sum_i v_i is then conserved for a uniform c and no damping).

    Without damping the scheme is symplectic: a standing mode of Laplacian eigenvalue -lambda oscillates with
    the discrete frequency theta per step, cos(theta) = 1 - dt^2 c^2 lambda / 2, at constant amplitude.

    Stability: lambda <= 8 / dx^2, so the step is stable iff dt <= dx / (c_max sqrt(2)) (CFL); with damping
    the bound is dt <= 4 / (gamma_max + sqrt(gamma_max^2 + 32 c_max^2 / dx^2)), which is the CFL bound at
    gamma = 0 and smaller otherwise. A larger dt is refused at construction; call :meth:`check_stability`
    (it reads the values back) after training moved a Parameter c or damping.

    Args:
        u0: initial displacement (H, W), m: an array or a Parameter (trainable).
        c: wave speed (m/s), > 0: a number or (1,) shared by every cell, or a field (H, W); constant or Parameter.
        dx: grid spacing (m), > 0.
        dt: time step (s), > 0, within the bound above.
        v0: initial velocity (H, W), m/s, array or Parameter; None for zero.
        damping: gamma (1/s), >= 0, shared or a field (H, W), constant or Parameter; None for none.
        boundary: ``"dirichlet"`` or ``"insulated"``.
        boundary_value: the Dirichlet ghost cells' displacement (m); unused when insulated.

    Per step: one forward dispatch (a thread per cell writes u' and v') and one adjoint dispatch, adding dL/du,
    dL/dv into the input state's gradients and dL/dc, dL/dgamma into Parameters' gradients.
    """

    state_names = ("u", "v")

    def __init__(self, u0: Any, c: Any, dx: float, dt: float, *, v0: Any = None, damping: Any = None,
                 boundary: str = "dirichlet", boundary_value: float = 0.0) -> None:
        super().__init__(dt)
        shape = grid_shape(u0, "Wave2D u0")
        self.grid = Grid2D(shape, dx, boundary, boundary_value, "Wave2D")
        self.c = self._coefficient("c", c, shape, low=0.0, low_inclusive=False, unit="m/s")
        self.damping = self._coefficient("damping", 0.0 if damping is None else damping, shape, low=0.0,
                                         unit="1/s")
        self._initial("u", u0, shape, unit="m")
        self._initial("v", np.zeros(shape) if v0 is None else v0, shape, unit="m/s")
        self.check_stability()
        self._step_fn = Function("sim/wave2d", "wave2d_step")
        self._adjoint_fn = Function("sim/wave2d", "wave2d_adjoint")

    def to_config(self) -> Wave2DConfig:
        """The config of this simulator (u0 is a build argument: ``from_config(config, u0, v0=...)``); ValueError
        for a field of c or damping (pass it as an override)."""
        return Wave2DConfig(c=self.config_number("c"), damping=self.config_number("damping"), dx=self.grid.dx,
                            dt=self.dt, boundary=self.grid.boundary, boundary_value=self.grid.boundary_value)

    def max_stable_dt(self) -> float:
        """4 / (gamma_max + sqrt(gamma_max^2 + 32 c_max^2 / dx^2)) (s; dx / (c_max sqrt 2) without damping) for
        the values now (reads Parameters' values: waits for the GPU)."""
        c_max = float(self.c.numpy().max())
        gamma_max = float(self.damping.numpy().max())
        return 4.0 / (gamma_max + math.sqrt(gamma_max ** 2 + 32.0 * c_max ** 2 / self.grid.dx ** 2))

    def check_stability(self) -> float:
        """The bound :meth:`max_stable_dt`; ValueError if ``dt`` exceeds it (call it after training moved a
        Parameter c or damping)."""
        bound = self.max_stable_dt()
        if self.dt > bound * (1.0 + _BOUND_RTOL):
            c_max = float(self.c.numpy().max())
            gamma_max = float(self.damping.numpy().max())
            cfl = self.grid.dx / (c_max * math.sqrt(2.0))
            if gamma_max == 0.0:
                rule = f"the CFL condition dt <= dx / (c_max sqrt(2)) = {bound:.6g} s"
            else:
                rule = (f"dt <= 4 / (gamma_max + sqrt(gamma_max^2 + 32 c_max^2 / dx^2)) = {bound:.6g} s (the CFL "
                        f"bound dx / (c_max sqrt(2)) = {cfl:.6g} s lowered by damping gamma_max={gamma_max:.6g} 1/s)")
            raise ValueError(f"Wave2D dt={self.dt!r} s is unstable: it must satisfy {rule} (dx={self.grid.dx} m, "
                             f"c_max={c_max:.6g} m/s)")
        return bound

    def step(self, state: State, control: spy.Tensor | None = None) -> State:
        """The state ``dt`` later (a new State); ``control`` is not taken (ValueError)."""
        self.check_no_control(control)
        state = self.check_state(state, "Wave2D.step")
        out = self.new_state()
        u, v, u_next, v_next = state.u, state.v, out.u, out.v
        g, dt = self.grid, self.dt
        inv_dx2 = 1.0 / g.dx ** 2
        c, damping = self.c, self.damping
        tape = tp.current_tape()

        def forward(enc: spy.CommandEncoder) -> None:
            launch(self._step_fn, enc, i=g.threads, grid=g.args(), inv_dx2=inv_dx2, dt=dt, u=g.flat(u), v=g.flat(v),
                   c=coefficient_args(c), damping=coefficient_args(damping), u_next=g.flat(u_next),
                   v_next=g.flat(v_next))

        def backward(enc: spy.CommandEncoder, redirect: dict[int, spy.Tensor]) -> None:
            write_du = u.grad_out is not None and tape.requires_grad(u)
            write_dv = v.grad_out is not None and tape.requires_grad(v)
            launch(self._adjoint_fn, enc, i=g.threads, grid=g.args(), inv_dx2=inv_dx2, dt=dt, u=g.flat(u), v=g.flat(v),
                   gu_next=g.flat(u_next.grad), gv_next=g.flat(v_next.grad), c=coefficient_args(c),
                   c_grad=coefficient_grad_args(c), damping=coefficient_args(damping),
                   damping_grad=coefficient_grad_args(damping), du=g.flat(u.grad) if write_du else dummy(1),
                   write_du=int(write_du), dv=g.flat(v.grad) if write_dv else dummy(1), write_dv=int(write_dv))

        params = [k.parameter for k in (c, damping) if k.parameter is not None]
        tp.record("Wave2D.step", forward, backward, reads=[u, v], writes=[u_next, v_next], add_grads=[u, v],
                  params=params)
        return out

    def __repr__(self) -> str:
        return f"Wave2D({self.grid!r}, c={self.c!r}, damping={self.damping!r}, dt={self.dt})"
