"""problems.heat_inverse: the sensor gather and the regularisers against float64 references (values, gradients
and Hessians), the true field's cell averages, the observations and the readings' exact Jacobian against the float64
heat integrator, the whole objective's gradient against central differences, recovery within 5% at two corners of
the documented ranges, a noisy fit, the noisy default and its uncertainty's coverage of the truth over seeds, the
uncertainty panel of fields.png, a resumed run equal to the uninterrupted one, and one-line config errors."""

from __future__ import annotations

import json

import numpy as np
import pytest
import slangpy as spy

import sopt
from problems.fitting import load_config, run
from problems.heat_inverse import HeatConfig, HeatInverse
from problems.heat_inverse.problem import SCALE, Disc, Rectangle, TrueField, checkerboard, true_field
from problems.heat_inverse.regularization import FieldRegularizer
from problems.heat_inverse.sensitivity import reading_jacobian
from problems.heat_inverse.sensors import Sensors, sensor_cells
from tests.sim.fields_reference import central_fd, diffusion_rollout
from tests.problems.runs import assert_bad_config_refused, assert_resume_equals_uninterrupted, records, run_problem

# an 8 x 8 plate, 12 simulation steps, 4 observations: for the tests of the mechanics (not of recovery)
TINY = {"grid": 8, "checker_blocks": 4, "sensor_grid": [4, 4], "duration": 0.96, "observations": 4, "steps": 6,
        "log_every": 2, "checkpoint_every": 3, "true": {"inclusion": {"radius": 0.25, "center": [0.5, 0.5]}}}


def cli(argv: list[str], capsys: pytest.CaptureFixture) -> tuple[int, str, str]:
    """``sopt run --problem heat_inverse ARGV`` in this process."""
    return run_problem(HeatInverse, argv, capsys)


# -- kernels -------------------------------------------------------------------------------------------------------
def test_sensor_cells_spread_evenly_and_refuse_more_sensors_than_cells():
    cells = sensor_cells(24, 12, 12)
    assert cells.shape == (144, 2)
    assert sorted(set(cells[:, 0])) == list(range(1, 24, 2)) == sorted(set(cells[:, 1]))
    np.testing.assert_array_equal(sensor_cells(10, 3, 2), [[1, 2], [1, 7], [5, 2], [5, 7], [8, 2], [8, 7]])
    with pytest.raises(ValueError, match="rows = 11: must be in \\[1, 10\\]"):
        sensor_cells(10, 11, 2)


def test_sensor_readings_gather_and_their_adjoint_scatters():
    rng = np.random.default_rng(1)
    traj = rng.normal(size=(3, 5, 6)).astype(np.float32)
    cells = np.array([[0, 0], [4, 5], [2, 3], [1, 4]])
    sensors = Sensors(cells, (5, 6))
    t = spy.Tensor.from_numpy(sopt.get_device(), traj).with_grads(zero=True)
    seed = rng.normal(size=(3, 4)).astype(np.float32)
    tape = sopt.Tape()
    with tape:
        readings = sensors.read(t)
    tape.backward(grads={readings: seed})
    tape.submit()
    np.testing.assert_array_equal(readings.to_numpy().reshape(3, 4), traj[:, cells[:, 0], cells[:, 1]])
    want = np.zeros_like(traj)
    want[:, cells[:, 0], cells[:, 1]] = seed
    np.testing.assert_array_equal(t.grad.to_numpy().reshape(3, 5, 6), want)
    with pytest.raises(ValueError, match="distinct"):
        Sensors(np.array([[1, 1], [1, 1]]), (5, 6))


@pytest.mark.parametrize("kind", ["Tikhonov", "TV"])
def test_regularizer_value_and_gradient_match_the_float64_reference(kind):
    rng = np.random.default_rng(2)
    field = (SCALE * rng.uniform(0.5, 2.0, size=(5, 7))).astype(np.float32).astype(np.float64)
    field[2, 3] = field[2, 4]                    # a zero difference: TV's smoothed kink
    reg = FieldRegularizer(kind, 0.3, (5, 7), SCALE, eps=0.05)
    kappa = sopt.Parameter(field, name="kappa")
    tape = sopt.Tape()
    with tape:
        terms = reg(kappa)
    tape.backward(terms)
    tape.submit()
    value = float(terms.to_numpy().astype(np.float64).sum())
    assert value == pytest.approx(reg.value(field), rel=1e-5)
    assert value > 1e-3
    want = central_fd(reg.value, field, h=1e-7)   # steps of 1e-7 x max(1, |kappa|) = 1e-3 of the scale
    got = kappa.grad_numpy()
    assert np.abs(got - want).max() <= 1e-3 * np.abs(want).max()


