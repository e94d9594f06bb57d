"""A user's own problem, in a module of their own, registered the same way as the built-in ones: ``--problem
module:Class`` (or ``problem = "module:Class"`` in a config) or an entry point of the ``sopt.problems`` group; it
runs and resumes like a built-in one, and what cannot name a problem is one line with exit status 2."""

from __future__ import annotations

import importlib.metadata
import json
import os
import pathlib
import subprocess
import sys

import pytest

from sopt.config.schema import ConfigError
from sopt.experiments.problem import problem_class, problem_names
from tests.experiments.test_cli import RUN, ROOT, records, sopt_main, summary

# a problem of the user's: fit_projectile's physics under a name, schema and description of its own; with
# MY_BALL_STOP=N it sends itself SIGTERM on metrics step N (an interrupted run, to resume)
MODULE = '''
import os
import signal

from problems.fit_projectile.problem import FitProjectile, ProjectileConfig
from sopt.train import Callback


class BallConfig(ProjectileConfig, problem="my_ball"):
    pass


class StopAt(Callback):
    def on_metrics(self, trainer, metrics):
        if trainer.step == int(os.environ.get("MY_BALL_STOP", "0")):
            os.kill(os.getpid(), signal.SIGTERM)


class MyBall(FitProjectile):
    schema = BallConfig
    description = "my own bouncing ball"

    def trainer_parts(self):
        parts = super().trainer_parts()
        return {**parts, "callbacks": [*parts["callbacks"], StopAt()]}


NotAProblem = 3
'''


@pytest.fixture
def user_module(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> pathlib.Path:
    """``my_problems.py`` in a folder of its own, on sys.path here and on PYTHONPATH for subprocesses."""
    folder = tmp_path / "user"
    folder.mkdir()
    (folder / "my_problems.py").write_text(MODULE, encoding="utf-8")
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(folder), str(ROOT)]))
    return folder


def sopt_subprocess(argv: list[str], **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sopt", *argv], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=300)


def test_module_class_runs_and_resumes_like_a_built_in_problem(user_module: pathlib.Path,
                                                               tmp_path: pathlib.Path) -> None:
    cut, whole = tmp_path / "cut", tmp_path / "whole"
    run = sopt_subprocess(["run", "--problem", "my_problems:MyBall", *RUN, "--out", str(cut), "--no-progress"],
                          MY_BALL_STOP="10")
    assert run.returncode == 0, run.stderr
    assert summary(cut)["status"] == "interrupted" and summary(cut)["problem"] == "my_ball"
    assert 'problem = "my_problems:MyBall"' in (cut / "config.toml").read_text(encoding="utf-8")
    resumed = sopt_subprocess(["resume", str(cut), "--no-progress"])
    assert resumed.returncode == 0, resumed.stderr
    assert "finished 30 steps" in resumed.stdout
    # the same numbers as a run that never stopped, from a config file naming the class
    config = tmp_path / "ball.toml"
    config.write_text('problem = "my_problems:MyBall"\n', encoding="utf-8")
    code, _, err = sopt_main(["run", str(config), *RUN, "--out", str(whole), "--no-progress"])
    assert code == 0, err
    assert records(cut) == records(whole)
    assert (cut / "result.json").read_text(encoding="utf-8") == (whole / "result.json").read_text(encoding="utf-8")


@pytest.mark.parametrize("spec,line", [
    ("no_such_module:MyBall", "error: config problem = 'no_such_module:MyBall': no module named 'no_such_module' "
                              "(is its folder on PYTHONPATH?)"),
    ("my_problems:Missing", "error: config problem = 'my_problems:Missing': module 'my_problems' has no attribute "
                            "'Missing'"),
    ("my_problems:NotAProblem", "error: config problem = 'my_problems:NotAProblem': 'NotAProblem' is not a sopt "
                                "Problem subclass with a name and a schema (sopt.experiments.problem.Problem)"),
    ("my_problems:StopAt", "error: config problem = 'my_problems:StopAt': 'StopAt' is not a sopt Problem subclass "
                           "with a name and a schema (sopt.experiments.problem.Problem)"),
    ("my problems:X", "error: config problem = 'my problems:X': not module:Class (e.g. "
                      "my_package.problem:MyProblem)"),
])
def test_what_names_no_problem_is_one_line_and_exit_2(user_module: pathlib.Path, tmp_path: pathlib.Path,
                                                      spec: str, line: str) -> None:
    code, out, err = sopt_main(["run", "--problem", spec, "steps=5", "--out", str(tmp_path / "run")])
    assert (code, out, err) == (2, "", line + "\n")
    assert not (tmp_path / "run").exists()


def test_sopt_config_documents_a_module_class_problem(user_module: pathlib.Path) -> None:
    code, out, err = sopt_main(["config", "my_problems:MyBall"])
    assert code == 0, err
    assert out.startswith("# my_problems:MyBall: my own bouncing ball\n")
    assert '\nproblem = "my_problems:MyBall"\n' in out


def test_an_entry_point_registers_a_problem_by_name(user_module: pathlib.Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    entry = importlib.metadata.EntryPoint("my_ball", "my_problems:MyBall", "sopt.problems")
    wrong = importlib.metadata.EntryPoint("other_ball", "my_problems:MyBall", "sopt.problems")
    real = importlib.metadata.entry_points

    def entry_points(**selection: str) -> importlib.metadata.EntryPoints:
        if selection == {"group": "sopt.problems"}:
            return importlib.metadata.EntryPoints([entry, wrong])
        return real(**selection)

    monkeypatch.setattr(importlib.metadata, "entry_points", entry_points)
    assert problem_names()[-2:] == ["my_ball", "other_ball"]
    cls = problem_class("my_ball")
    assert cls.__name__ == "MyBall" and cls.name == "my_ball"
    with pytest.raises(ConfigError, match=r"^config problem = 'other_ball': registered as 'other_ball', but it "
                                          r"gives <class 'my_problems.MyBall'>, which is not a Problem named"):
        problem_class("other_ball")
    code, out, _ = sopt_main(["problems"])
    assert code == 0 and "\nmy_ball             my own bouncing ball\n" in out
    code, out, err = sopt_main(["config", "my_ball", "--json"])
    assert code == 0 and json.loads(out)["problem"] == "my_ball", err


def test_a_problem_states_its_name_once_in_its_schema() -> None:
    from sopt.experiments.problem import Problem, ProblemConfig

    class WalkConfig(ProblemConfig, problem="walk"):
        pass

    class Walk(Problem):
        schema = WalkConfig

    assert Walk.name == "walk" and WalkConfig().problem == "walk"
    with pytest.raises(TypeError, match=r"sets name; a problem's name is its schema's"):
        type("Named", (Problem,), {"name": "x", "schema": WalkConfig})
    with pytest.raises(TypeError, match=r"a problem's name must be an identifier"):
        type("BadConfig", (ProblemConfig,), {}, problem="../x")
    with pytest.raises(ConfigError, match=r"problem = 'fit_cloth' is not this config's problem; allowed: 'walk'"):
        from sopt.config.schema import validate
        validate(WalkConfig, {"problem": "fit_cloth"})
