"""sopt.problems.heat_inverse: the sensor gather and the regularisers against float64 references (values and gradients),
the true field's cell averages, the observations against the float64 heat integrator, the whole objective's
gradient against central differences, recovery within 5% at two corners of the documented ranges, a noisy fit, a
resumed run equal to the uninterrupted one, and one-line config errors."""

from __future__ import annotations

import json

import numpy as np
import pytest
import slangpy as spy

import sopt
from sopt.problems.fitting import load_config, run
from sopt.problems.heat_inverse import HeatConfig, HeatInverse
from sopt.problems.heat_inverse.problem import SCALE, Disc, Rectangle, TrueField, checkerboard, true_field
from sopt.problems.heat_inverse.regularization import FieldRegularizer
from sopt.problems.heat_inverse.sensors import Sensors, sensor_cells
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


# -- the problem ---------------------------------------------------------------------------------------------------
def test_observations_follow_the_float64_heat_integrator():
    config = load_config(HeatConfig, None, TINY)
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
    config = load_config(HeatConfig, None, {"true": true})   # the default fit: 24 x 24 cells, 150 steps
    result = run(HeatInverse, config, tmp_path / "out", progress=False).result
    assert result["rel_error"]["conductivity"] < 0.05, result["rel_error"]
    fitted, truth = np.array(result["fitted"]["conductivity"]), np.array(result["true"]["conductivity"])
    assert fitted.shape == truth.shape == (24, 24)
    assert result["rel_error"]["conductivity"] == pytest.approx(np.linalg.norm(fitted - truth) / np.linalg.norm(truth))
    for name in ("fields.png", "readings.png", "curves.png"):
        assert (tmp_path / "out" / name).stat().st_size > 10_000


def test_a_noisy_fit_converges_and_reports_its_error(tmp_path):
    sigma = 0.01   # K, 1% of the checkerboard's amplitude
    config = load_config(HeatConfig, None, {"noise_std": sigma, "steps": 60})
    out = tmp_path / "noisy"
    result = run(HeatInverse, config, out, progress=False).result
    history = records(out / "metrics.jsonl")
    # converged to the noise: the data term ends at the noise's variance (3600 readings, less what the fit absorbs)
    assert history[0]["data_loss"] > 1.3 * sigma ** 2
    assert 0.8 * sigma ** 2 < history[-2]["data_loss"] < 1.05 * sigma ** 2
    assert 1e-3 < result["rel_error"]["conductivity"] < 0.15


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