def test_true_field_is_the_cell_average_of_the_inclusion():
    disc = true_field(TrueField(background=1e-4, inclusion=Disc(conductivity=2e-4, center=[0.5, 0.5],
                                                                radius=0.3)), 40)
    fraction = (disc - 1e-4) / 1e-4
    assert fraction.sum() / 40 ** 2 == pytest.approx(np.pi * 0.3 ** 2, rel=2e-3)   # the disc's area
    assert fraction[20, 20] == 1.0 and fraction[0, 0] == 0.0
    assert ((fraction > 0) & (fraction < 1)).sum() > 40                             # the cut edge cells
    # a rectangle on cell boundaries: whole cells only, 8 x 6 cells of 1.5e-4 (rows are y, columns x)
    rect = true_field(TrueField(background=1e-4, inclusion=Rectangle(conductivity=1.5e-4, center=[0.4, 0.6],
                                                                     size=[0.4, 0.3])), 20)
    inside = np.zeros((20, 20), bool)
    inside[9:15, 4:12] = True   # y in [0.45, 0.75], x in [0.2, 0.6]
    np.testing.assert_allclose(rect, np.where(inside, 1.5e-4, 1e-4), rtol=1e-12)


@pytest.mark.parametrize("kind", ["Tikhonov", "TV"])
def test_regularizer_hessian_matches_second_differences_of_its_value(kind):
    rng = np.random.default_rng(4)
    field = SCALE * rng.uniform(0.5, 2.0, size=(4, 5))
    field[1, 2] = field[1, 3]                    # a zero difference: TV's curvature 1 / eps there
    reg = FieldRegularizer(kind, 0.3, (4, 5), SCALE, eps=0.05)
    hessian = reg.hessian(field)
    assert hessian.shape == (20, 20)
    np.testing.assert_array_equal(hessian, hessian.T)
    assert np.linalg.eigvalsh(hessian).min() > -1e-6 * np.abs(hessian).max()   # convex: positive semidefinite
    h = 1e-8                                      # 1e-4 of the scale
    for _ in range(3):
        v = rng.normal(size=(4, 5))
        second = (reg.value(field + h * v) - 2 * reg.value(field) + reg.value(field - h * v)) / h ** 2
        assert v.ravel() @ hessian @ v.ravel() == pytest.approx(second, rel=1e-4)


def test_readings_jacobian_matches_central_differences_of_the_float64_integrator():
    rng = np.random.default_rng(5)
    u0, kappa = rng.normal(size=(6, 5)), SCALE * rng.uniform(0.5, 2.0, size=(6, 5))
    cells, at = np.array([[0, 0], [2, 3], [5, 4], [4, 1]]), [0, 3, 7]

    def readings(field: np.ndarray) -> np.ndarray:
        return np.stack([diffusion_rollout(u0, n, kappa=field, source=0.0, dt=0.08, dx=0.01, boundary="dirichlet")
                         [cells[:, 0], cells[:, 1]] for n in at]).ravel()

    values, jac = reading_jacobian(u0, kappa, 0.01, 0.08, at, cells)
    np.testing.assert_allclose(values.ravel(), readings(kappa), rtol=0, atol=1e-12)
    want = np.stack([(readings(kappa + 1e-9 * e.reshape(6, 5)) - readings(kappa - 1e-9 * e.reshape(6, 5))) / 2e-9
                     for e in np.eye(30)], axis=1)
    assert jac.shape == (12, 30)
    np.testing.assert_allclose(jac, want, rtol=0, atol=1e-6 * np.abs(want).max())
    assert np.abs(jac[:4]).max() == 0.0 and np.abs(jac[4:]).max() > 1.0   # at t = 0 no reading depends on kappa


# -- the problem ---------------------------------------------------------------------------------------------------
def test_observations_follow_the_float64_heat_integrator():
    config = load_config(HeatConfig, None, {**TINY, "noise_std": 0.0})
    problem = HeatInverse(config)
    u0 = checkerboard(8, 4, 1.0)
    assert u0[0, 0] == 1.0 and u0[0, 2] == -1.0 and u0[1, 1] == 1.0 and np.abs(u0).min() == 1.0
    want = []
    u = u0
    for _ in range(4):
        u = diffusion_rollout(u, 3, kappa=problem.truth, source=0.0, dt=0.08, dx=0.01, boundary="dirichlet")
        want.append(u[problem.sensors.cells[:, 0], problem.sensors.cells[:, 1]])
    assert problem.observed.shape == (4, 16)
    np.testing.assert_allclose(problem.observed, np.array(want), atol=2e-6)
    np.testing.assert_allclose(problem.times, [0.24, 0.48, 0.72, 0.96])
    assert np.abs(np.array(want)).max() > 0.1


