"""examples/pendulum_chain: a simulator added in two files and one registration gets step and fused steps (sopt's
generic driver) that match a NumPy reference and each other, gradients that match central differences, the
small-angle period of a single pendulum, and a budgeted rollout with the store-all gradients."""

from __future__ import annotations

import importlib.util
import math
import pathlib

import numpy as np
import pytest

import sopt
from sopt.config.registry import build
from sopt.sim import rollout
from sopt.sim.grid_barrier import max_groups

PATH = pathlib.Path(__file__).resolve().parents[2] / "examples" / "pendulum_chain" / "pendulum_chain.py"
_spec = importlib.util.spec_from_file_location("pendulum_chain", PATH)
chain_module = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(chain_module)
PendulumChain = chain_module.PendulumChain


def _chain(**kw) -> tuple[PendulumChain, list[sopt.Parameter]]:
    k = sopt.Parameter([2000.0], name="stiffness")
    c = sopt.Parameter([0.5], name="damping")
    g = sopt.Parameter([9.81], name="gravity")
    return PendulumChain(3, angle=0.4, dt=2e-3, stiffness=k, damping=c, gravity=g, **kw), [k, c, g]


def _grads(sim: PendulumChain, params: list[sopt.Parameter], steps: int, budget: int | None) -> np.ndarray:
    with sopt.Tape() as tape:
        final = rollout(sim, sim.initial_state(), steps, budget=budget).state
        loss = sopt.losses.MSELoss()(final.x, np.zeros((3, 2), np.float32))
    tape.backward(loss)
    tape.submit()
    out = np.array([p.grad_numpy()[0] for p in params], np.float64)
    for p in params:
        p.set_grad(np.zeros(1))
    return out


def test_gradients_match_central_differences() -> None:
    sim, params = _chain()
    target = np.random.default_rng(0).normal(0.0, 0.1, (3, 2)).astype(np.float32)

    def objective(tape, step):
        final = rollout(sim, sim.initial_state(), 40).state
        return sopt.losses.MSELoss()(final.x, target)

    result = sopt.gradcheck(objective, params, eps=1e-2, rtol=2e-2, atol=1e-5)
    assert result.ok, str(result)


def test_budgeted_rollout_matches_store_all() -> None:
    sim, params = _chain()
    full = _grads(sim, params, 60, None)
    budgeted = _grads(sim, params, 60, 14)
    assert np.all(np.abs(full) > 0)
    np.testing.assert_allclose(budgeted, full, rtol=1e-5)


def test_small_angle_period_of_one_link() -> None:
    length, g, dt, steps = 0.1, 9.81, 1e-3, 900   # 1.4 periods
    sim = PendulumChain(1, angle=0.05, dt=dt, length=length, stiffness=1e5, gravity=g)
    with sopt.Tape() as tape:
        traj = rollout(sim, sim.initial_state(), steps, observe="x", at=range(1, steps + 1)).trajectory
    tape.submit()
    x = traj.to_numpy().reshape(steps, 1, 2)[:, 0, 0].astype(np.float64)
    crossings = [t + x[t] / (x[t] - x[t + 1]) for t in range(steps - 1) if x[t] > 0 >= x[t + 1] or x[t] < 0 <= x[t + 1]]
    period = (crossings[2] - crossings[0]) * dt     # two half swings
    stretched = length + 1.0 * g / 1e5          # the spring's static stretch under the bob's weight
    assert period == pytest.approx(2.0 * math.pi * math.sqrt(stretched / g), rel=5e-3)


def test_registered_by_name() -> None:
    sim = build("simulator", {"otype": "PendulumChain", "dt": 1e-3, "gravity": 3.0}, 2)
    assert isinstance(sim, PendulumChain) and sim.to_config().gravity == 3.0


def test_unstable_dt_is_refused() -> None:
    with pytest.raises(ValueError, match=r"PendulumChain dt=0\.05 s is unstable .* use dt < 0\.01 s"):
        PendulumChain(2, dt=0.05, stiffness=1e4)


def _reference(links: int, angle: float, dt: float, length: float, k: float, c: float, mass: float, g: float,
               steps: int) -> tuple[np.ndarray, np.ndarray]:
    """(x, v) of the chain after ``steps`` semi-implicit Euler steps from rest, in float64 NumPy (pendulum_chain.slang's
    equations written independently): spring i joins mass i to mass i - 1 (the pivot at 0 for i = 0)."""
    x = np.arange(1, links + 1)[:, None] * length * np.array([[np.sin(angle), -np.cos(angle)]])
    v = np.zeros((links, 2))
    for _ in range(steps):
        force = np.zeros((links, 2))
        for i in range(links):
            xp, vp = (x[i - 1], v[i - 1]) if i > 0 else (np.zeros(2), np.zeros(2))
            dx, dv = xp - x[i], vp - v[i]
            l = np.linalg.norm(dx)
            d = dx / l
            f = (k * (l - length) + c * dv @ d) * d
            force[i] += f
            if i > 0:
                force[i - 1] -= f
        v = v + dt * (force / mass + np.array([0.0, -g]))
        x = x + dt * v
    return x, v


