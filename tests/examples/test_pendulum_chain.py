"""examples/pendulum_chain: a simulator added in two files and one registration gets gradients that match central
differences, the small-angle period of a single pendulum, and a budgeted rollout with the store-all gradients."""

from __future__ import annotations

import importlib.util
import math
import pathlib

import numpy as np
import pytest

import sopt
from sopt.config.registry import build
from sopt.sim import rollout

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
