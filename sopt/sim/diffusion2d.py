"""Diffusion2D: heat diffusion on a 2-D grid with a spatially varying conductivity (explicit finite volumes)."""

from __future__ import annotations

from typing import Any, Literal

import slangpy as spy
from pydantic import Field

from sopt.runtime import device as dev
from sopt.config.registry import ComponentConfig, register
from sopt.autodiff import tape as tp
from sopt.runtime.kernel import Function, Kernel, dummy, dummy_buffer, launch
from sopt.sim.coefficient import Coefficient
from sopt.sim.diffusion2d_grid_steps import Diffusion2DGridSteps
from sopt.sim.grid2d import (BlockTiling, Grid2D, TemporalBlocking, coefficient_args, coefficient_grad_args,
                             grid_shape)
from sopt.sim.simulator import Simulator
from sopt.sim.state import State
from sopt.utils.validation import check_int

# dt may exceed the float64 bound by float32 rounding of the conductivity (a dt computed from the same numbers)
_BOUND_RTOL = 1e-6

# slang_lib/sim/diffusion2d_steps.slang's thread groups: threads and region cells (threads x cells per thread)
# of the forward and backward kernels, and the most steps per block (the backward's register history)
FORWARD_THREADS, FORWARD_CAPACITY = 256, 256 * 16
BACKWARD_THREADS, BACKWARD_CAPACITY = 256, 256 * 9
MAX_BLOCK_STEPS = 8


class Diffusion2DConfig(ComponentConfig):
    """The heat equation on a grid, explicit Euler (sopt.sim.Diffusion2D), with a uniform conductivity; the
    initial temperature is a build argument (a conductivity field or a source: overrides)."""

    otype: Literal["Diffusion2D"] = "Diffusion2D"
    conductivity: float = Field(1e-4, gt=0.0, le=1e12, description="diffusivity kappa (m^2/s)")
    dx: float = Field(1e-2, gt=0.0, le=1e6, description="grid spacing (m)")
    dt: float = Field(0.1, gt=0.0, le=1e9, description="time step (s; at most dx^2 / (4 kappa))")
    boundary: Literal["dirichlet", "insulated"] = Field("dirichlet", description="fixed boundary temperature, or no "
                                                                                 "flux through the boundary")
    boundary_value: float = Field(0.0, ge=-1e30, le=1e30, description="temperature outside a Dirichlet boundary (K)")


