"""Diffusion2D: heat diffusion on a 2-D grid with a spatially varying conductivity (explicit finite volumes)."""

from __future__ import annotations

from typing import Any

import slangpy as spy

from sopt import tape as tp
from sopt.nn.batch import dummy
from sopt.nn.kernels import function, launch
from sopt.sim.grid2d import Grid2D, coefficient_args, coefficient_grad_args, grid_shape
from sopt.sim.simulator import Simulator
from sopt.sim.state import State

# dt may exceed the float64 bound by float32 rounding of the conductivity (a dt computed from the same numbers)
_BOUND_RTOL = 1e-6


class Diffusion2D(Simulator):
    """The heat equation du/dt = div(kappa grad u) + s on H x W cells of spacing ``dx``, explicit Euler in time.

    State: ``u`` (H, W), temperature (K). One step (dt in s, dx in m):

        u'_i = u_i + dt / dx^2 * sum_f kappa_f (u_f - u_i) + dt * s_i

    summed over the four faces f of cell i, u_f the temperature across f and kappa_f = (kappa_i + kappa_f) / 2
    the arithmetic mean of the two cells' conductivities (it keeps the face's gradient linear in each cell's
    kappa; for a uniform kappa any mean gives the same step). Boundaries (see sopt.sim.grid2d):
    ``"dirichlet"``: ghost cells outside hold ``boundary_value`` (K) and take the boundary cell's kappa, so a
    boundary face adds kappa_i (b - u_i); ``"insulated"``: no flux through the boundary (total heat
    sum_i u_i changes only by dt * sum_i s_i).

    Stability: the explicit step is stable (and keeps the maximum principle) iff dt <= dx^2 / (4 kappa_max);
    a larger dt is refused at construction. Training can move a Parameter conductivity past the bound:
    call :meth:`check_stability` (it reads the values back) after optimiser steps, e.g. once per epoch.

    Args:
        u0: initial temperature (H, W), K: an array or a Parameter (trainable).
        conductivity: kappa (m^2/s), > 0: a number or (1,) shared by every cell, or a field (H, W); a constant
            or a Parameter.
        dx: grid spacing (m), > 0.
        dt: time step (s), > 0 and <= dx^2 / (4 kappa_max).
        boundary: ``"dirichlet"`` or ``"insulated"``.
        boundary_value: the Dirichlet ghost cells' temperature (K); unused when insulated.
        source: heating rate s (K/s) added each step, shared or a field (H, W), constant or Parameter;
            None for no source.

    Per step: one forward dispatch (a thread per cell) and one adjoint dispatch, which adds dL/du into the
    input state's gradient and dL/dkappa, dL/ds into Parameters' gradients (a field's entry owned by its
    cell's thread: no atomics).
    """

    state_names = ("u",)

    def __init__(self, u0: Any, conductivity: Any, dx: float, dt: float, *, boundary: str = "dirichlet",
                 boundary_value: float = 0.0, source: Any = None) -> None:
        super().__init__(dt)
        shape = grid_shape(u0, "Diffusion2D u0")
        self.grid = Grid2D(shape, dx, boundary, boundary_value, "Diffusion2D")
        self.conductivity = self._coefficient("conductivity", conductivity, shape, low=0.0, low_inclusive=False,
                                              unit="m^2/s")
        self.source = self._coefficient("source", 0.0 if source is None else source, shape, unit="K/s")
        self._initial("u", u0, shape, unit="K")
        self.check_stability()
        self._step_fn = function("sim/diffusion2d", "diffusion2d_step")
        self._adjoint_fn = function("sim/diffusion2d", "diffusion2d_adjoint")

    def max_stable_dt(self) -> float:
        """dx^2 / (4 kappa_max) (s) for the conductivity now (reads a Parameter's values: waits for the GPU)."""
        return self.grid.dx ** 2 / (4.0 * float(self.conductivity.numpy().max()))

    def check_stability(self) -> float:
        """The bound :meth:`max_stable_dt`; ValueError if ``dt`` exceeds it (call it after training moved a
        Parameter conductivity: the explicit step would blow up)."""
        bound = self.max_stable_dt()
        if self.dt > bound * (1.0 + _BOUND_RTOL):
            kmax = float(self.conductivity.numpy().max())
            raise ValueError(f"Diffusion2D dt={self.dt!r} s is unstable for the explicit step: it must be <= "
                             f"dx^2 / (4 kappa_max) = {bound:.6g} s (dx={self.grid.dx} m, kappa_max={kmax:.6g} m^2/s)")
        return bound

    def step(self, state: State, control: spy.Tensor | None = None) -> State:
        """The state ``dt`` later (a new State); ``control`` is not taken (ValueError)."""
        self.check_no_control(control)
        state = self.check_state(state, "Diffusion2D.step")
        out = self.new_state()
        u, u_next = state.u, out.u
        g, dt = self.grid, self.dt
        r = dt / g.dx ** 2
        kappa, source = self.conductivity, self.source
        tape = tp.current_tape()

        def forward(enc: spy.CommandEncoder) -> None:
            launch(self._step_fn, enc, g.threads, g.args(), r, dt, g.flat(u), coefficient_args(kappa),
                   coefficient_args(source), g.flat(u_next))

        def backward(enc: spy.CommandEncoder, redirect: dict[int, spy.Tensor]) -> None:
            write_du = u.grad_out is not None and tape.requires_grad(u)
            launch(self._adjoint_fn, enc, g.threads, g.args(), r, dt, g.flat(u), g.flat(u_next.grad),
                   coefficient_args(kappa), coefficient_grad_args(kappa), coefficient_grad_args(source),
                   g.flat(u.grad) if write_du else dummy(1), int(write_du))

        params = [c.parameter for c in (kappa, source) if c.parameter is not None]
        tp.record("Diffusion2D.step", forward, backward, reads=[u], writes=[u_next], add_grads=[u], params=params)
        return out

    def __repr__(self) -> str:
        return f"Diffusion2D({self.grid!r}, conductivity={self.conductivity!r}, source={self.source!r}, dt={self.dt})"
