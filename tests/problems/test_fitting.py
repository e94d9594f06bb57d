"""problems.fitting, the shared runner of the fitting problems: config errors as one line each (exit 2, nothing
written), merging, the output folder never overwritten, ScaledParameter's gradient, clamp and its equivalence with
relative optimiser settings, rel_error, and a resumed run ending with the uninterrupted run's result."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
import tomllib

import numpy as np
import pytest

import sopt
from problems.fit_projectile import FitProjectile, ProjectileConfig
from problems.fitting import ConfigError, ScaledParameter, load_config, rel_error, run
from sopt.sim import Projectile, rollout
from tests.problems.runs import Interrupt, records, run_cli, run_problem

ROOT = pathlib.Path(__file__).resolve().parents[2]


def cli(argv: list[str], capsys: pytest.CaptureFixture) -> tuple[int, str, str]:
    """``sopt run --problem fit_projectile ARGV`` in this process."""
    return run_problem(FitProjectile, argv, capsys)


# -- config errors -------------------------------------------------------------------------------------------------
BAD_CONFIGS = [
    ('{"steps": "300"}', "config steps = '300': must be a valid integer"),                    # a string for an int
    ('{"steps": 1.5}', "config steps = 1.5: must be a valid integer"),                          # a float for an int
    ('{"steps": true}', "config steps = true: must be a valid integer"),                        # a bool for an int
    ('{"noise_std": "0.01"}', "config noise_std = '0.01': must be a valid number"),             # a string for a float
    ('{"noise_std": -0.1}', "config noise_std = -0.1: must be greater than or equal to 0"),     # out of range
    ('{"true": {"drag": 0.5}}', "config true.drag = 0.5: must be less than or equal to 0.1"),   # outside the range
    ('{"true": {"dragg": 0.05}}', "config true.dragg = 0.05: unknown key; did you mean 'drag'?"),
    ('{"stepz": 10}', "config stepz = 10: unknown key; did you mean 'steps'?"),
    ('{"optimizer": {"learnig_rate": 0.1}}', "config optimizer.learnig_rate = 0.1: unknown key; did you mean "
                                             "'learning_rate'?"),
    ('{"optimizer": {"otype": "Adamm"}}', "config optimizer.otype: otype 'Adamm'; did you mean 'Adam'?"),
    ('{"optimizer": {"otype": "SGD", "nesterov": "no"}}', "config optimizer.nesterov = 'no': must be a valid boolean"),
    ('{"schedule": {"final_lr_factor": 2}}', "config schedule.final_lr_factor = 2: must be less than or equal to 1"),
    ('{"multi_start": 0}', "config multi_start = 0: must be greater than or equal to 1"),
    ('{"init": 3}', "config init = 3: must be a section"),
    ('{"steps": 3, "steps": 4}', "config steps: duplicate key"),
    ('{"true": {"drag": 0.05, "drag": 0.06}}', "config true.drag: duplicate key"),
    ('{"noise_std": NaN}', "is not valid JSON: NaN is not a JSON number"),
    ('{"steps": 3,}', "is not valid JSON"),
    ('[1, 2]', "must hold a JSON object"),
]


@pytest.mark.parametrize("text,expected", BAD_CONFIGS, ids=[f"bad{i}" for i in range(len(BAD_CONFIGS))])
def test_a_malformed_config_is_one_error_line_with_exit_2_and_nothing_written(text, expected, tmp_path, capsys):
    config = tmp_path / "config.json"
    config.write_text(text, encoding="utf-8")
    out = tmp_path / "out"
    code, stdout, stderr = cli([str(config), "--out", str(out), "--no-progress"], capsys)
    assert code == 2
    lines = stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr
    assert expected in lines[0]
    assert not out.exists()
    assert stdout == ""   # refused before the device is opened


def test_two_problems_give_two_lines(tmp_path, capsys):
    config = tmp_path / "c.json"
    config.write_text('{"steps": 0, "true": {"speed": 50}}', encoding="utf-8")
    code, _, stderr = cli([str(config), "--out", str(tmp_path / "o")], capsys)
    lines = stderr.splitlines()
    assert code == 2 and len(lines) == 2
    # in the schema's field order: the keys every problem has (steps) before the problem's own (true)
    assert lines[0].startswith("error: config steps = 0: must be greater than or equal to 1")
    assert lines[1].startswith("error: config true.speed = 50: must be less than or equal to 20")


@pytest.mark.parametrize("argv,expected", [
    (["run", "--problem", "fit_projectile", "steps=abc"], "error: config steps = 'abc': must be a valid integer"),
    (["run", "--problem", "fit_projectile", "steps=0"], "error: config steps = 0: must be greater than or equal to 1"),
    (["run", "--problem", "fit_projectile", "/nonexistent/c.json"],
     "error: config file '/nonexistent/c.json' does not exist"),
    (["resume", "x", "steps=5"], "error: unrecognized arguments: steps=5"),   # a run resumes with its own config
    (["run", "--problem", "fit_projectile", "--bogus"], "error: unrecognized arguments: --bogus"),
])
def test_bad_command_lines_are_one_line(argv, expected, capsys):
    code, _, stderr = run_cli(argv, capsys)
    assert code == 2
    lines = stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(expected), stderr


def test_the_command_prints_no_traceback(tmp_path):
    """The real process: exit status 2, one stderr line, no traceback."""
    config = tmp_path / "c.json"
    config.write_text('{"optimizer": {"otype": "Adam", "learning_rate": "0.1"}}', encoding="utf-8")
    proc = subprocess.run([sys.executable, "-m", "problems.fit_projectile", str(config), "--out",
                           str(tmp_path / "o")], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == ["error: config optimizer.learning_rate = '0.1': must be a valid number "
                                        "(step size in parameter units per step at a steady gradient, scaled by the schedule)"]


def test_merge_updates_a_section_unless_its_otype_changes():
    same = load_config(ProjectileConfig, None, {"optimizer": {"beta1": 0.5}, "true": {"drag": 0.02}})
    assert same.optimizer.otype == "Adam" and same.optimizer.beta1 == 0.5
    assert same.optimizer.learning_rate == ProjectileConfig().optimizer.learning_rate   # kept from the default
    assert same.true.drag == 0.02 and same.true.speed == ProjectileConfig().true.speed
    other = load_config(ProjectileConfig, None, {"optimizer": {"otype": "SGD", "momentum": 0.9}})
    assert other.optimizer.otype == "SGD" and other.optimizer.momentum == 0.9
    assert other.optimizer.learning_rate == 0.01   # SGD's default: Adam's keys were not carried over
    assert "beta1" not in other.optimizer.model_dump()
    schedule = load_config(ProjectileConfig, None, {"schedule": {"otype": "Step", "gamma": 0.5}}).schedule
    assert schedule.model_dump() == {"otype": "Step", "step_size": None, "gamma": 0.5}


def test_an_int_is_a_float_but_not_the_other_way():
    config = load_config(ProjectileConfig, None, {"true": {"speed": 12}, "noise_std": 0})
    assert config.true.speed == 12.0 and isinstance(config.true.speed, float)
    with pytest.raises(ConfigError, match=r"config seed = 1.0: must be a valid integer"):
        load_config(ProjectileConfig, None, {"seed": 1.0})


# -- output folders ------------------------------------------------------------------------------------------------
def test_a_non_empty_out_folder_is_refused_and_left_alone(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "mine.txt").write_text("user data", encoding="utf-8")
    code, _, stderr = cli(["--out", str(out), "steps=2", "--no-progress"], capsys)
    assert code == 2
    assert stderr.splitlines() == [f"error: --out {str(out)!r} already exists and is not empty (nothing is "
                                   "overwritten); name a new folder"]
    assert sorted(p.name for p in out.iterdir()) == ["mine.txt"]
    assert (out / "mine.txt").read_text(encoding="utf-8") == "user data"


def test_an_out_path_that_is_a_file_is_refused(tmp_path, capsys):
    out = tmp_path / "file"
    out.write_text("x", encoding="utf-8")
    code, _, stderr = cli(["--out", str(out), "steps=2"], capsys)
    assert code == 2 and "is a file, not a folder" in stderr and out.read_text(encoding="utf-8") == "x"


def test_resume_needs_an_unfinished_run(tmp_path, capsys):
    code, _, stderr = run_cli(["resume", str(tmp_path)], capsys)
    assert code == 2 and stderr == f"error: {str(tmp_path)!r} holds no run to resume (no config.toml)\n"


# -- ScaledParameter -----------------------------------------------------------------------------------------------
def _drop(drag: sopt.Parameter, restitution: float = 0.6) -> tuple[Projectile, np.ndarray]:
    x0 = np.array([[0.0, 2.0], [0.0, 1.0]], np.float32)
    v0 = np.array([[3.0, 1.0], [5.0, 4.0]], np.float32)
    target = np.array([[2.0, 0.5], [3.0, 1.0]], np.float32)
    return Projectile(x0, v0, dt=0.01, drag=drag, restitution=restitution), target


def _loss(sim: Projectile, target: np.ndarray, before=None):
    def objective(tape, step):
        if before is not None:
            before()
        final = rollout(sim, sim.initial_state(), 60).state
        return sopt.losses.MSELoss()(final.x, target)
    return objective


def _gradient(objective, param: sopt.Parameter) -> np.ndarray:
    tape = sopt.Tape()
    with tape:
        loss = objective(tape, 0)
    tape.backward(loss)
    tape.submit()
    grad = param.grad_numpy()
    param.zero_grad()
    return grad


def test_scaled_parameter_gradient_is_scale_times_the_physical_one():
    scale = 0.05
    plain = sopt.Parameter([0.2, 0.1], name="drag")
    sim, target = _drop(plain)
    g_physical = _gradient(_loss(sim, target), plain)
    scaled = ScaledParameter("drag", [0.2, 0.1], scale=scale, unit="1/m")
    sim_s, _ = _drop(scaled.physical)
    g_normalised = _gradient(_loss(sim_s, target, scaled.record), scaled.trainable)
    assert np.abs(g_physical).min() > 1e-3
    np.testing.assert_allclose(g_normalised, scale * g_physical, rtol=1e-5)
    np.testing.assert_allclose(scaled.trainable.numpy(), np.float32([0.2, 0.1]) / np.float32(scale), rtol=1e-7)
    assert np.allclose(scaled.physical.grad_numpy(), 0.0)   # cleared for the next step


def test_scaled_parameter_clamps_and_passes_the_gradient_straight_through():
    scaled = ScaledParameter("drag", [0.12, 0.1], scale=0.1, low=0.0, high=0.15)
    scaled.trainable.load(np.float32([3.0, -1.0]))         # physical 0.3 and -0.1: both outside
    np.testing.assert_allclose(scaled.numpy(), [0.15, 0.0])
    plain = sopt.Parameter([0.15, 0.0], name="drag")
    sim, target = _drop(plain)
    g_at_bounds = _gradient(_loss(sim, target), plain)
    sim_s, _ = _drop(scaled.physical)
    g = _gradient(_loss(sim_s, target, scaled.record), scaled.trainable)
    np.testing.assert_allclose(scaled.physical.numpy(), [0.15, 0.0])
    np.testing.assert_allclose(g, 0.1 * g_at_bounds, rtol=1e-5)
    with pytest.raises(ValueError, match="outside"):
        ScaledParameter("e", [1.2], scale=0.5, low=0.0, high=1.0)


def test_adam_on_the_normalised_value_is_adam_on_the_physical_one_with_relative_settings():
    """Adam(lr, eps) on z = p / s moves p as Adam(lr * s, eps / s) on p itself (the equivalence the
    normalisation rests on), to float32 rounding over 20 steps."""
    s, lr, eps = 0.05, 0.1, 1e-3     # an eps that matters: the gradients are ~1e-2..1e-1
    scaled = ScaledParameter("drag", [0.2, 0.1], scale=s)
    sim_s, target = _drop(scaled.physical)
    plain = sopt.Parameter([0.2, 0.1], name="drag")
    sim, _ = _drop(plain)
    runs = [(_loss(sim_s, target, scaled.record), sopt.optim.Adam([scaled.trainable], lr=lr, eps=eps)),
            (_loss(sim, target), sopt.optim.Adam([plain], lr=lr * s, eps=eps / s))]
    for _ in range(20):
        for objective, opt in runs:
            tape = sopt.Tape()
            with tape:
                loss = objective(tape, 0)
            tape.backward(loss)
            opt.step(tape.encoder)
            tape.submit()
    assert abs(plain.numpy()[0] - 0.2) > 0.02                # it moved
    np.testing.assert_allclose(scaled.numpy(), plain.numpy(), rtol=2e-5)


def test_rel_error():
    assert rel_error(1.01, 1.0) == pytest.approx(0.01)
    assert rel_error(-2.2, -2.0) == pytest.approx(0.1)
    assert rel_error(np.array([3.0, 4.0]) * 1.1, np.array([3.0, 4.0])) == pytest.approx(0.1)
    assert rel_error(np.array([1.0, 0.0]), np.array([0.0, 1.0])) == pytest.approx(np.sqrt(2.0))
    assert rel_error(0.25, 0.0) == 0.25   # no relative error of 0: the absolute one


# -- resume --------------------------------------------------------------------------------------------------------


SMALL = {"steps": 40, "checkpoint_every": 15, "log_every": 5, "observations": 10, "duration": 2.0, "dt": 0.01,
         "multi_start": 3, "noise_std": 0.02}


def test_a_resumed_run_ends_with_the_uninterrupted_runs_result(tmp_path, capsys):
    """Interrupted at step 35 (checkpoint at 30, metrics logged up to 35), resumed from the command line: the
    same result.json, and metrics.jsonl with every record of the uninterrupted run once."""
    config_file = tmp_path / "small.json"
    config_file.write_text(json.dumps(SMALL), encoding="utf-8")
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    code, stdout, _ = cli([str(config_file), "--out", str(whole), "--no-progress"], capsys)
    assert code == 0 and "finished 40 steps" in stdout and "rel_error/drag" in stdout

    config = load_config(ProjectileConfig, config_file)
    with pytest.raises(KeyboardInterrupt):
        run(FitProjectile, config, cut, progress=False, callbacks=[Interrupt(35)])
    assert not (cut / "result.json").exists()
    assert [r["step"] for r in records(cut / "metrics.jsonl")][-2:] == [30, 35]
    code, stdout, stderr = run_cli(["resume", str(cut), "--no-progress"], capsys)
    assert code == 0, stderr

    assert (cut / "result.json").read_text(encoding="utf-8") == (whole / "result.json").read_text(encoding="utf-8")
    result = json.loads((whole / "result.json").read_text(encoding="utf-8"))
    assert set(result) == {"true", "fitted", "uncertainty", "rel_error", "loss", "steps"} and result["steps"] == 40
    assert set(result["fitted"]) == {"drag", "restitution", "speed", "angle"}
    assert records(cut / "metrics.jsonl") == records(whole / "metrics.jsonl")
    assert tomllib.loads((cut / "config.toml").read_text()) == tomllib.loads((whole / "config.toml").read_text())
    for name in ("curves.png", "trajectories.png", "checkpoint.npz"):
        assert (cut / name).stat().st_size > 1000
    code, stdout, stderr = run_cli(["resume", str(cut)], capsys)   # a finished run: left as it is, exit 0
    assert (code, stderr) == (0, "")
    assert stdout == f"the run in {str(cut)!r} has already finished (40 steps); nothing to resume\n"


def test_problem_metrics_make_the_records_loss_the_results_and_keep_the_optimised_one():
    """FittingProblem.result_loss (a multi-start fit's best start's loss) becomes the record's loss, before the
    scheduler, the loggers and the checkpoint see it; the optimised loss stays as loss_sum. Without one (None, the
    default) the record is left as the Trainer made it."""
    from problems.fitting.problem import ProblemMetrics

    class Fake:
        def __init__(self, result):
            self.result = result

        def result_loss(self):
            return self.result

        def progress_metrics(self):
            return {"rel_error/x": 0.5}

    metrics = {"step": 10, "loss": 3.5, "lr": 0.1}
    ProblemMetrics(Fake(0.25)).on_metrics(None, metrics)
    assert metrics == {"step": 10, "loss": 0.25, "lr": 0.1, "loss_sum": 3.5, "rel_error/x": 0.5}
    metrics = {"step": 10, "loss": 3.5}
    ProblemMetrics(Fake(None)).on_metrics(None, metrics)
    assert metrics == {"step": 10, "loss": 3.5, "rel_error/x": 0.5}
    assert ProblemMetrics.order < 65   # before the plateau schedule's callback (sopt.train.trainer) reads the loss