@register("simulator", "Diffusion2D", Diffusion2DConfig)
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
        blocking: how :meth:`steps` fuses steps (:class:`~sopt.sim.grid2d.TemporalBlocking`): K <= 8 steps per
            dispatch, forward tiles of up to 4096 region cells ((rows + 2K) x (cols + 2K)), backward tiles of up
            to 2304. The default, K = 8 with 48 x 48 forward and 32 x 32 backward tiles, fills both kernels'
            groups (64 x 64 and 48 x 48 regions). Why: a dispatch costs more host time than the GPU takes to run
            a 512 x 512 block, so K should be large (2000 steps: 250 dispatches each way); but the
            backward keeps K states per cell in registers and a tile recomputes (T + 2K)^2 / T^2 times its own
            work (1.8x forward, 2.25x backward here), which both grow with K.

    :meth:`step`: one forward dispatch (a thread per cell) and one adjoint dispatch, which adds dL/du into the
    input state's gradient and dL/dkappa, dL/ds into Parameters' gradients (a field's entry owned by its
    cell's thread: no atomics). :meth:`steps` runs n steps in ceil(n / K) dispatches each way, or on CUDA, for
    grids from 64 x 64 cells up to what fits one group per multiprocessor, in one dispatch each way
    (:attr:`grid_steps`, sopt/sim/diffusion2d_grid_steps.py; ``blocking`` is then unused).
    """

    state_names = ("u",)

    def __init__(self, u0: Any, conductivity: Any, dx: float, dt: float, *, boundary: str = "dirichlet",
                 boundary_value: float = 0.0, source: Any = None, blocking: TemporalBlocking | None = None) -> None:
        super().__init__(dt)
        shape = grid_shape(u0, "Diffusion2D u0")
        self.grid = Grid2D(shape, dx, boundary, boundary_value, "Diffusion2D")
        self.blocking = TemporalBlocking() if blocking is None else blocking
        if not isinstance(self.blocking, TemporalBlocking):
            raise ValueError(f"Diffusion2D blocking must be a sopt.sim.grid2d.TemporalBlocking, got "
                             f"{type(blocking).__name__}")
        k = check_int(self.blocking.steps, "Diffusion2D blocking.steps", low=1)
        if k > MAX_BLOCK_STEPS:
            raise ValueError(f"Diffusion2D blocking.steps must be in [1, {MAX_BLOCK_STEPS}], got {k}")
        self._forward_tiling = BlockTiling(self.grid, self.blocking.forward_tile, k, FORWARD_CAPACITY,
                                           "Diffusion2D blocking.forward_tile")
        self._backward_tiling = BlockTiling(self.grid, self.blocking.backward_tile, k, BACKWARD_CAPACITY,
                                            "Diffusion2D blocking.backward_tile")
        self.conductivity = self._coefficient("conductivity", conductivity, shape, low=0.0, low_inclusive=False,
                                              unit="m^2/s")
        self.source = self._coefficient("source", 0.0 if source is None else source, shape, unit="K/s")
        self._initial("u", u0, shape, unit="K")
        self.check_stability()
        self._step_fn = Function("sim/diffusion2d", "diffusion2d_step")
        self._adjoint_fn = Function("sim/diffusion2d", "diffusion2d_adjoint")
        self._blocks: dict[str, dev.BoundKernel] = {}   # the steps kernels, bound on first use
        self._pingpong: spy.Tensor | None = None         # steps' intermediate states when no gradient is kept
        self._grid_steps: Diffusion2DGridSteps | None = None

    def to_config(self) -> Diffusion2DConfig:
        """The config of this simulator (u0 is a build argument: ``from_config(config, u0)``); ValueError for a
        conductivity field (pass it as an override) or a source (not a config key)."""
        if self.source.shape != (1,) or float(self.source.numpy()[0]) != 0.0:
            raise ValueError("Diffusion2D.to_config: the source has no config key (pass it to from_config as "
                             "source=...)")
        return Diffusion2DConfig(conductivity=self.config_number("conductivity"), dx=self.grid.dx, dt=self.dt,
                                 boundary=self.grid.boundary, boundary_value=self.grid.boundary_value)

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
            launch(self._step_fn, enc, i=g.threads, grid=g.args(), r=r, dt=dt, u=g.flat(u),
                   kappa=coefficient_args(kappa), source=coefficient_args(source), u_next=g.flat(u_next))

        def backward(enc: spy.CommandEncoder, redirect: dict[int, spy.Tensor]) -> None:
            write_du = u.grad_out is not None and tape.requires_grad(u)
            launch(self._adjoint_fn, enc, i=g.threads, grid=g.args(), r=r, dt=dt, u=g.flat(u),
                   g_next=g.flat(u_next.grad), kappa=coefficient_args(kappa), kappa_grad=coefficient_grad_args(kappa),
                   source_grad=coefficient_grad_args(source), du=g.flat(u.grad) if write_du else dummy(1),
                   write_du=int(write_du))

        params = [c.parameter for c in (kappa, source) if c.parameter is not None]
        tp.record("Diffusion2D.step", forward, backward, reads=[u], writes=[u_next], add_grads=[u], params=params)
        return out

    def fuses_steps(self) -> bool:
        """True: :meth:`steps` is a fused kernel."""
        return True

    def steps(self, state: State, n: int) -> State:
        """The state ``n * dt`` later (a new State; ``state`` itself for n = 0), equal to n calls of :meth:`step`
        up to float32 rounding, in ceil(n / K) dispatches (K = ``blocking.steps``); where
        ``grid_steps.fits()`` (CUDA) in one forward and one adjoint dispatch that keeps every intermediate
        state instead (sopt/sim/diffusion2d_grid_steps.py).

        On a tape whose gradient reaches this call (a Parameter coefficient, or ``state.u`` needing one) the
        forward keeps the ceil(n / K) - 1 inner block-start states (the tape's pool: H x W floats each) and the
        backward is ceil(n / K) dispatches in reverse, each recomputing its block's states from its start
        (about one more forward pass). Otherwise (no tape, or nothing to differentiate) two scratch fields
        serve every block.
        """
        n = check_int(n, "Diffusion2D.steps n", low=0)
        state = self.check_state(state, "Diffusion2D.steps")
        if not state.u.is_contiguous():   # the kernels index the buffer row-major from the offset
            raise ValueError("Diffusion2D.steps: state array 'u' must be contiguous (a simulator's own states are)")
        if n == 0:
            return state
        if self.grid_steps.fits():
            return self.grid_steps.run(state, n)
        out = self.new_state()
        u, u_end = state.u, out.u
        H, W = self.grid.shape
        blocks = -(-n // self.blocking.steps)
        kappa, source = self.conductivity, self.source
        params, keep = self.steps_parameters(u)
        tape = tp.current_tape()
        held, slots = self.held_states(blocks - 1, keep)   # the states at inner block starts
        g_held = tp.new_tensor((2, H, W), grads=False) if keep and blocks > 1 else None   # dL/du ping-pong
        schedule = {"n_steps": n, "blocks": blocks, "held_slots": slots, **_array_vars("u_first", u),
                    **_array_vars("u_held", held), **_array_vars("u_last", u_end)}
        forward_kernel = self._block_kernel("forward")
        fwd_threads = self._forward_tiling.groups * FORWARD_THREADS

        def forward(enc: spy.CommandEncoder) -> None:
            forward_kernel.set_members("call", **schedule, **_coefficient_vars(kappa, "kappa"),
                                       **_coefficient_vars(source, "source"))
            for b in range(blocks):   # one member written per dispatch
                forward_kernel.set_members("call", block=b).dispatch(fwd_threads, enc)

        if not keep:
            tp.record("Diffusion2D.steps", forward, None, writes=[u_end])
            return out
        backward_kernel = self._block_kernel("backward")
        bwd_threads = self._backward_tiling.groups * BACKWARD_THREADS

        def backward(enc: spy.CommandEncoder, redirect: dict[int, spy.Tensor]) -> None:
            write_du = u.grad_out is not None and tape.requires_grad(u)
            backward_kernel.set_members("call", **schedule, **_coefficient_vars(kappa, "kappa"),
                                        **_coefficient_vars(source, "source"), **_coefficient_grad_vars(kappa, "kappa"),
                                        **_coefficient_grad_vars(source, "source"), **_array_vars("g_last", u_end.grad),
                                        **_array_vars("g_held", g_held),
                                        **_array_vars("g_first", u.grad if write_du else None),
                                        g_first_mode=int(write_du))
            for b in reversed(range(blocks)):
                backward_kernel.set_members("call", block=b).dispatch(bwd_threads, enc)

        tp.record("Diffusion2D.steps", forward, backward, reads=[u], writes=[u_end], add_grads=[u], params=params)
        return out

    @property
    def grid_steps(self) -> Diffusion2DGridSteps:
        """The grid-barrier runner :meth:`steps` uses where it fits (CUDA; its ``layout`` picks the variant)."""
        if self._grid_steps is None:
            self._grid_steps = Diffusion2DGridSteps(self)
        return self._grid_steps

    def _block_kernel(self, role: str) -> dev.BoundKernel:
        """The bound ``diffusion2d_steps_<role>`` kernel of this simulator: its argument ``call`` (HeatBlocks of
        slang_lib/sim/diffusion2d_steps.slang) with the grid, tiling and step constants set, every buffer a dummy
        and every offset and mode 0 until :meth:`steps` writes them (``set_members("call", ...)``)."""
        bound = self._blocks.get(role)
        if bound is None:
            g = self.grid
            tiling = self._forward_tiling if role == "forward" else self._backward_tiling
            call: dict[str, Any] = {name: dummy_buffer() for name in _BLOCK_BUFFERS}
            call.update({name: 0 for name in _BLOCK_INTS})
            call.update(grid_h=g.shape[0], grid_w=g.shape[1], dirichlet=int(g.boundary == "dirichlet"),
                        boundary_value=g.boundary_value, r=self.dt / g.dx ** 2, dt=self.dt, **tiling.args())
            bound = Kernel("sim/diffusion2d_steps", f"diffusion2d_steps_{role}").bind(call=call)
            self._blocks[role] = bound
        return bound

    def steps_parameters(self, u: spy.Tensor) -> tuple[list[Any], bool]:
        """For a :meth:`steps` call from ``u``: the Parameters among the coefficients, and whether its backward
        is needed (a tape whose gradient reaches the call: such a Parameter, or ``u`` needing one)."""
        params = [c.parameter for c in (self.conductivity, self.source) if c.parameter is not None]
        tape = tp.current_tape()
        return params, tape is not None and not tape.forward_only and (bool(params) or tape.requires_grad(u))

    def held_states(self, count: int, keep: bool) -> tuple[spy.Tensor | None, int]:
        """Fields for :meth:`steps`' ``count`` intermediate states and how many slots they have: none for none;
        all of them (from the tape's pool) when ``keep`` (the backward reads them); else two scratch fields
        reused by every call (a ping-pong)."""
        if count == 0:
            return None, 1
        if keep:
            return tp.new_tensor((count, *self.grid.shape), grads=False), count
        if self._pingpong is None:
            self._pingpong = spy.Tensor.zeros(dev.get_device(), (2, *self.grid.shape), "float")
        return self._pingpong, 2

    def __repr__(self) -> str:
        return f"Diffusion2D({self.grid!r}, conductivity={self.conductivity!r}, source={self.source!r}, dt={self.dt})"


# the members of HeatBlocks (slang_lib/sim/diffusion2d_steps.slang) that Diffusion2D.steps writes per call: the
# buffers, and the offsets, strides, modes and schedule (ints; the grid's and tiling's are set when bound)
_BLOCK_BUFFERS = ("u_first", "u_held", "u_last", "g_last", "g_held", "g_first", "kappa", "source", "kappa_grad",
                  "source_grad")
_BLOCK_INTS = ("u_first_off", "u_held_off", "held_slots", "u_last_off", "g_last_off", "g_held_off", "g_first_off",
               "g_first_mode", "kappa_off", "kappa_stride", "source_off", "source_stride", "kappa_grad_off",
               "kappa_grad_mode", "source_grad_off", "source_grad_mode", "n_steps", "blocks", "block")


def _array_vars(name: str, t: spy.Tensor | None) -> dict[str, Any]:
    """The steps kernels' binding of an array: buffer and offset (None: a dummy the kernel never touches)."""
    if t is None:
        return {name: dummy_buffer(), f"{name}_off": 0}
    return {name: t.storage, f"{name}_off": t.offset}


def _coefficient_vars(c: Coefficient, name: str) -> dict[str, Any]:
    """The steps kernels' bindings of a coefficient's values: buffer, offset, stride (0: shared)."""
    v = c.values
    return {name: v.storage, f"{name}_off": v.offset, f"{name}_stride": 0 if c.shared else 1}


def _coefficient_grad_vars(c: Coefficient, name: str) -> dict[str, Any]:
    """... and of its gradient: mode 0 (a constant: a dummy the kernel never touches), 1 field, 2 shared."""
    if not c.trainable:
        return {f"{name}_grad": dummy_buffer(), f"{name}_grad_off": 0, f"{name}_grad_mode": 0}
    g = c.grad
    return {f"{name}_grad": g.storage, f"{name}_grad_off": g.offset, f"{name}_grad_mode": 2 if c.shared else 1}
