"""neural_controller: the controller's features and the posture loss with their adjoints against numpy, the walk
(features, MLP, sticky-ground steps) and its loss (distance and posture) against a float64 numpy reference, its tape
gradient in the MLP's weights against central differences of that reference, training that walks farther and
upright, resume == uninterrupted, the outputs, and one-line config errors."""

from __future__ import annotations

import json
import pathlib
from typing import Any

import numpy as np
import pytest
import slangpy as spy

import sopt
from problems.fitting import ConfigError, load_config, resume, run
from problems.neural_controller import NeuralController, NeuralControllerConfig, NeuralControllerProblem
from problems.neural_controller.controller import PostureLoss
from problems.neural_controller.problem import GROUND, UPRIGHT_HEIGHT, UPRIGHT_TILT
from sopt.sim import State
from sopt.autodiff.tape import loss_scalar
from tests.sim import spring_system_reference as ref
from tests.problems.runs import Interrupt


def config(**overrides: Any) -> NeuralControllerConfig:
    return load_config(NeuralControllerConfig, None, overrides)


# -- float64 reference of one walk ----------------------------------------------------------------------------------
def reference_walk(problem: NeuralControllerProblem, weights: dict[str, np.ndarray]) -> float:
    """The distance (m) the centre moves along +x in one walk, float64: features, tanh MLP, reference steps."""
    return reference_loss(problem, weights)[0]


def reference_loss(problem: NeuralControllerProblem, weights: dict[str, np.ndarray]) -> tuple[float, float]:
    """(distance (m), loss = -distance + w mean_{t >= 1, back b} (y_b(t) - y_b(0))^2) of one walk in float64."""
    c, robot, ctrl = problem.config, problem.robot, problem.controller
    p = ref.SpringParams(springs=robot.springs, stiffness=np.array([c.stiffness]), damping=np.array([c.damping]),
                         rest_length=np.linalg.norm(np.diff(robot.x0.astype(np.float64)[robot.springs], axis=1)[:, 0],
                                                    axis=1),
                         mass=np.array([1.0]), gravity=np.array([0.0, c.gravity]), dt=c.dt,
                         pinned=np.zeros(robot.n_particles, bool), ground=GROUND, actuators=robot.actuators,
                         strength=c.actuation_strength)
    layers = sorted({name.split(".")[1] for name in weights}, key=int)
    x = robot.x0.astype(np.float64)
    v = np.zeros_like(x)
    phase = 2 * np.pi * np.arange(ctrl.n_sin) / ctrl.n_sin
    posture = 0.0
    for t in range(c.episode_steps):
        f = np.concatenate([np.sin(ctrl.omega * t * c.dt + phase),
                            (ctrl.state_scale * np.concatenate([x - x.mean(axis=0), v], axis=1)).ravel()])
        for k in layers:
            f = np.tanh(weights[f"mlp.{k}.weight"] @ f + weights[f"mlp.{k}.bias"])
        x, v = ref.step(p, x, v, f)
        posture += np.sum((x[problem.back, 1] - robot.x0.astype(np.float64)[problem.back, 1]) ** 2)
    distance = float(x[:, 0].mean() - robot.x0.astype(np.float64)[:, 0].mean())
    return distance, -distance + c.upright_weight * posture / (c.episode_steps * problem.back.size)


