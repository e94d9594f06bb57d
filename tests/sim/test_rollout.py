"""sopt.sim.rollout: recomputed (remat) gradients equal the store-every-state run's, memory stays within the
budget as T grows, truncated BPTT and gradient-norm tracking; on a user Slang simulator (a damped pendulum)."""

from __future__ import annotations

import gc
import pathlib

import numpy as np
import pytest

import sopt
from sopt.sim import SpringSystem, State, spring_system
from sopt.sim.rollout import plan, rollout
from sopt.autodiff.tape import peak_allocated_bytes, reset_peak_allocated_bytes

EXAMPLE = pathlib.Path(__file__).resolve().parents[2] / "examples" / "custom_simulator.slang"
DT = 0.02
N = 3


@pytest.fixture(scope="module")
def pendulum():
    return sopt.load_module(EXAMPLE)


def _setup(pendulum):
    damping = sopt.Parameter([0.3], name="damping")
    g_over_l = sopt.Parameter([9.81], name="g_over_l")
    theta0 = sopt.Parameter(np.array([0.5, 1.0, -0.7], np.float32), name="theta0")

    def step(s: State, t: int) -> State:
        return State(x=pendulum.pendulum_step(s.x, damping, g_over_l, DT))
    return step, (damping, g_over_l, theta0)


def _reference(theta0: np.ndarray, damping: float, g_over_l: float, steps: int, window: int | None = None):
    """float64 states after each step, and d(sum w_k . x_{t_k})/d(params) by central differences."""
    s = np.stack([theta0, np.zeros_like(theta0)], 1).astype(np.float64)
    out = [s]
    for _ in range(steps):
        om = s[:, 1] + DT * (-g_over_l * np.sin(s[:, 0]) - damping * s[:, 1])
        s = np.stack([s[:, 0] + DT * om, om], 1)
        out.append(s)
    return out


def _run(pendulum, steps, budget, at, w, window=None, track=False):
    step, params = _setup(pendulum)
    tape = sopt.Tape()
    with tape:
        s0 = State(x=pendulum.pendulum_start(params[2]))
        res = rollout(step, s0, steps, budget=budget, observe="x", at=at, window=window, track_grad_norm=track)
    tape.backward(grads={res.trajectory: w})
    tape.submit()
    grads = {p.name: p.grad_numpy() for p in params}
    return res, grads, tape


