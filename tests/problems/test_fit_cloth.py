"""problems.fit_cloth: the horizontal cloth and its smooth stiffness field, the smoothness regulariser against its
float64 reference (value and gradient), the observations against the float64 spring integrator, the whole
objective's gradient against central differences, recovery within 1% (shared, and per spring), a noisy fit, the
noisy default and its uncertainty's coverage of the truth over seeds, a resumed run equal to the uninterrupted one,
and one-line config errors."""

from __future__ import annotations

import json

import numpy as np
import pytest

import sopt
from problems.fit_cloth import ClothConfig, FitCloth
from problems.fit_cloth.problem import horizontal_cloth, stiffness_field
from problems.fit_cloth.smoothness import SpringSmoothness, cloth_neighbours
from problems.fitting import load_config, run
from sopt.sim import SpringSystem
from tests.sim.fields_reference import central_fd
from tests.sim.spring_system_reference import SpringParams, step as reference_step
from tests.problems.runs import assert_bad_config_refused, assert_resume_equals_uninterrupted, records, run_problem

# a 4 x 4 cloth, 30 steps, 3 observations: for the tests of the mechanics (not of recovery)
TINY = {"nx": 4, "ny": 4, "duration": 0.09, "observations": 3, "steps": 6, "log_every": 2, "checkpoint_every": 3}


def cli(argv: list[str], capsys: pytest.CaptureFixture) -> tuple[int, str, str]:
    """``sopt run --problem fit_cloth ARGV`` in this process."""
    return run_problem(FitCloth, argv, capsys)


# -- geometry and the regulariser ------------------------------------------------------------------------------------
def test_the_cloth_starts_horizontal_held_at_its_top_corners():
    x0, springs, pinned = horizontal_cloth(5, 4, 0.1)
    assert x0.shape == (20, 3) and springs.shape == (4 * 4 + 5 * 3 + 2 * 4 * 3, 2)
    np.testing.assert_allclose(x0[:, 1], 0.0)                          # horizontal, at height 0
    np.testing.assert_allclose(x0[15:, 2], 0.0)                        # the top row along z = 0
    np.testing.assert_allclose(x0[:5, 2], -0.3, rtol=1e-6)             # the bottom row 3 spacings away
    assert pinned == [15, 19]
    lengths = np.linalg.norm(x0[springs[:, 1]] - x0[springs[:, 0]], axis=1)
    np.testing.assert_allclose(np.sort(np.unique(lengths.round(5))), [0.1, np.sqrt(2) * 0.1], rtol=1e-5)
    np.testing.assert_array_equal(springs, SpringSystem.cloth(5, 4, 0.1, stiffness=1.0, dt=1e-3).springs)


def test_neighbours_are_the_next_spring_of_the_same_family_right_and_up():
    x0, springs, _ = horizontal_cloth(5, 4, 0.1)
    mid = 0.5 * (x0[springs[:, 0]] + x0[springs[:, 1]])
    direction = np.abs(x0[springs[:, 1]] - x0[springs[:, 0]])
    n = cloth_neighbours(5, 4)
    assert n.shape == (len(springs), 4)
    for side, shift in ((0, [0.1, 0, 0]), (1, [0, 0, 0.1]), (2, [-0.1, 0, 0]), (3, [0, 0, -0.1])):
        has = n[:, side] >= 0
        np.testing.assert_allclose(mid[n[has, side]] - mid[has], np.tile(shift, (has.sum(), 1)), atol=1e-6)
        np.testing.assert_allclose(direction[n[has, side]], direction[has], atol=1e-6)   # same family
    # every pair is listed both ways, and each grid's edge lacks its outward neighbour
    for a, b in ((0, 2), (1, 3)):
        has = n[:, a] >= 0
        np.testing.assert_array_equal(n[n[has, a], b], np.flatnonzero(has))
    assert (n[:, 0] < 0).sum() == 4 + 3 + 3 + 3   # the last column of each family's grid


def test_the_true_stiffness_field_is_smooth_and_centred_on_the_mean():
    _, springs, _ = horizontal_cloth(8, 8, 0.05)
    k = stiffness_field(springs, 8, 8, 100.0, 0.3)
    assert k.min() >= 70.0 - 1e-9 and k.max() <= 130.0 + 1e-9
    assert k.max() - k.min() > 40.0                       # it varies
    assert abs(k.mean() - 100.0) < 1.0                    # around the mean
    n = cloth_neighbours(8, 8)
    has = n[:, 0] >= 0
    assert np.abs(k[n[has, 0]] - k[has]).max() < 0.15 * 100.0   # neighbours differ by < 15% of the mean
    np.testing.assert_allclose(stiffness_field(springs, 8, 8, 100.0, 0.0), 100.0)