def test_steps_match_a_numpy_reference() -> None:
    """steps (the generic driver, no tape: its two-row ping-pong) and step (one driver step per call) against the
    float64 reference."""
    sim = PendulumChain(5, angle=0.4, dt=2e-3, stiffness=2000.0, damping=0.5, gravity=9.81)
    x_ref, v_ref = _reference(5, 0.4, 2e-3, 0.1, 2000.0, 0.5, 1.0, 9.81, 30)
    assert np.abs(v_ref).max() > 0.1   # it moved
    fused = sim.steps(sim.initial_state(), 30)
    single = sim.initial_state()
    for _ in range(30):
        single = sim.step(single)
    for state in (fused, single):
        np.testing.assert_allclose(state.x.to_numpy(), x_ref, rtol=0, atol=2e-6)
        np.testing.assert_allclose(state.v.to_numpy(), v_ref, rtol=0, atol=2e-5)


def _run(sim: PendulumChain, params: list[sopt.Parameter], chunks: list[int] | None, steps: int,
         target: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(x, v, dL/d(k, c, g)) after ``steps`` calls of step (chunks None) or calls of steps(n) for n in ``chunks``."""
    with sopt.Tape() as tape:
        state = sim.initial_state()
        if chunks is None:
            for _ in range(steps):
                state = sim.step(state)
        else:
            for n in chunks:
                state = sim.steps(state, n)
        loss = sopt.losses.MSELoss()(state.x, target)
    tape.backward(loss)
    tape.submit()
    grads = np.array([p.grad_numpy()[0] for p in params], np.float64)
    for p in params:
        p.set_grad(np.zeros(1))
    return state.x.to_numpy().copy(), state.v.to_numpy().copy(), grads


@pytest.mark.parametrize("links,layout", [(5, None), (40, (32, 1)), (40, (32, 2))])
def test_fused_steps_match_single_steps(links: int, layout: tuple[int, int] | None) -> None:
    """sim.steps(n) (one forward, one adjoint dispatch of the generic driver, sim/fused_steps.slang, with
    ChainStep) gives the same states and gradients as n calls of sim.step (one driver step each, dL/d state
    crossing n tape records), through two fused calls; with 40 links on 32 threads a thread steps two elements,
    and on 2 groups (CUDA only) the groups meet at the grid barrier and sum the shared gradients across groups."""
    if layout is not None and layout[1] > (max_groups() or 1):
        pytest.skip("several groups need a grid barrier (CUDA)")
    k, c, g = sopt.Parameter([2000.0], name="k"), sopt.Parameter([0.5], name="c"), sopt.Parameter([9.81], name="g")
    sim = PendulumChain(links, angle=0.4, dt=2e-3, stiffness=k, damping=c, gravity=g)
    assert sim.fuses_steps()
    if layout is not None:
        sim.fused_steps.layout = layout
    target = np.random.default_rng(1).normal(0.0, 0.1, (links, 2)).astype(np.float32)
    x1, v1, g1 = _run(sim, [k, c, g], None, 30, target)
    before = sopt.runtime.device.dispatch_count()
    x2, v2, g2 = _run(sim, [k, c, g], [12, 18], 30, target)
    # initial state, 2 x (forward + backward + 2 state-gradient adds), the loss and its backward
    assert sopt.runtime.device.dispatch_count() - before <= 14
    np.testing.assert_allclose(x2, x1, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(v2, v1, rtol=1e-6, atol=1e-6)
    assert np.all(np.abs(g1) > 0)
    np.testing.assert_allclose(g2, g1, rtol=1e-5)


def test_single_steps_gradcheck() -> None:
    """Gradients through 40 calls of step (the rollout gradcheck above goes through one fused call)."""
    sim, params = _chain()
    target = np.random.default_rng(2).normal(0.0, 0.1, (3, 2)).astype(np.float32)

    def objective(tape, step):
        state = sim.initial_state()
        for _ in range(40):
            state = sim.step(state)
        return sopt.losses.MSELoss()(state.x, target)

    result = sopt.gradcheck(objective, params, eps=1e-2, rtol=2e-2, atol=1e-5)
    assert result.ok, str(result)


def test_fused_layout_is_checked() -> None:
    sim, _ = _chain()
    sim.fused_steps.layout = (48, 1)
    with pytest.raises(ValueError, match=r"FusedSteps layout \(48, 1\): threads must be one of"):
        sim.steps(sim.initial_state(), 3)
