"""Diffusion2DGridSteps: n steps of a :class:`~sopt.sim.Diffusion2D` in one forward dispatch and one adjoint
dispatch on CUDA (kernels in slang_lib/sim/diffusion2d_grid_steps.slang); ``Diffusion2D.steps`` runs through
it where :meth:`Diffusion2DGridSteps.fits`, else through temporal blocking (sim/diffusion2d_steps.slang).

The dispatch's G groups of T = 512 threads loop over the steps and meet at a grid barrier
(:mod:`sopt.sim.grid_barrier`) once per step; each thread keeps CELLS cells (the smallest of 1, 2, 4, 8 that
covers the grid with at most one group per multiprocessor) with their face conductivities and their value or
dL/du in registers. So it fits grids of up to 8 T (multiprocessors) cells (540672 with 132 multiprocessors) and
takes them from GRID_MIN_CELLS cells up, where it beats temporal blocking. Tiles copied with their halo into
groupshared memory (fewer L2 reads) were slower.

Memory: on a tape whose gradient reaches the call, the forward keeps every intermediate state (n - 1 fields
of H x W floats from the tape's pool; 2 GB for 2000 steps of 512 x 512) and the adjoint reads them back: one
pass each way, where temporal blocking keeps every K-th state and recomputes. A rollout's memory budget holds
either way (its plan counts a step's state with its gradient: twice a kept field).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import slangpy as spy

from sopt.autodiff import tape as tp
from sopt.runtime.kernel import Kernel, dummy_buffer
from sopt.sim.grid_barrier import SteppingDispatch, max_groups
from sopt.sim.state import State

if TYPE_CHECKING:
    from sopt.sim.diffusion2d import Diffusion2D

_MODULE = "sim/diffusion2d_grid_steps"
THREADS = 512                 # threads per group (a power of 2, for sim/group_reduce.slang's group_sum)
CELL_CHOICES = (1, 2, 4, 8)   # cells per thread (registers: ~12 each)
GRID_MIN_CELLS = 4096         # smaller grids take temporal blocking


# the generic entry points of diffusion2d_grid_steps.slang: <threads, cells>
_KERNELS = {which: Kernel(_MODULE, f"diffusion2d_grid_{which}_kernel") for which in ("forward", "backward")}


@functools.lru_cache(maxsize=None)   # one declaration per variant: a dispatch looks it up
def _kernel(which: str, cells: int) -> Kernel:
    """The compute kernel ``diffusion2d_grid_<which>_kernel<THREADS, cells>`` (``which``: forward or backward)."""
    return _KERNELS[which].specialise(THREADS, cells)


def layout(n_cells: int, groups_allowed: int | None) -> tuple[int, int] | None:
    """(groups, cells per thread) for a grid of ``n_cells``, or None where the grid kernels don't fit or pay
    (fewer than GRID_MIN_CELLS cells, no grid barrier, more than 8 cells per thread)."""
    if groups_allowed is None or n_cells < GRID_MIN_CELLS:
        return None
    for cells in CELL_CHOICES:
        if groups_allowed * THREADS * cells >= n_cells:
            return -(-n_cells // (THREADS * cells)), cells
    return None


class Diffusion2DGridSteps:
    """The grid-barrier multi-step run of one Diffusion2D (see the module docstring)."""

    def __init__(self, sim: "Diffusion2D") -> None:
        self.sim = sim
        H, W = sim.grid.shape
        self.layout = layout(H * W, max_groups())
        self._kernels = SteppingDispatch("heat_args", _ARG_FIELDS, "heat_barrier", param="call", buffers=_BUFFERS)

    def fits(self) -> bool:
        """Whether :meth:`run` applies here: by default on CUDA, for a grid of GRID_MIN_CELLS to 8 T
        (multiprocessors) cells. ``layout`` = (groups, cells per thread) may be set to another that covers the
        grid (tests run one group on any device that way)."""
        return self.layout is not None

    def _check_layout(self) -> None:
        assert self.layout is not None
        groups, cells = self.layout
        most = max_groups() or 1
        H, W = self.sim.grid.shape
        if cells not in CELL_CHOICES or not 1 <= groups <= most or groups * THREADS * cells < H * W:
            raise ValueError(f"Diffusion2DGridSteps layout {self.layout!r}: needs cells per thread in {CELL_CHOICES}, "
                             f"1 to {most} groups, and groups x {THREADS} x cells >= the grid's {H * W} cells")

    def _dispatch(self, which: str, enc: spy.CommandEncoder, args: dict[str, Any], buffers: dict[str, Any]) -> None:
        assert self.layout is not None
        groups, cells = self.layout
        self._kernels.dispatch(_kernel(which, cells), enc, THREADS, groups, args, buffers)

    def run(self, state: State, n: int) -> State:
        """The state ``n`` >= 1 steps after ``state`` (checked by the caller), recorded on the current tape with
        its adjoint where the gradient reaches the call."""
        self._check_layout()
        sim = self.sim
        H, W = sim.grid.shape
        out = sim.new_state()
        u, u_end = state.u, out.u
        kappa, source = sim.conductivity, sim.source
        params, keep = sim.steps_parameters(u)
        tape = tp.current_tape()
        held, slots = sim.held_states(n - 1, keep)
        g = sim.grid
        base = {"H": H, "W": W, "dirichlet": int(g.boundary == "dirichlet"), "boundary_value": g.boundary_value,
                "r": sim.dt / g.dx ** 2, "dt": sim.dt, "n_steps": n, "held_slots": slots}
        arrays = {"heat_u_first": u.storage, "heat_u_last": u_end.storage,
                  "heat_u_held": dummy_buffer() if held is None else held.storage}

        def coefficients() -> tuple[dict[str, Any], dict[str, Any]]:
            """Offsets and buffers of the coefficient values (fetched when recorded: a Parameter's view moves)."""
            k, s = kappa.values, source.values
            return ({"kappa": int(k.offset), "kappa_stride": int(not kappa.shared), "source": int(s.offset),
                     "source_stride": int(not source.shared)},
                    {"heat_kappa": k.storage, "heat_source": s.storage})

        def offsets() -> dict[str, int]:
            return {"u_first": int(u.offset), "u_last": int(u_end.offset),
                    "u_held": 0 if held is None else int(held.offset)}

        def forward(enc: spy.CommandEncoder) -> None:
            values, buffers = coefficients()   # the adjoint's buffers: a dummy buffer (SteppingDispatch)
            self._dispatch("forward", enc, {**base, **offsets(), **values}, {**arrays, **buffers})

        if not keep:
            tp.record("Diffusion2D.steps", forward, None, writes=[u_end])
            return out
        assert self.layout is not None
        scratch = tp.new_tensor((2 * H * W + 2 * self.layout[0],), grads=False)

        def backward(enc: spy.CommandEncoder, redirect: dict[int, spy.Tensor]) -> None:
            write_du = u.grad_out is not None and tape.requires_grad(u)
            values, buffers = coefficients()
            args = {**base, **offsets(), **values, "g_last": int(u_end.grad.offset), "scratch": int(scratch.offset),
                    "g_first": int(u.grad.offset) if write_du else 0, "want_g_first": int(write_du)}
            grads: dict[str, Any] = {}
            for name, c in (("kappa", kappa), ("source", source)):
                if c.trainable:
                    args[f"{name}_grad"], args[f"{name}_grad_mode"] = int(c.grad.offset), 2 if c.shared else 1
                    grads[f"heat_{name}_grad"] = c.grad.storage
                else:
                    grads[f"heat_{name}_grad"] = dummy_buffer()
            self._dispatch("backward", enc, args, {
                **arrays, **buffers, **grads, "heat_g_last": u_end.grad.storage, "heat_scratch": scratch.storage,
                "heat_g_first": u.grad.storage if write_du else dummy_buffer()})

        tp.record("Diffusion2D.steps", forward, backward, reads=[u], writes=[u_end], add_grads=[u], params=params)
        return out


# the HeatStepsArgs struct of diffusion2d_grid_steps.slang (the member heat_args of the kernels' argument, HeatSteps call)
_ARG_FIELDS = ("H", "W", "dirichlet", "boundary_value", "r", "dt", "n_steps", "held_slots", "groups", "u_first",
               "u_held", "u_last", "kappa", "kappa_stride", "source", "source_stride", "g_last", "scratch",
               "g_first", "want_g_first", "kappa_grad", "kappa_grad_mode", "source_grad", "source_grad_mode")

# the buffer members of HeatSteps (diffusion2d_grid_steps.slang)
_BUFFERS = ("heat_u_first", "heat_u_held", "heat_u_last", "heat_kappa", "heat_source", "heat_g_last", "heat_scratch",
            "heat_g_first", "heat_kappa_grad", "heat_source_grad", "heat_barrier")