@pytest.mark.parametrize("steps,budget", [(24, 14), (24, 11), (60, 13)])   # one level, nested, nested deeper
def test_remat_gradients_equal_store_all(pendulum, steps, budget):
    at = [0, 5, steps // 2, steps - 1, steps]
    w = np.random.default_rng(steps).standard_normal((len(at), N, 2)).astype(np.float32)
    stored, g_stored, _ = _run(pendulum, steps, None, at, w, track=True)
    remat, g_remat, _ = _run(pendulum, steps, budget, at, w, track=True)
    assert len(remat.plan.segments) > 1 and remat.plan.peak_states <= budget
    np.testing.assert_array_equal(remat.trajectory.to_numpy(), stored.trajectory.to_numpy())
    for name in g_stored:
        np.testing.assert_allclose(g_remat[name], g_stored[name], rtol=1e-6, atol=1e-6 * np.abs(g_stored[name]).max())
    np.testing.assert_allclose(remat.grad_norms(), stored.grad_norms(), rtol=1e-5)
    # and both are the true gradient: central differences of the float64 reference
    theta0 = np.array([0.5, 1.0, -0.7])

    def objective(d: float, g: float) -> float:
        states = _reference(theta0, d, g, steps)
        return float(sum(np.sum(w[k] * states[t]) for k, t in enumerate(at)))
    e = 1e-5
    fd = (objective(0.3 + e, 9.81) - objective(0.3 - e, 9.81)) / (2 * e)
    assert abs(g_remat["damping"][0] - fd) <= 1e-3 * abs(fd)


def test_plan_recomputes_about_one_forward_and_bounds_states():
    for steps in (100, 1000):
        p = plan(steps, 68)
        assert p.peak_states <= 68 and p.forward_steps == 2 * steps
    p = plan(1000, 24)   # too small for one level: nested, more recomputation, still within the budget
    assert p.peak_states <= 24 and 2 * 1000 < p.forward_steps <= 5 * 1000
    with pytest.raises(ValueError, match="budget 3 states is too small for 1000 steps; allow at least"):
        plan(1000, 3)


def test_peak_memory_within_budget_as_steps_grow(pendulum):
    """Device memory held by the rollout (pooled arrays sopt counts) does not grow with T at a fixed budget."""
    peaks = {}
    for steps in (30, 300):
        step, params = _setup(pendulum)
        tape = sopt.Tape()
        gc.collect()   # earlier tests' unreachable tapes still count until collected (mid-run, they would hide growth)
        reset_peak_allocated_bytes()
        before = peak_allocated_bytes()
        with tape:
            s0 = State(x=pendulum.pendulum_start(params[2]))
            res = rollout(step, s0, steps, budget=16)
        tape.backward(grads={res.state.x: np.ones((N, 2), np.float32)})
        tape.submit()
        peaks[steps] = peak_allocated_bytes() - before
        assert params[0].grad_numpy()[0] != 0.0
        tape.release()
    state_bytes = 2 * 4 * N * 2   # values + gradients of one state
    assert peaks[300] <= peaks[30] + 4 * state_bytes      # bounded: not 10x
    assert peaks[300] <= 16 * state_bytes                  # the budget: 16 states


def test_truncated_bptt_window(pendulum):
    steps, window = 20, 5
    at = [steps]
    w = np.ones((1, N, 2), np.float32)
    _, g_full, _ = _run(pendulum, steps, None, at, w)
    _, g_cut, _ = _run(pendulum, steps, None, at, w, window=window)
    _, g_cut_remat, _ = _run(pendulum, steps, 11, at, w, window=window)
    assert g_cut["theta0"].tolist() == [0.0, 0.0, 0.0]          # 20 steps back: beyond the window
    assert not np.allclose(g_cut["damping"], g_full["damping"])
    np.testing.assert_allclose(g_cut_remat["damping"], g_cut["damping"], rtol=1e-6)
    np.testing.assert_allclose(g_cut_remat["theta0"], 0.0)


def test_grad_norms_on_the_tape_metrics(pendulum):
    steps = 10
    res, _, tape = _run(pendulum, steps, None, [steps], np.ones((1, N, 2), np.float32), track=True)
    norms = res.grad_norms()
    assert norms.shape == (steps,) and abs(norms[-1] - np.sqrt(N * 2)) < 1e-5   # dL/dx_T = 1 everywhere
    metrics = tape.metrics["rollout"]()
    assert metrics["state_grad_norm_max"] == pytest.approx(norms.max())


def test_bad_arguments(pendulum):
    step, params = _setup(pendulum)
    s0 = State(x=sopt.autodiff.tape.new_tensor((N, 2)))
    with pytest.raises(ValueError, match="observe='v' is not an array of the state"):
        rollout(step, s0, 5, observe="v", at=[1])
    with pytest.raises(ValueError, match="at holds step 6 beyond steps=5"):
        rollout(step, s0, 5, observe="x", at=[6])
    with pytest.raises(ValueError, match="rollout steps must be >= 1"):
        rollout(step, s0, 0)
    with pytest.raises(ValueError, match="not both"):
        rollout(step, s0, 5, budget=4, budget_bytes=1000)


def test_budget_in_bytes_counts_values_and_gradients(pendulum):
    step, params = _setup(pendulum)
    state_bytes = 4 * N * 2
    tape = sopt.Tape()
    with tape:
        s0 = State(x=pendulum.pendulum_start(params[2]))
        res = rollout(step, s0, 60, budget_bytes=16 * 2 * state_bytes + 5)
    assert res.plan.budget == 16 and res.plan.peak_states <= 16 and len(res.plan.segments) > 1
    with pytest.raises(ValueError, match="holds 1 state"):
        with tape:
            rollout(step, s0, 60, budget_bytes=1 * 2 * state_bytes)


@pytest.mark.parametrize("budget", [None, 12, 18])
def test_fused_stretches_equal_single_steps(budget):
    """A Simulator rollout runs the stretches between observations as one Simulator.steps call (Projectile's
    fused kernel); states, trajectory and gradients equal the one-call-per-step rollout's."""
    from sopt.runtime.device import dispatch_count
    from sopt.sim import Projectile
    rng = np.random.default_rng(3)
    x0 = np.c_[rng.uniform(-1, 1, 5), rng.uniform(0.2, 1.0, 5)].astype(np.float32)
    v0 = np.c_[rng.uniform(-2, 2, 5), rng.uniform(1, 4, 5)].astype(np.float32)
    at, steps = [0, 7, 20, 33], 40
    w = rng.normal(size=(len(at), 5, 2)).astype(np.float32)
    results = []
    for fused in (True, False):
        drag = sopt.Parameter(np.full(5, 0.2, np.float32), name="drag")
        rest = sopt.Parameter(np.full(5, 0.7, np.float32), name="restitution")
        sim = Projectile(x0, v0, dt=0.02, drag=drag, restitution=rest)
        step = sim if fused else (lambda s, t: sim.step(s))   # a step function runs one call per step
        tape = sopt.Tape()
        before = dispatch_count()
        with tape:
            res = rollout(step, sim.initial_state(), steps, budget=budget, observe="x", at=at)
        tape.backward(grads={res.trajectory: w})
        tape.submit()
        results.append((res.trajectory.to_numpy(), drag.grad_numpy(), rest.grad_numpy(), dispatch_count() - before))
    (traj_f, gd_f, gr_f, n_f), (traj_s, gd_s, gr_s, n_s) = results
    np.testing.assert_allclose(traj_f, traj_s, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(gd_f, gd_s, rtol=1e-5)
    np.testing.assert_allclose(gr_f, gr_s, rtol=1e-5)
    assert np.abs(gr_f).max() > 0   # a bounce happened within the 40 steps
    assert n_f < n_s / 3


def test_peak_memory_within_budget_per_step_simulator(monkeypatch):
    """A Simulator whose steps are n calls of step (a SpringSystem past the fused kernel's size, here made so by
    lowering the cap): the remat forward passes step one state at a time, so the budget still holds, and the
    gradient equals the store-every-state run's."""
    monkeypatch.setattr(spring_system, "FUSED_MAX_PARTICLES", 0)
    k = sopt.Parameter(np.full(1, 40.0, np.float32), name="k")
    sim = SpringSystem.cloth(3, 3, 0.1, dim=3, stiffness=k, dt=1e-3)
    assert not sim.fuses_steps()
    state_bytes = 2 * 2 * 4 * sim.n_particles * 3   # x and v, values + gradients
    grads = {}
    for budget in (None, 16):
        tape = sopt.Tape()
        gc.collect()
        reset_peak_allocated_bytes()
        before = peak_allocated_bytes()
        with tape:
            res = rollout(sim, sim.initial_state(), 120, budget=budget)
        tape.backward(grads={res.state.x: np.ones((sim.n_particles, 3), np.float32)})
        tape.submit()
        peak = peak_allocated_bytes() - before
        grads[budget] = k.grad_numpy().copy()
        k.zero_grad()
        tape.release()
        if budget is not None:
            assert len(res.plan.segments) > 1
            assert peak <= budget * state_bytes, (peak / state_bytes, budget)
    np.testing.assert_allclose(grads[16], grads[None], rtol=1e-6)
