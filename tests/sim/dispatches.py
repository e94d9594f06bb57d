"""Dispatches a simulator records per step on a tape, forward and backward (the simulators' tests share it)."""

from __future__ import annotations

import numpy as np

import sopt
from sopt.runtime import device as dev
from sopt.sim import Simulator, State


def dispatches_per_step(sim: Simulator, seed: str, steps: int = 7, control=None) -> tuple[float, float, State]:
    """(forward, backward) dispatches of ``steps`` recorded steps, each divided by ``steps``, and the last state.

    The initial state is recorded before counting starts; the gradient is seeded on the last state's array
    ``seed`` (a buffer upload, no dispatch); the tape is submitted so gradients can be read afterwards."""
    tape = sopt.Tape()
    with tape:
        s = sim.initial_state()
        before = dev.dispatch_count()
        for _ in range(steps):
            s = sim.step(s) if control is None else sim.step(s, control)
        forward = dev.dispatch_count() - before
    before = dev.dispatch_count()
    tape.backward(grads={s[seed]: np.ones(tuple(s[seed].shape), np.float32)})
    backward = dev.dispatch_count() - before
    tape.submit()
    return forward / steps, backward / steps, s