@pytest.mark.parametrize("otype", ["TV", "Tikhonov"])
def test_the_objectives_gradient_matches_central_differences(otype):
    config = load_config(HeatConfig, None, {**TINY, "init": {"conductivity": 1.4e-4},
                                            "regularization": {"otype": otype, "weight": 1e-3}})
    problem = HeatInverse(config)
    # a non-uniform field (the regulariser's gradient vanishes on a uniform one), away from the truth
    z = np.random.default_rng(3).uniform(0.8, 1.6, size=(8, 8))
    problem.kappa.trainable.load(z.astype(np.float32))
    result = sopt.gradcheck(problem, problem.parameters(), eps=1e-2, rtol=2e-2, atol=1e-6, n_checks=10)
    assert result.ok, result
    assert result.worst_by_parameter.keys() == {"conductivity"}
    assert min(abs(e.analytic) for e in result.entries) > 0   # away from the truth: no zero gradient checked


@pytest.mark.parametrize("true", [
    {"background": 5e-5, "inclusion": {"otype": "Disc", "conductivity": 2e-4, "center": [0.4, 0.55], "radius": 0.25}},
    {"background": 2e-4, "inclusion": {"otype": "Rectangle", "conductivity": 5e-5, "center": [0.55, 0.45],
                                       "size": [0.5, 0.3]}},
], ids=["conducting_disc_x4", "insulating_rectangle_x0.25"])
def test_noise_free_data_recover_the_field_within_five_percent(true, tmp_path):
    # the default fit, noise-free, from a uniform 1e-4 m^2/s (the middle of the range on a log scale; from the
    # default 1.5e-4, three times the first field's background, 150 steps leave 6% there)
    config = load_config(HeatConfig, None, {"true": true, "noise_std": 0.0, "init": {"conductivity": 1e-4}})
    result = run(HeatInverse, config, tmp_path / "out", progress=False).result
    assert result["rel_error"]["conductivity"] < 0.05, result["rel_error"]
    fitted, truth = np.array(result["fitted"]["conductivity"]), np.array(result["true"]["conductivity"])
    assert fitted.shape == truth.shape == (24, 24)
    assert result["rel_error"]["conductivity"] == pytest.approx(np.linalg.norm(fitted - truth) / np.linalg.norm(truth))
    for name in ("fields.png", "readings.png", "curves.png"):
        assert (tmp_path / "out" / name).stat().st_size > 10_000


def test_a_noisy_fit_converges_and_reports_its_error(tmp_path):
    sigma = 0.01   # K, 1% of the checkerboard's amplitude: the default
    config = load_config(HeatConfig, None, {"steps": 60})
    assert config.noise_std == sigma
    out = tmp_path / "noisy"
    result = run(HeatInverse, config, out, progress=False).result
    history = records(out / "metrics.jsonl")
    # converged to the noise: the data term ends at the noise's variance (3600 readings, less what the fit absorbs)
    assert history[0]["data_loss"] > 1.3 * sigma ** 2
    assert 0.8 * sigma ** 2 < history[-2]["data_loss"] < 1.05 * sigma ** 2
    assert 1e-3 < result["rel_error"]["conductivity"] < 0.15


def test_the_default_starts_away_from_the_truth_with_noisy_data():
    config = HeatConfig()
    assert config.noise_std == 0.01
    truth = true_field(config.true, config.grid)
    for true in (config.true.background, config.true.inclusion.conductivity):
        assert abs(config.init.conductivity - true) >= 0.25 * true   # 50% and 25% off
    # every cell but a few the inclusion's edge cuts (whose mean of 1e-4 and 2e-4 may be near 1.5e-4)
    assert np.mean(np.abs(config.init.conductivity - truth) >= 0.2 * truth) > 0.95