def test_smoothness_value_and_gradient_match_the_float64_reference():
    reg = SpringSmoothness(4, 3, weight=0.7, scale=100.0)
    k_values = np.random.default_rng(5).uniform(50.0, 150.0, reg.count).astype(np.float32).astype(np.float64)
    k = sopt.Parameter(k_values, name="k")
    tape = sopt.Tape()
    with tape:
        terms = reg(k)
    tape.backward(terms)
    tape.submit()
    value = float(terms.to_numpy().astype(np.float64).sum())
    assert value == pytest.approx(reg.value(k_values), rel=1e-5) and value > 0.1
    want = central_fd(reg.value, k_values, h=1e-5)
    assert np.abs(k.grad_numpy() - want).max() <= 1e-4 * np.abs(want).max()


# -- the problem ---------------------------------------------------------------------------------------------------
def test_observations_follow_the_float64_spring_integrator():
    config = load_config(ClothConfig, None, {**TINY, "per_spring": True, "prestretch": 0.1, "noise_std": 0.0,
                                             "true": {"stiffness_variation": 0.3}})
    problem = FitCloth(config)
    grid, springs, pinned = horizontal_cloth(4, 4, config.spacing)
    mask = np.zeros(16, bool)
    mask[pinned] = True
    rest = np.linalg.norm(grid[springs[:, 1]] - grid[springs[:, 0]], axis=1).astype(np.float32).astype(np.float64)
    x0 = (grid * 1.1).astype(np.float32)     # stretched by 10% about the pinned corner at the origin
    np.testing.assert_array_equal(problem.x0, x0)
    params = SpringParams(springs=springs, stiffness=problem.true_stiffness, damping=np.array([config.true.damping]),
                          rest_length=rest, mass=np.array([config.particle_mass]),
                          gravity=np.array([0.0, -9.81, 0.0]), dt=config.dt, pinned=mask)
    x, v = x0.astype(np.float64), np.zeros((16, 3))
    want = []
    for t in range(1, problem.n_steps + 1):
        x, v = reference_step(params, x, v)
        if t in problem.at:
            want.append(x.copy())
    assert problem.observed.shape == (3, 16, 3)
    np.testing.assert_allclose(problem.observed, np.array(want), atol=2e-6)
    assert np.abs(np.array(want)[-1] - x0).max() > 0.03   # it fell (free fall: 4 cm in 0.09 s)


def test_the_objectives_gradient_matches_central_differences():
    config = load_config(ClothConfig, None, {**TINY, "per_spring": True, "smoothness": 1e-5,
                                             "true": {"stiffness_variation": 0.3}})
    problem = FitCloth(config)
    # away from the truth, with a non-uniform field (the smoothness gradient vanishes on a uniform one)
    z = np.random.default_rng(6).uniform(0.6, 1.6, problem.n_springs)
    problem.stiffness.trainable.load(z.astype(np.float32))
    result = sopt.gradcheck(problem, problem.parameters(), eps=1e-3, rtol=2e-2, atol=1e-8, n_checks=10)
    assert result.ok, result
    assert result.worst_by_parameter.keys() == {"stiffness", "damping"}
    assert min(abs(e.analytic) for e in result.entries) > 0


@pytest.mark.parametrize("true", [
    {"stiffness": 250.0, "damping": 0.02},    # stiff and barely damped
    {"stiffness": 50.0, "damping": 0.2},      # soft and strongly damped
], ids=["stiff_light_damping", "soft_heavy_damping"])
def test_noise_free_data_recover_shared_parameters_within_one_percent(true, tmp_path):
    config = load_config(ClothConfig, None, {"true": true, "noise_std": 0.0})   # the default fit, noise-free
    result = run(FitCloth, config, tmp_path / "out", progress=False).result
    assert result["true"] == {**true}
    for name in ("stiffness", "damping"):
        assert result["rel_error"][name] < 0.01, result
        assert result["rel_error"][name] == pytest.approx(abs(result["fitted"][name] - true[name]) / true[name])
    assert (tmp_path / "out" / "cloth.png").stat().st_size > 10_000


def test_noise_free_data_recover_a_per_spring_field_within_one_percent(tmp_path):
    # the per-spring range's corner of the most damping (the default fit; 0.76% in the float64 prototype)
    config = load_config(ClothConfig, None, {"per_spring": True, "noise_std": 0.0,
                                             "true": {"stiffness": 120.0, "damping": 0.2, "stiffness_variation": 0.3}})
    result = run(FitCloth, config, tmp_path / "out", progress=False).result
    assert result["rel_error"]["stiffness"] < 0.01, result["rel_error"]
    assert result["rel_error"]["damping"] < 0.01, result["rel_error"]
    assert len(result["fitted"]["stiffness"]) == len(result["true"]["stiffness"]) == 210
    assert (tmp_path / "out" / "stiffness_field.png").stat().st_size > 10_000
    assert "uncertainty" not in result   # 2 S + 3 rollouts for its Jacobian: skipped per spring


