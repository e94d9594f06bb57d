"""problems.fit_projectile: observations against the float64 reference integrator, the tape gradient of the whole
objective (launch velocity, rollout, loss terms, normalisation) against central differences, multi-start starts
that are independent fits, recovery within 1% for true values across the documented ranges, and a noisy fit."""

from __future__ import annotations

import json

import numpy as np
import pytest

import sopt
from problems.fit_projectile import FitProjectile, ProjectileConfig
from problems.fit_projectile.problem import NAMES, RANGES
from problems.fitting import load_config, run
from tests.problems.runs import run_problem
from tests.sim.projectile_reference import Coefficients, rollout as reference_rollout

# a 2 s scene in which the ball bounces (lands at about 1 s), so every parameter has a gradient
SMALL = {"duration": 2.0, "dt": 0.01, "observations": 10, "multi_start": 3, "steps": 20,
         "true": {"restitution": 0.8, "speed": 8.0, "angle": 30.0}}


def test_observations_follow_the_float64_reference():
    config = load_config(ProjectileConfig, None, {"true": {"drag": 0.07, "restitution": 0.6, "speed": 12.0,
                                                           "angle": 35.0}, "noise_std": 0.0})
    problem = FitProjectile(config)
    a = np.radians(35.0)
    x, _ = reference_rollout(np.array([[0.0, 1.0]]), 12.0 * np.array([[np.cos(a), np.sin(a)]]),
                             Coefficients(gravity=np.array([0.0, -9.81]), linear_drag=np.zeros(1),
                                          drag=np.array([0.07]), restitution=np.array([0.6])),
                             config.dt, problem.steps, trajectory=True)
    want = x[problem.at, 0, :]                                  # (40, 2) at t = 0.125, 0.25, ..., 5 s
    assert problem.observed.shape == (40, 2)
    assert (np.diff(want[:, 1]) > 0).sum() >= 6                 # the ball rises again after bounces
    np.testing.assert_allclose(problem.observed, want, atol=2e-3)   # float32 over 1000 steps with 4 bounces
    np.testing.assert_allclose(problem.times, 0.125 * np.arange(1, 41))


def test_the_objectives_gradient_matches_central_differences():
    # two starts at init (per-particle coefficients; a spread start can sit within eps of a contact event, where
    # the loss has a kink and central differences are meaningless)
    config = load_config(ProjectileConfig, None, {**SMALL, "multi_start": 2, "multi_start_spread": 0.0})
    problem = FitProjectile(config)
    # away from the truth (a zero gradient checks nothing); horizon fully open: step = config.steps
    objective = lambda tape, step: problem(tape, config.steps)   # noqa: E731
    result = sopt.gradcheck(objective, problem.parameters(), eps=1e-3, rtol=2e-2, atol=1e-4)
    assert result.ok, result
    assert set(result.worst_by_parameter) == set(NAMES)
    assert min(abs(e.analytic) for e in result.entries) > 1e-3   # every coordinate checked has a gradient


def test_multi_start_spreads_starts_and_each_start_is_an_independent_fit(tmp_path):
    config = load_config(ProjectileConfig, None, {**SMALL, "multi_start": 6, "seed": 3})
    problem = FitProjectile(config)
    init = config.init
    for name in NAMES:
        starts = problem.starts[name]
        low, high = RANGES[name]
        width = config.multi_start_spread * (high - low)
        assert starts[0] == getattr(init, name)
        assert len(set(starts[1:])) == 5
        assert (starts[1:] >= max(low, getattr(init, name) - width)).all()
        assert (starts[1:] <= min(high, getattr(init, name) + width)).all()
    again = FitProjectile(load_config(ProjectileConfig, None, {**SMALL, "multi_start": 6, "seed": 3}))
    other = FitProjectile(load_config(ProjectileConfig, None, {**SMALL, "multi_start": 6, "seed": 4}))
    assert all(np.array_equal(problem.starts[n], again.starts[n]) for n in NAMES)
    assert not np.array_equal(problem.starts["speed"], other.starts["speed"])

    # start 0 of a 3-start fit follows the same path as the fit of init alone
    many = run(FitProjectile, load_config(ProjectileConfig, None, SMALL), tmp_path / "many", progress=False)
    alone = run(FitProjectile, load_config(ProjectileConfig, None, {**SMALL, "multi_start": 1}), tmp_path / "alone",
                progress=False)
    values_many = many.problem.start_values()
    values_alone = alone.problem.start_values()
    for name in NAMES:
        assert values_many[name][0] != getattr(init, name)   # it moved
        np.testing.assert_allclose(values_many[name][0], values_alone[name][0], rtol=1e-6)
    losses = many.problem.start_losses
    assert many.result["loss"] == pytest.approx(float(losses.min()), rel=1e-12)
    best = int(np.argmin(losses))
    assert many.result["fitted"] == {n: pytest.approx(float(values_many[n][best]), rel=1e-12) for n in NAMES}