def test_features_and_their_adjoint_match_numpy() -> None:
    n, n_sin, dt, omega, scale = 5, 3, 0.01, 7.0, 0.3
    ctrl = NeuralController(n, 2, dt, hidden=4, n_sin=n_sin, omega=omega, state_scale=scale)
    rng = np.random.default_rng(1)
    x, v, g = rng.normal(size=(n, 2)), rng.normal(size=(n, 2)), rng.normal(size=(1, n_sin + 4 * n))
    device = sopt.get_device()
    xt, vt = (spy.Tensor.from_numpy(device, a.astype(np.float32)).with_grads(zero=True) for a in (x, v))
    tape = sopt.Tape()
    with tape:
        f = ctrl.features(State(x=xt, v=vt), t=4)
    tape.backward(grads={f: g.astype(np.float32)})
    tape.submit()
    want = np.concatenate([np.sin(omega * 4 * dt + 2 * np.pi * np.arange(n_sin) / n_sin),
                           (scale * np.concatenate([x - x.mean(axis=0), v], axis=1)).ravel()])
    np.testing.assert_allclose(f.to_numpy().reshape(-1), want, rtol=1e-5, atol=1e-6)
    gs = g[0, n_sin:].reshape(n, 4)   # per particle: d(offset x, offset y, vx, vy)
    np.testing.assert_allclose(xt.grad.to_numpy().reshape(n, 2), scale * (gs[:, :2] - gs[:, :2].mean(axis=0)),
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(vt.grad.to_numpy().reshape(n, 2), scale * gs[:, 2:], rtol=1e-5, atol=1e-6)


def test_posture_loss_and_its_adjoint_match_numpy() -> None:
    rng = np.random.default_rng(2)
    traj = rng.normal(size=(5, 6, 2))
    back, rest = np.array([4, 1, 3]), rng.normal(size=3)
    seed = 0.7
    t = spy.Tensor.from_numpy(sopt.get_device(), traj.astype(np.float32)).with_grads(zero=True)
    tape = sopt.Tape()
    with tape:
        loss = PostureLoss(back, rest, 6, 30.0)(t)
    tape.backward(grads={loss: np.array([seed], np.float32)})
    tape.submit()
    traj = traj.astype(np.float32).astype(np.float64)
    offsets = traj[:, back, 1] - rest.astype(np.float32)
    assert float(loss.to_numpy()[0]) == pytest.approx(30.0 * np.mean(offsets ** 2), rel=1e-5)
    want = np.zeros_like(traj)
    want[:, back, 1] = seed * 2 * 30.0 * offsets / offsets.size
    np.testing.assert_allclose(t.grad.to_numpy().reshape(traj.shape), want, rtol=1e-5, atol=1e-7)
    with pytest.raises(ValueError, match="distinct"):
        PostureLoss([1, 1], [0.0, 0.0], 6, 1.0)


def test_walk_and_its_gradient_match_the_float64_reference() -> None:
    problem = NeuralControllerProblem(config(episode_steps=60))
    params = problem.parameters()
    weights = {name: p.numpy().astype(np.float64) for name, p in params.items()}
    want, want_loss = reference_loss(problem, weights)
    assert abs(problem.distance_before - want) < 2e-5, (problem.distance_before, want)
    # the robot moved and touched the ground: the comparison exercises actuation and contact
    assert abs(want) > 1e-3
    # tape gradient of the loss (-distance + posture) in sampled weights vs central differences of the reference
    tape = sopt.Tape()
    with tape:
        loss = problem(tape, 0)
    tape.backward(loss)
    tape.submit()
    posture = float(loss[1].to_numpy()[0])
    assert posture > 1e-3 * abs(want)   # the posture term is in the loss, and its gradient with it
    assert loss_scalar(loss) == pytest.approx(want_loss, abs=2e-5)
    rng = np.random.default_rng(0)
    checked = 0
    for name, p in params.items():
        grad = p.grad_numpy().astype(np.float64)
        flat = np.argsort(-np.abs(grad).ravel())[:2].tolist() + rng.choice(grad.size, 2, replace=False).tolist()
        for index in flat:
            h = 1e-4
            up = {k: w.copy() for k, w in weights.items()}
            down = {k: w.copy() for k, w in weights.items()}
            up[name].ravel()[index] += h
            down[name].ravel()[index] -= h
            fd = (reference_loss(problem, up)[1] - reference_loss(problem, down)[1]) / (2 * h)
            g = grad.ravel()[index]
            assert abs(g - fd) <= 1e-3 * np.abs(grad).max() + 2e-2 * abs(fd), (name, index, g, fd)
            checked += 1
    assert checked == 4 * len(params)


# -- training ---------------------------------------------------------------------------------------------------
SMALL_STEPS = 16
BODY_LENGTH = 0.15   # m: the default robot is 3 squares of 0.05 m long


def test_training_walks_farther_and_upright(tmp_path: pathlib.Path) -> None:
    out = run(NeuralControllerProblem, config(episode_steps=150, steps=SMALL_STEPS, log_every=4), tmp_path,
              progress=False)
    fitted = out.result["fitted"]
    before, after = fitted["distance_before"], fitted["distance_after"]
    # at least 3x the untrained walk and a third of a body length
    assert after > max(3 * abs(before), BODY_LENGTH / 3), (before, after)
    # upright through the whole walk: the back stays high and near level
    assert fitted["min_back_height"] > UPRIGHT_HEIGHT and fitted["max_tilt"] < UPRIGHT_TILT, fitted
    assert -after < out.result["loss"] < -after + 0.05     # the posture term: positive, and small beside it
    assert out.result["true"] == {} and out.result["rel_error"] == {}
    for name in ("gait.png", "gait.gif", "curves.png", "metrics.jsonl", "checkpoint.npz", "config.toml"):
        assert (tmp_path / name).stat().st_size > 0
    from PIL import Image
    with Image.open(tmp_path / "gait.gif") as gif:
        assert gif.n_frames >= 30


def test_resumed_run_equals_uninterrupted(tmp_path: pathlib.Path) -> None:
    small = config(episode_steps=40, steps=6, log_every=3, checkpoint_every=3)
    whole = run(NeuralControllerProblem, small, tmp_path / "whole", progress=False)
    with pytest.raises(KeyboardInterrupt):
        run(NeuralControllerProblem, small, tmp_path / "cut", progress=False, callbacks=[Interrupt(3)])
    resumed = resume(NeuralControllerProblem, tmp_path / "cut", progress=False)
    assert resumed.result == whole.result
    assert whole.result["fitted"]["distance_after"] != whole.result["fitted"]["distance_before"]
    records = [json.loads(line) for line in (tmp_path / "cut" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if "loss" in r] == [3, 6]


@pytest.mark.parametrize("override,message", [
    ({"episode_stpes": 100}, "config episode_stpes = 100: unknown key; did you mean 'episode_steps'?"),
    ({"dt": 0.05}, "config dt = 0.05: must be less than or equal to 0.01"),
    ({"actuation_strength": 0.0}, "config actuation_strength = 0.0: must be greater than 0"),
    ({"true": {"distance": 1.0}}, "config true.distance = 1.0: unknown key"),
    ({"noise_std": 0.1}, "config noise_std = 0.1: must be less than or equal to 0"),
    ({"optimizer": {"otype": "Adamm"}}, "config optimizer.otype: otype 'Adamm'; did you mean 'Adam'?"),
])
def test_config_errors_are_one_line_naming_the_key(override: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(NeuralControllerConfig, None, override)
    assert len(info.value.lines) == 1
    assert message in info.value.lines[0], info.value.lines[0]


def test_unstable_dt_is_refused_before_any_gpu_work() -> None:
    with pytest.raises(ValueError, match="dt = 0.01 s is unstable"):
        NeuralControllerProblem(config(dt=0.01, stiffness=1e5))
