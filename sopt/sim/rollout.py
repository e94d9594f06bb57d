"""rollout: T steps of a simulator on the tape, storing every state or recomputing them within a memory budget.

Backprop through time needs every intermediate state; storing all of them is what runs long rollouts out of
memory. ``rollout(..., budget=B)`` keeps at most B states at once instead and recomputes the rest during the
backward (rematerialisation; Griewank's checkpointing, here in nested segments):

- the forward runs the T steps once, keeping only the states at segment starts ("slots");
- the backward walks the segments in reverse: it re-runs a segment from its slot on a tape of its own (all of
  its states stored), seeds that tape with the gradient arriving at the segment's end, runs its backward, and
  carries the gradient of the segment's first state to the previous segment.

With k segments of length L, k + L + 4 <= B states are held (the 4: the initial state, the returned final state and
the two states the forward steps between); this needs B >= about 2 sqrt(T) + 4 and costs one extra
forward pass. A smaller budget nests the scheme (segments of segments), one more forward pass per level, so
memory stays within B for any T. Gradients equal the store-every-state run's up to float32 rounding (the same
kernels run on the same values).

Also: ``observe`` copies one state array at chosen steps into a trajectory (the thing a loss compares with
observations); ``window`` (truncated BPTT) stops gradients at every ``window``-th step; ``track_grad_norm``
records |dL/dstate_t| for every step (``result.grad_norms()``, and ``tape.metrics``: the largest, and the one
at the first step) so an exploding gradient shows in the Trainer's metrics.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np
import slangpy as spy

from sopt.autodiff import tape as tp
from sopt.runtime.kernel import Function, launch
from sopt.sim.simulator import Simulator
from sopt.sim.state import State
from sopt.utils.validation import check_bool, check_int

StepFn = Callable[[State, int], State]

_SUM_SQUARES = Function("sim/rollout", "sum_squares")   # a gradient's squared norm, per rollout step

# States a recomputing rollout holds besides its slots and one segment's recomputed states: the copy of the final
# state it returns, the two states its forward passes step between, and the copy of the initial state that
# starts the first segment (its backward's gradient must not land in the caller's array directly).
_EXTRA_STATES = 4


@dataclass
class Plan:
    """The recompute schedule of one rollout: the top level's ``segments`` ((start, end) step pairs), the most
    states held at once (``peak_states``: the initial state, slots, one segment's recomputed states, the returned
    final state and the forward's two stepping states; T + 1 when storing all),
    and ``forward_steps``: steps run in total, forward and recomputation (T when storing all, about 2T for one
    level of segments, one more T per nesting level)."""

    steps: int
    budget: int | None
    segments: list[tuple[int, int]]
    peak_states: int
    forward_steps: int


@functools.lru_cache(maxsize=None)
def _cost(n: int, room: int) -> tuple[float, int, int, int]:
    """(steps run, slots, leaf, k) to backpropagate through n steps from a held start state with ``room`` more
    states: all n stored when they fit (0 slots, a leaf segment of n states, k = 1); else the best split into k
    segments (k - 1 slots for their starts, placed by stepping n - L steps, each segment of length <= L done
    with room - (k - 1)); inf if none. ``slots`` and ``leaf`` are maxima over the whole schedule: the slot stack
    and the recompute tape each keep their largest size, so slots + leaf must fit in ``room``."""
    if n <= room:
        return float(n), 0, n, 1
    best: tuple[float, int, int, int] = (math.inf, 0, 0, 0)
    for k in range(2, min(n, room) + 1):
        length = -(-n // k)
        sub = room - (k - 1)
        if sub < 1:
            break
        work, slots, leaf, _ = _cost(length, sub)
        last_work, last_slots, last_leaf, _ = _cost(n - (k - 1) * length, sub)
        slots, leaf = max(slots, last_slots), max(leaf, last_leaf)
        if math.isinf(work) or math.isinf(last_work) or slots + leaf > sub:
            continue
        total = (n - length) + (k - 1) * work + last_work
        candidate = (total, k - 1 + slots, leaf, k)
        if (candidate[0], candidate[1] + candidate[2]) < (best[0], best[1] + best[2]):
            best = candidate
    return best


def _split(a: int, b: int, room: int) -> list[tuple[int, int]] | None:
    """The segments of steps [a, b) chosen by :func:`_cost`, or None when all b - a states fit in ``room``."""
    n = b - a
    k = _cost(n, room)[3]
    if k <= 1:
        return None
    length = -(-n // k)
    return [(a + i * length, min(b, a + (i + 1) * length)) for i in range(k)]


def plan(steps: int, budget: int | None) -> Plan:
    """The schedule :func:`rollout` uses for ``steps`` steps within ``budget`` states (None: store all)."""
    steps = check_int(steps, "rollout steps", low=1)
    if budget is None:
        return Plan(steps, None, [(0, steps)], steps + 1, steps)
    budget = check_int(budget, "rollout budget (states)", low=2)
    if steps + 1 <= budget:
        return Plan(steps, budget, [(0, steps)], steps + 1, steps)
    room = budget - 1 - _EXTRA_STATES   # the initial state and the extras are held throughout
    work, slots, leaf, k = _cost(steps, room) if room >= 1 else (math.inf, 0, 0, 0)
    if math.isinf(work):
        low = budget
        while low - 1 - _EXTRA_STATES < 1 or math.isinf(_cost(steps, low - 1 - _EXTRA_STATES)[0]):
            low += 1
        raise ValueError(f"rollout budget {budget} states is too small for {steps} steps; allow at least {low}")
    top = _split(0, steps, room)
    # the forward pass itself places the top level's slots: no extra stepping for them
    return Plan(steps, budget, top, 1 + _EXTRA_STATES + slots + leaf, steps + int(work) - (steps - (top[1][1] - top[1][0])))


@dataclass
class RolloutResult:
    """``state``: the state after the last step; ``trajectory``: the observed array at the observed steps,
    shape (len(at), *array shape), or None; ``plan``: the schedule used."""

    state: State
    trajectory: spy.Tensor | None
    plan: Plan
    _norms: spy.Tensor | None = None

    def grad_norms(self) -> np.ndarray:
        """|dL/dstate_t| for t = 1..T (all arrays of the state together), after the tape's submission."""
        if self._norms is None:
            raise ValueError("rollout(..., track_grad_norm=True) records gradient norms; this one did not")
        return np.sqrt(np.maximum(self._norms.to_numpy().astype(np.float64), 0.0))


def rollout(sim: Simulator | StepFn, state: State, steps: int, *, budget: int | None = None,
            budget_bytes: int | None = None, observe: str | None = None, at: Sequence[int] | None = None,
            window: int | None = None, track_grad_norm: bool = False,
            control: Callable[[State, int], Any] | None = None) -> RolloutResult:
    """Run ``steps`` steps from ``state`` on the recording tape (or eagerly without one).

    Args:
        sim: a :class:`Simulator` (``sim.step(state[, control])``) or any ``step(state, t) -> State``.
        state: the state at t = 0 (e.g. ``sim.initial_state()``); its gradient flows back into it.
        steps: T >= 1.
        budget / budget_bytes: at most this many states (or bytes of states with their gradients) held at once;
            None (both): store every state (T + 1). See the module docstring; ValueError when too small.
        observe, at: copy the state array ``observe`` (e.g. ``"x"``) after each step t in ``at`` (0 = the
            initial state) into ``result.trajectory``.
        window: truncated backprop through time: gradients do not flow from step ``k * window`` into the steps
            before it (each window's observations reach back to the window's first step only).
        track_grad_norm: record |dL/dstate_t| per step (``result.grad_norms()``; on the tape's metrics as
            ``state_grad_norm_max`` and ``state_grad_norm_first``).
        control: ``control(state, t)``, the per-step input given to ``sim.step(state, control)`` (e.g. an MLP
            reading the state: its calls are recorded, and recomputed, with the steps).
    """
    steps = check_int(steps, "rollout steps", low=1)
    track_grad_norm = check_bool(track_grad_norm, "rollout track_grad_norm")
    if not isinstance(state, State):
        raise ValueError(f"rollout: state must be a sopt.sim.State, got {type(state).__name__}")
    step_fn = _step_function(sim, control)
    if window is not None:
        window = check_int(window, "rollout window", low=1)
    if budget is not None and budget_bytes is not None:
        raise ValueError("rollout: give budget (states) or budget_bytes, not both")
    if budget_bytes is not None:
        budget_bytes = check_int(budget_bytes, "rollout budget_bytes", low=1)
        budget = budget_bytes // (2 * max(state.nbytes, 1))   # values and gradients
        if budget < 2:
            raise ValueError(f"rollout budget_bytes={budget_bytes} holds {budget} state(s) of {2 * state.nbytes} "
                             "bytes (values and gradients); at least 2 are needed")
    schedule = plan(steps, budget)
    observed: list[int] = []
    if observe is not None or at is not None:
        if observe is None or at is None:
            raise ValueError("rollout: observe (an array name) and at (steps) go together")
        if observe not in state.names():
            raise ValueError(f"rollout: observe={observe!r} is not an array of the state ({', '.join(state.names())})")
        observed = [check_int(t, "rollout at[]", low=0) for t in at]
        bad = [t for t in observed if t > steps]
        if bad:
            raise ValueError(f"rollout: at holds step {bad[0]} beyond steps={steps}")
        if len(set(observed)) != len(observed):
            raise ValueError("rollout: at holds a step twice")
    tape = tp.current_tape()
    run = _Rollout(tape, step_fn, state, steps, observe, observed, window, track_grad_norm, schedule)
    if isinstance(sim, Simulator) and control is None and sim.fuses_steps():
        run.steps_fn = lambda s, t, n: sim.steps(s, n)
    if tape is None:   # eager: nothing to differentiate, no memory to bound
        return run.run_eager()
    if len(schedule.segments) == 1:
        return run.run_stored()
    return run.run_remat()


def _step_function(sim: Any, control: Callable[[State, int], Any] | None) -> StepFn:
    if isinstance(sim, Simulator):
        if control is None:
            return lambda s, t: sim.step(s)
        return lambda s, t: sim.step(s, control(s, t))
    if callable(sim):
        if control is not None:
            raise ValueError("rollout: control is for a Simulator; a step function reads its own inputs")
        return sim
    raise ValueError(f"rollout: sim must be a sopt.sim.Simulator or a function step(state, t) -> State, got "
                     f"{type(sim).__name__}")


def _checked(new: Any, old: State, t: int) -> State:
    if not isinstance(new, State) or new.names() != old.names():
        raise ValueError(f"rollout: step {t} returned {new!r}, expected a State with arrays {old.names()}")
    return new


def _copy_state(enc: spy.CommandEncoder, dst: State, src: State) -> None:
    for d, s in zip(dst.arrays(), src.arrays()):
        tp.copy_into(enc, s, d)


def _like(state: State) -> State:
    """New arrays (with gradients) shaped like ``state``'s, from the recording tape's pool."""
    return State(**{n: tp.new_tensor(tuple(t.shape)) for n, t in state.items()})


def _row(t: spy.Tensor, k: int) -> spy.Tensor:
    """Row k of a (K, ...) array, as a view."""
    shape = tuple(t.shape)[1:]
    return t.view(shape, offset=int(t.offset) + k * int(np.prod(shape)))


def _nothing(encoder: spy.CommandEncoder) -> None:
    """The forward of a record whose work was recorded before (or that has none: a probe)."""


def _sum_squares(enc: spy.CommandEncoder, state: State, norms: spy.Tensor, index: int) -> None:
    """norms[index] += sum of squares of every array's gradient in ``state``."""
    for t in state.arrays():
        grad = tp.flat(t.grad)
        launch(_SUM_SQUARES, enc, i=spy.grid(tuple(grad.shape)), src=grad, dst=norms, index=index)


class _Rollout:
    """The state of one rollout call: where its observations and gradient norms go, and how it steps."""

    def __init__(self, tape: tp.Tape | None, step_fn: StepFn, state: State, steps: int, observe: str | None,
                 observed: list[int], window: int | None, track: bool, schedule: Plan) -> None:
        self.tape, self.step_fn, self.state0, self.steps = tape, step_fn, state, steps
        self.observe, self.observed, self.window, self.schedule = observe, observed, window, schedule
        self.traj = tp.new_tensor((len(observed),) + tuple(state[observe].shape)) if observed else None
        # steps_fn(state, t, n): n steps in one call (Simulator.steps: fused simulators run them in one forward
        # and one backward dispatch); None: one step_fn call per step
        self.steps_fn: Callable[[State, int, int], State] | None = None
        self.norms = None
        if track and tape is not None:
            self.norms = tp.new_tensor((steps,), grads=False)
            tp.clear(tape.encoder, self.norms)

            def read() -> dict[str, float]:
                v = np.sqrt(np.maximum(self.norms.to_numpy().astype(np.float64), 0.0))
                return {"state_grad_norm_max": float(v.max()), "state_grad_norm_first": float(v[0])}
            tape.metrics["rollout"] = read

    def cut_before(self, t: int) -> bool:
        """Whether truncated BPTT stops gradients between step t - 1 and step t (at state t)."""
        return self.window is not None and t > 0 and t % self.window == 0

    def result(self, state: State) -> RolloutResult:
        return RolloutResult(state, self.traj, self.schedule, self.norms)

    def stretch(self, t: int, end: int) -> int:
        """How many steps from state t (at most to ``end``) can run as one call: none of the states strictly
        between may be observed, cut by truncated BPTT or have its gradient norm probed."""
        if self.steps_fn is None or self.norms is not None:
            return 1
        n = 1
        while t + n < end and (t + n) not in self.observed and not self.cut_before(t + n):
            n += 1
        return n

    def run(self, state: State, t: int, n: int) -> State:
        """Steps t .. t + n - 1 from ``state`` (one Simulator.steps call when n > 1)."""
        if n == 1:
            return _checked(self.step_fn(state, t), state, t)
        return _checked(self.steps_fn(state, t, n), state, t)

    # -- eager: no tape -------------------------------------------------------------------------------------------
    def run_eager(self) -> RolloutResult:
        from sopt.runtime import device as dev
        state, t = self.state0, 0
        while True:
            if t in self.observed:
                enc = dev.create_command_encoder()
                tp.copy_into(enc, state[self.observe], _row(self.traj, self.observed.index(t)))
                dev.submit(enc)
            if t == self.steps:
                return self.result(state)
            n = self.stretch(t, self.steps)
            state = self.run(state, t, n)
            t += n

    # -- every state stored on the tape ---------------------------------------------------------------------------
    def run_stored(self) -> RolloutResult:
        tape, state, t = self.tape, self.state0, 0
        if 0 in self.observed:
            self._record_observation(tape, self.observed.index(0), state[self.observe])
        while t < self.steps:
            n = self.stretch(t, self.steps)
            if self.cut_before(t):
                state = self._detach(tape, state)
            state = self.run(state, t, n)
            t += n
            if self.norms is not None:
                self._norm_probe(tape, state, t - 1)
            if t in self.observed:
                self._record_observation(tape, self.observed.index(t), state[self.observe])
        return self.result(state)

    def _record_observation(self, tape: tp.Tape, k: int, src: spy.Tensor) -> None:
        traj = self.traj
        tape.record("rollout.observe", lambda enc: tp.copy_into(enc, src, _row(traj, k)),
                    lambda enc, redirect: tp.add_into(enc, _row(traj.grad, k), src.grad),
                    writes=[traj], add_grads=[src])

    def _norm_probe(self, tape: tp.Tape, state: State, index: int) -> None:
        tape.record("rollout.grad_norm", _nothing,
                    lambda enc, redirect: _sum_squares(enc, state, self.norms, index),
                    reads=state.arrays(), always=True)

    @staticmethod
    def _detach(tape: tp.Tape, state: State) -> State:
        """A copy of ``state`` no gradient flows back from (truncated BPTT's cut)."""
        out = _like(state)
        tape.record("rollout.window_cut", lambda enc: _copy_state(enc, out, state), None, writes=out.arrays())
        return out

    # -- recomputed segments --------------------------------------------------------------------------------------
    def _child(self, name: Any) -> tp.Tape:
        """A child tape of the outer one, kept across training steps (its arrays reused)."""
        return self.tape.child((self.key, name))

    def _slot(self, i: int) -> State:
        """Slot i of the slot stack: a state (with gradient: the carried dL/dstate) kept by the rollout."""
        while len(self.slots) <= i:
            with self._child("slots"):
                self.slots.append(_like(self.state0))
        return self.slots[i]

    def _advance(self, state: State, a: int, b: int, save: dict[int, State], outputs: bool) -> State:
        """Steps a..b-1 keeping no state: two child tapes take turns (step t reads the other's output), the
        state at each step in ``save`` is copied into its slot, and with ``outputs`` observed arrays go into the
        trajectory."""
        enc = self.tape.encoder
        t, turn = a, 0
        while True:
            if t in save:
                _copy_state(enc, save[t], state)
            if outputs and t in self.observed:
                tp.copy_into(enc, state[self.observe], _row(self.traj, self.observed.index(t)))
            if t == b:
                return state
            n = self.stretch(t, b)
            while any(s in save for s in range(t + 1, t + n)):   # a slot to fill inside: stop there
                n -= 1
            child = self._child(("advance", turn % 2))
            child.reset()
            child.forward_only = True
            with child:
                state = self.run(state, t, n)
            for node in child.nodes:
                self.params.update((id(p), p) for p, _ in node.params)
            t, turn = t + n, turn + 1

    def run_remat(self) -> RolloutResult:
        tape = self.tape
        self.key = ("rollout", len(tape.nodes))
        self.slots: list[State] = []
        self.params: dict[int, Any] = {}
        final = _like(self.state0)
        segments = self.schedule.segments
        save = {a: self._slot(i) for i, (a, _) in enumerate(segments)}
        last = self._advance(self.state0, 0, self.steps, save, outputs=True)
        _copy_state(tape.encoder, final, last)

        def backward(enc: spy.CommandEncoder, redirect: dict[int, spy.Tensor]) -> None:
            carry = self._reverse(segments, [self._slot(i) for i in range(len(segments))],
                                  self.schedule.budget - 1 - _EXTRA_STATES - (len(segments) - 1), [t.grad for t in final.arrays()],
                                  depth=0, top=len(segments))
            for g, t in zip(carry, self.state0.arrays()):
                if tape.requires_grad(t):
                    tp.add_into(enc, g, t.grad)

        writes = final.arrays() + ([self.traj] if self.traj is not None else [])
        tape.record("rollout", _nothing, backward, reads=self.state0.arrays(), writes=writes,
                    add_grads=self.state0.arrays(), params=list(self.params.values()))
        return self.result(final)

    def _reverse(self, segments: list[tuple[int, int]], starts: list[State], room: int,
                 carry: list[spy.Tensor] | None, depth: int, top: int) -> list[spy.Tensor]:
        """Backward through consecutive ``segments`` in reverse, ``starts[i]`` holding segment i's first state and
        ``room`` states left to each; ``carry``: dL/d(state after the last segment), None when cut. Returns
        dL/d(state at the first segment's start) (gradient arrays of starts[0]). ``top``: first free slot."""
        for i in reversed(range(len(segments))):
            a, b = segments[i]
            sub = _split(a, b, room)
            if sub is None:
                carry = self._segment(starts[i], a, b, carry, depth)
                continue
            sub_starts = [starts[i]] + [self._slot(top + j) for j in range(len(sub) - 1)]
            self._advance(starts[i], a, sub[-1][0], {s: st for (s, _), st in zip(sub[1:], sub_starts[1:])}, False)
            carry = self._reverse(sub, sub_starts, room - (len(sub) - 1), carry, depth + 1, top + len(sub) - 1)
        return carry

    def _segment(self, start: State, a: int, b: int, carry: list[spy.Tensor] | None, depth: int) -> list[spy.Tensor]:
        """Recompute steps a..b-1 from ``start`` on a child tape, seed its last state with ``carry`` (unless
        truncated BPTT cuts at b) and observed states with the trajectory's gradient, run its backward; returns
        dL/dstart."""
        inner = self._child("segment")   # one segment at a time, at any depth: one pool, sized by the longest
        inner.reset()
        states = [start]
        index = {a: 0}   # step -> position in states
        with inner:
            s, t = start, a
            while t < b:
                if t > a and self.cut_before(t):
                    s = self._detach(inner, s)
                n = self.stretch(t, b)
                s = self.run(s, t, n)
                t += n
                index[t] = len(states)
                states.append(s)
        seeds: list[tuple[spy.Tensor, Any]] = []
        if carry is not None and not (b < self.steps and self.cut_before(b)):
            seeds += list(zip(states[-1].arrays(), carry))
        for t in range(a + 1, b + 1):
            if t in self.observed:
                seeds.append((states[index[t]][self.observe], _row(self.traj.grad, self.observed.index(t))))
        enc = self.tape.encoder
        if seeds:
            inner.backward(grads=seeds)
        grads = [inner.grad(t) for t in start.arrays()]
        if a == 0 and 0 in self.observed:   # the initial state observed (later ones are seeded where they end a step)
            tp.add_into(enc, _row(self.traj.grad, self.observed.index(0)), grads[start.names().index(self.observe)])
        if self.norms is not None:
            for t in range(a + 1, b + 1):   # norms tracked: one state per step
                for arr in states[t - a].arrays():
                    inner.grad(arr)
                _sum_squares(enc, states[t - a], self.norms, t - 1)
        return grads