# small noisy fits: an 8 x 8 plate, 4 x 4 sensors, 30 simulated steps seen 10 times, 60 optimiser steps
SMALL = {"grid": 8, "checker_blocks": 4, "sensor_grid": [4, 4], "duration": 2.4, "observations": 10, "steps": 60,
         "log_every": 60, "checkpoint_every": 60, "true": {"inclusion": {"radius": 0.25, "center": [0.5, 0.5]}}}


def test_the_reported_uncertainty_covers_the_truth_over_noisy_fits(tmp_path, monkeypatch):
    # 4 seeds of 0.01 K noise: every cell's truth within 3 sigma of its fit (the done-when check, at this size),
    # and within 2 sigma in >= 95% of all cells; sigma is the Laplace posterior's, not 0 or inf or vacuous
    from problems.heat_inverse import plot
    drawn = []
    monkeypatch.setattr(plot.atomic_write, "write_figure", lambda path, fig, **kw: drawn.append(fig))
    within_2 = []
    for seed in range(4):
        config = load_config(HeatConfig, None, {**SMALL, "seed": seed})
        run_result = run(HeatInverse, config, tmp_path / f"seed{seed}", progress=False)
        result = run_result.result
        assert result["uncertainty"].keys() == {"conductivity"}
        fitted, truth = np.array(result["fitted"]["conductivity"]), np.array(result["true"]["conductivity"])
        std = np.array(result["uncertainty"]["conductivity"])
        assert std.shape == (8, 8)
        assert 1e-7 < std.min() and np.median(std) < 0.3e-4, np.median(std)     # background 1e-4 m^2/s
        error = np.abs(fitted - truth)
        assert (error <= 3.0 * std).all(), (error / std).max()
        within_2.append(np.mean(error <= 2.0 * std))
        # the fit's error is real (the test is not trivially satisfied by a perfect fit)
        assert result["rel_error"]["conductivity"] > 0.01
    assert np.mean(within_2) >= 0.95, within_2
    # fields.png's last panel: the last run's standard deviations, titled with its 2-sigma share
    panel = [axes for axes in drawn[-2].axes if axes.images][-1]
    np.testing.assert_allclose(panel.images[0].get_array(), std)
    assert f"truth within 2 sigma in {100 * within_2[-1]:.1f}% of cells" in panel.get_title()


@pytest.mark.parametrize("limit,value", [("MAX_CELLS", 63), ("MAX_WORK", 64 * 64 * 30 - 1),
                                         ("MAX_JACOBIAN", 160 * 64 - 1)])
def test_no_uncertainty_beyond_the_sensitivities_limits(limit, value, monkeypatch):
    # SMALL: 64 cells, 30 simulated steps, 10 x 16 readings; one less than each limit needs: no uncertainty
    from problems.heat_inverse import sensitivity
    problem = HeatInverse(load_config(HeatConfig, None, SMALL))
    assert problem.uncertainty()["conductivity"].shape == (8, 8)
    monkeypatch.setattr(sensitivity, limit, value)
    assert problem.uncertainty() is None


def test_a_resumed_run_ends_with_the_uninterrupted_runs_result(tmp_path, capsys):
    config_file = tmp_path / "tiny.json"
    config_file.write_text(json.dumps({**TINY, "noise_std": 0.01}), encoding="utf-8")
    assert_resume_equals_uninterrupted(HeatInverse, config_file, tmp_path, capsys, at=4)


BAD = [
    ({"dt": 0.12}, "dt = 0.12 s is too large: the explicit step must stay stable up to 1.5 x the top of the documented range"),
    ({"sensor_grid": [30, 12]}, "sensor_grid rows = 30 must be in [1, grid = 24]"),
    ({"true": {"inclusion": {"center": [0.2, 0.5]}}}, "the disc spans x in [0, 0.4]; it must lie within [0.1, 0.9]"),
    ({"true": {"background": 3e-4}}, "config true.background = 0.0003: must be less than or equal to 0.0002"),
    ({"regularization": {"otype": "L1"}}, "config regularization.otype: otype 'L1' allowed: Tikhonov, TV"),
    ({"regularization": {"weigth": 1.0}}, "config regularization.weigth = 1.0: unknown key; did you mean 'weight'?"),
    ({"observations": 7}, "duration / dt = 75 steps must be a whole multiple of observations = 7"),
]


@pytest.mark.parametrize("override,expected", BAD, ids=[f"bad{i}" for i in range(len(BAD))])
def test_a_bad_config_is_one_error_line_and_nothing_is_written(override, expected, tmp_path, capsys):
    assert_bad_config_refused(HeatInverse, override, expected, tmp_path, capsys)
