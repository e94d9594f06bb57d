"""FusedSteps: n steps of any simulator whose physics implements ``IElementStep`` (slang_lib/sim/fused_steps.slang)
in one forward dispatch and one adjoint dispatch, with no driver of its own.

A simulator opts in with two things (examples/pendulum_chain):

- ``physics_source``: its Slang file, which imports ``sim.fused_steps``, defines a struct implementing
  ``IElementStep`` (one element's step and adjoint, its coefficients as fields) and declares the driver's two
  compute entry points for that struct, ``fused_steps_forward<T>`` and ``fused_steps_backward<T>``, each one line
  calling ``FusedStepsForward<ItsStep>.run<T>`` / ``FusedStepsBackward<ItsStep>.run<T>`` (the entry points must be
  in the simulator's file: SlangPy finds an entry point, and resolves a specialisation type, only in the module
  that defines it; plain generics, so Vulkan and CUDA compile them alike);
- ``physics_argument(gradients)``: that struct's fields by name (:func:`coefficient_argument` for a
  :class:`~sopt.sim.Coefficient`'s values, :func:`gradient_argument` for where its gradient goes). The same dict
  is the per-step SlangPy kernels' argument, so coefficients are bound one way for every launch.

:meth:`Simulator.steps` then runs through this class (and ``fuses_steps()`` is True): the simulator's two entry
points, specialised to T threads per group, are declared as :class:`sopt.runtime.kernel.Kernel` s and take one uniform
``call`` (physics, sizes, buffers). The state is P parts (the simulator's ``state_names``) of (N, D) arrays.

Each call records, on the tape, one forward (copy the start state into row 0 of the saved trajectory, the
dispatch, copy the last row out) and where a gradient reaches the call one backward (copy dL/d end state into the
scratch, the dispatch, add dL/d start state into the start state's gradients: one small dispatch per part). The
forward keeps all n + 1 states when the adjoint needs them (from the tape's pool), else a two-row ping-pong.

Layout (:func:`default_layout`): one group of T threads (T the smallest of 32 .. 256 covering the N elements, 256
past that, looping over the elements) on Vulkan and for up to GRID_MIN_ELEMENTS elements; on CUDA more elements
take G = ceil(N / 256) groups of 256 (at most one per multiprocessor) meeting at a grid barrier each step.
"""

from __future__ import annotations

import pathlib
from typing import TYPE_CHECKING, Any

import slangpy as spy

from sopt.runtime import device as dev
from sopt.autodiff import tape as tp
from sopt.runtime.kernel import Kernel, Source, dummy_buffer
from sopt.sim.coefficient import Coefficient
from sopt.sim.grid_barrier import BarrierCounter, max_groups
from sopt.sim.state import State

if TYPE_CHECKING:
    from sopt.sim.simulator import Simulator

THREAD_CHOICES = (32, 64, 128, 256)   # threads per group (powers of 2, for sim/group_reduce.slang's group_sum)
GRID_MIN_ELEMENTS = 1024              # more elements take several groups where a grid barrier works (CUDA)
SHARED_MAX = 4                        # fused_steps.slang's SHARED_MAX: shared coefficient gradients per physics
MAX_ELEMENTS = 2 ** 31 - 1            # int32 element offsets in the driver
ENTRY_POINTS = {"forward": "fused_steps_forward", "backward": "fused_steps_backward"}  # in the physics file


def coefficient_argument(c: Coefficient) -> dict[str, Any]:
    """A Coefficient's values as fused_steps.slang's ``Coefficient`` (buffer, element offset, stride 0 when shared);
    fetched per launch: a Parameter's view moves between an optimiser's sides."""
    values = c.values
    return {"values": values.storage, "offset": int(values.offset), "stride": int(not c.shared)}


def gradient_argument(c: Coefficient, wanted: bool = True) -> dict[str, Any]:
    """Where a Coefficient's gradient goes, as ``CoefficientGrad``: nowhere (a dummy) unless ``wanted`` and
    trainable."""
    if not (wanted and c.trainable):
        return {"values": dummy_buffer(), "offset": 0, "wanted": 0}
    g = c.grad
    return {"values": g.storage, "offset": int(g.offset), "wanted": 1}