@pytest.mark.parametrize("true", [
    {"drag": 0.1, "restitution": 0.3, "speed": 20.0, "angle": 20.0},     # fast and flat, strong drag, low bounces
    {"drag": 0.01, "restitution": 0.9, "speed": 5.0, "angle": 70.0},     # slow and steep, little drag
], ids=["fast_flat", "slow_steep"])
def test_noise_free_data_recovers_every_parameter_within_one_percent(true, tmp_path):
    config = load_config(ProjectileConfig, None, {"true": true, "steps": 200, "noise_std": 0.0})   # default scene
    result = run(FitProjectile, config, tmp_path / "out", progress=False).result
    assert result["true"] == true
    for name in NAMES:
        assert result["rel_error"][name] < 0.01, (name, result)
        assert result["rel_error"][name] == pytest.approx(abs(result["fitted"][name] - true[name]) / true[name])
    assert result["loss"] < 1e-6    # m^2: the mean squared distance to the observations


def test_a_noisy_fit_converges_to_the_noise_level(tmp_path):
    sigma = 0.05
    config = load_config(ProjectileConfig, None, {"noise_std": sigma, "multi_start": 2, "steps": 150})
    out = tmp_path / "noisy"
    initial_loss = FitProjectile(config).evaluate()
    result = run(FitProjectile, config, out, progress=False).result
    # at the least-squares fit the mean squared distance is about the noise's 2 sigma^2 (2 coordinates), less
    # what the 4 parameters absorb: 2 sigma^2 (1 - 4 / 80) = 0.00475 m^2
    assert 0.7 * 2 * sigma**2 < result["loss"] < 1.1 * 2 * sigma**2
    assert initial_loss > 100 * result["loss"]
    history = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert history[-1]["event"] == "end" and history[-2]["step"] == 150
    for name in NAMES:
        assert result["rel_error"][name] < 0.03, (name, result)
    assert max(result["rel_error"].values()) > 1e-4   # the noise shows in the error


def test_a_scene_the_observations_do_not_divide_is_refused(tmp_path, capsys):
    config = tmp_path / "c.json"
    config.write_text('{"observations": 33}', encoding="utf-8")
    code, _, err = run_problem(FitProjectile, [str(config), "--out", str(tmp_path / "o2")], capsys)
    assert code == 2
    assert err.splitlines() == ["error: config duration / dt = 1000 steps must be a whole multiple of "
                                "observations = 33 "
                                "(duration 5 s, dt 0.005 s)"]
    assert not (tmp_path / "o2").exists()


def test_the_default_fit_recovers_every_parameter_within_three_reported_sigmas(tmp_path):
    # issue 23's done-when check at the default size (noise 5 cm, the default initial guess): measured
    # |fitted - true| / sigma = 0.86, 0.25, 0.82, 0.77 (drag, restitution, speed, angle)
    result = run(FitProjectile, ProjectileConfig(), tmp_path / "out", progress=False).result
    for name in NAMES:
        std = result["uncertainty"][name]
        assert 0.0 < std < 0.1 * abs(result["true"][name]), (name, std)
        assert abs(result["fitted"][name] - result["true"][name]) <= 3.0 * std, (name, result["fitted"][name], std)