def test_a_noisy_fit_converges_and_reports_its_error(tmp_path):
    sigma = 0.002   # m
    config = load_config(ClothConfig, None, {"noise_std": sigma, "steps": 80, "init": {"stiffness": 60.0,
                                                                                       "damping": 0.15}})
    out = tmp_path / "noisy"
    result = run(FitCloth, config, out, progress=False).result
    history = records(out / "metrics.jsonl")
    assert history[0]["data_loss"] > 1.5 * sigma ** 2   # step 10, on its way
    # at the fit, over all observations, the mean squared distance is the noise's variance (1920 coordinates; the
    # 2 parameters absorb nothing to speak of)
    assert 0.9 * sigma ** 2 < result["loss"] < 1.1 * sigma ** 2
    assert result["rel_error"]["stiffness"] < 0.02
    assert 1e-5 < max(result["rel_error"].values()) < 0.5


def test_the_default_starts_away_from_the_truth_with_noisy_data():
    config = ClothConfig()
    assert config.noise_std > 0.0
    for name, true in config.true.model_dump().items():
        if name in type(config.init).model_fields:
            assert abs(getattr(config.init, name) - true) > 0.05 * true, name   # 8% and 67% off


def test_the_reported_uncertainty_covers_the_truth_over_noisy_fits(tmp_path):
    # the default config (1 mm noise) over 6 seeds, 100 steps (converged to well within a sigma): the truth lies
    # within 2 sigma of the fit in most, and the sigmas are those of the Gauss-Newton covariance, not 0 or inf
    inside = {"stiffness": 0, "damping": 0}
    seeds = range(6)
    for seed in seeds:
        config = load_config(ClothConfig, None, {"seed": seed, "steps": 100})
        result = run(FitCloth, config, tmp_path / f"seed{seed}", progress=False).result
        assert result["uncertainty"].keys() == result["fitted"].keys()
        for name in inside:
            std = result["uncertainty"][name]
            assert 0.0 < std < 0.05 * result["true"][name], (name, std)
            inside[name] += abs(result["fitted"][name] - result["true"][name]) < 2.0 * std
    assert all(n >= len(seeds) - 1 for n in inside.values()), inside


def test_a_resumed_run_ends_with_the_uninterrupted_runs_result(tmp_path, capsys):
    config_file = tmp_path / "tiny.json"
    config_file.write_text(json.dumps({**TINY, "noise_std": 0.001}), encoding="utf-8")
    assert_resume_equals_uninterrupted(FitCloth, config_file, tmp_path, capsys, at=4)


BAD = [
    ({"true": {"stiffness_variation": 0.2}}, "true.stiffness_variation = 0.2 needs per_spring: true"),
    ({"true": {"stiffness": 400.0}}, "config true.stiffness = 400.0: must be less than or equal to 250"),
    ({"observations": 7}, "must be a whole multiple of observations = 7"),
    ({"per_spring": "yes"}, "config per_spring = 'yes': must be a valid boolean"),
    ({"nx": 1}, "config nx = 1: must be greater than or equal to 2"),
    ({"per_spring": True, "true": {"stiffness": 200.0}}, "true.stiffness = 200 N/m is outside [50, 120], the range "
                                                         "documented for per_spring fits"),
    ({"true": {"stiffness_variation": 0.4}, "per_spring": True}, "config true.stiffness_variation = 0.4: must be "
                                                                 "less than or equal to 0.3"),
    ({"smoothnes": 1.0}, "config smoothnes = 1.0: unknown key; did you mean 'smoothness'?"),
]


@pytest.mark.parametrize("override,expected", BAD, ids=[f"bad{i}" for i in range(len(BAD))])
def test_a_bad_config_is_one_error_line_and_nothing_is_written(override, expected, tmp_path, capsys):
    assert_bad_config_refused(FitCloth, override, expected, tmp_path, capsys)


def test_a_dt_unstable_for_the_fit_is_refused_before_training(tmp_path, capsys):
    config_file = tmp_path / "dt.json"
    config_file.write_text(json.dumps({"dt": 0.012, "duration": 0.6, "observations": 10}), encoding="utf-8")
    code, _, stderr = cli([str(config_file), "--out", str(tmp_path / "out")], capsys)
    assert code == 2
    lines = stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: config dt = 0.012 s is too large"), lines
    assert not (tmp_path / "out").exists()