def default_layout(n_elements: int, groups_allowed: int | None) -> tuple[int, int]:
    """(threads per group, groups) for ``n_elements`` elements; ``groups_allowed``: the grid barrier's limit (None:
    one group only)."""
    threads = next((t for t in THREAD_CHOICES if t >= n_elements), THREAD_CHOICES[-1])
    if groups_allowed is None or n_elements <= GRID_MIN_ELEMENTS:
        return threads, 1
    return threads, min(groups_allowed, -(-n_elements // threads))


class FusedSteps:
    """The fused n-step run of one simulator (see the module docstring). ``layout`` = (threads, groups) may be set
    to another (tests run a small system on several threads per element that way); threads from THREAD_CHOICES,
    groups from 1 to the grid barrier's limit."""

    def __init__(self, sim: "Simulator", source: "str | pathlib.Path | Source") -> None:
        shapes = [sim.state_shapes()[name] for name in sim.state_names]
        if any(len(s) != 2 or s != shapes[0] for s in shapes):
            raise ValueError(f"FusedSteps: {type(sim).__name__}'s state arrays must all have one shape (N, D), got "
                             + ", ".join(f"{n} {s}" for n, s in zip(sim.state_names, shapes)))
        self.sim = sim
        self.source = Source(source)
        self.parts = len(shapes)
        self.n_elements, self.width = shapes[0]
        self.layout = default_layout(self.n_elements, max_groups())
        self._counter = BarrierCounter()
        self._bound: dict[tuple[str, int], dev.BoundKernel] = {}
        self._ping_pong: spy.Tensor | None = None
        self._scratch: spy.Tensor | None = None

    def _check_layout(self) -> None:
        threads, groups = self.layout
        most = max_groups() or 1
        if threads not in THREAD_CHOICES or not 1 <= groups <= most:
            raise ValueError(f"FusedSteps layout {self.layout!r}: threads must be one of {THREAD_CHOICES} and groups "
                             f"1 to {most} here")

    def _dispatch(self, which: str, enc: spy.CommandEncoder, **call: Any) -> None:
        """Record the physics file's ``fused_steps_<which><T>`` on the current layout, its ``call`` struct's
        members from ``call`` (the barrier counter added)."""
        threads, groups = self.layout
        bound = self._bound.get((which, threads))
        if bound is None:
            kernel = Kernel(self.source, ENTRY_POINTS[which], threads)
            bound = self._bound[(which, threads)] = kernel.bind()
        self._counter.reset(enc, groups)
        bound.set(call={**call, "barrier": self._counter.buffer})
        bound.dispatch(threads * groups, enc)

    def max_steps_per_call(self) -> int:
        """Steps whose saved states (n + 1 rows of P N D floats) stay within int32 element offsets."""
        return max(1, MAX_ELEMENTS // (self.parts * self.n_elements * self.width) - 1)

    def run(self, state: State, n: int) -> State:
        """The state ``n`` >= 1 steps after ``state`` (checked by the caller); on a tape, recorded with its adjoint
        (split into several fused calls only past :meth:`max_steps_per_call`)."""
        self._check_layout()
        limit = self.max_steps_per_call()
        while n > 0:
            chunk = min(n, limit)
            state = self._run(state, chunk)
            n -= chunk
        return state

    def _args(self, n: int, rows: int, states_at: int, scratch_at: int = 0) -> dict[str, int]:
        return {"n_elements": self.n_elements, "parts": self.parts, "width": self.width, "n_steps": n, "rows": rows,
                "groups": self.layout[1], "states_at": states_at, "scratch_at": scratch_at}

    def _run(self, state: State, n: int) -> State:
        sim = self.sim
        names = sim.state_names
        start = [state[name] for name in names]
        out = sim.new_state()
        end = [out[name] for name in names]
        tape = tp.current_tape()
        want = [tape is not None and t.grad_out is not None and tape.requires_grad(t) for t in start]
        params = sim.parameters()
        backprop = tape is not None and not tape.forward_only and bool(params or any(want))
        row = self.parts * self.n_elements * self.width
        if backprop:
            saved, rows = tp.new_tensor((n + 1, self.parts, self.n_elements, self.width), grads=False), n + 1
        else:
            if self._ping_pong is None:
                self._ping_pong = spy.Tensor.zeros(dev.get_device(), (2, self.parts, self.n_elements, self.width),
                                                   "float")
            saved, rows = self._ping_pong, 2
        last = n if rows == n + 1 else n % 2

        def part_of(tensor: spy.Tensor, row_index: int, p: int) -> tuple[spy.Buffer, int]:
            return tensor.storage, 4 * (int(tensor.offset) + row_index * row + p * self.n_elements * self.width)

        def copy_parts(enc: spy.CommandEncoder, tensor: spy.Tensor, row_index: int, arrays: list[spy.Tensor],
                       into_rows: bool) -> None:
            size = 4 * self.n_elements * self.width
            for p, t in enumerate(arrays):
                buffer, at = part_of(tensor, row_index, p)
                if into_rows:
                    enc.copy_buffer(buffer, at, t.storage, 4 * int(t.offset), size)
                else:
                    enc.copy_buffer(t.storage, 4 * int(t.offset), buffer, at, size)

        def forward(enc: spy.CommandEncoder) -> None:
            copy_parts(enc, saved, 0, start, True)
            self._dispatch("forward", enc, physics=sim.physics_argument(False), states=saved.storage,
                           args=self._args(n, rows, int(saved.offset)))
            copy_parts(enc, saved, last, end, False)

        def backward(enc: spy.CommandEncoder, redirect: dict[int, spy.Tensor]) -> None:
            size = 2 * row + SHARED_MAX * self.layout[1]
            if self._scratch is None or self._scratch.shape[0] < size:
                self._scratch = spy.Tensor.zeros(dev.get_device(), (size,), "float")
            scratch = self._scratch
            copy_parts(enc, scratch, n % 2, [t.grad for t in end], True)
            self._dispatch("backward", enc, physics=sim.physics_argument(True), states=saved.storage,
                           scratch=scratch.storage, args=self._args(n, rows, int(saved.offset), int(scratch.offset)))
            for p, (t, wanted) in enumerate(zip(start, want)):
                if wanted:
                    tp.add_into(enc, self._part_view(scratch, p), t.grad)

        tp.record(f"{type(sim).__name__}.steps", forward, backward if backprop else None, reads=start, writes=end,
                  add_grads=[t for t, w in zip(start, want) if w], params=params)
        return out

    def _part_view(self, scratch: spy.Tensor, p: int) -> spy.Tensor:
        """Part p of the scratch's row 0 (dL/d start state) as an (N, D) tensor."""
        count = self.n_elements * self.width
        return scratch.view((self.n_elements, self.width), offset=int(scratch.offset) + p * count)
