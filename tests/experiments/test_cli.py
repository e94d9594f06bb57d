"""The ``sopt`` command end to end on a small fit_projectile (software Vulkan driver): malformed configs and overrides
(one ``error:`` line naming the key, file or override, exit 2, nothing written), ``sopt config`` for every problem
(documented TOML that ``sopt run`` takes as it is), override semantics, the run directory's files, SIGTERM ->
interrupted -> ``sopt resume`` equal to an uninterrupted run, a kill -9 inside a checkpoint write (the previous
checkpoint stays loadable and the run resumes to the uninterrupted result), and the runs ``sopt resume`` refuses.

Most commands run in this process (``sopt.experiments.cli.main``, output through capsys); the signal and kill tests
and a few malformed ones run ``python -m sopt`` as a real process.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import time
import tomllib
from typing import Any

import pytest

import sopt
from sopt.config.schema import ConfigError
from sopt.experiments.cli import load_run_config, main
from problems import PROBLEMS, problem_class

ROOT = pathlib.Path(__file__).resolve().parents[2]
# fit_projectile in a 2 s scene (200 simulation steps) that bounces once, one start, 10 observations: every parameter
# has a gradient and a step takes milliseconds
SMALL = ["multi_start=1", "observations=10", "duration=2.0", "dt=0.01", "true.speed=8.0", "true.angle=30.0",
         "true.restitution=0.8"]
RUN = [*SMALL, "steps=30", "log_every=5", "checkpoint_every=10"]   # the finished run and the killed one
TIMING = ("time_s", "steps_per_s")   # what differs between two runs of the same config


def sopt_main(argv: list[str]) -> tuple[int, str, str]:
    """``sopt ARGV`` in this process: (exit status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code
    return code, out.getvalue(), err.getvalue()


def sopt_process(argv: list[str], **kwargs: Any) -> subprocess.Popen:
    """``python -m sopt ARGV`` as a real process (this checkout's sopt), stdout and stderr piped."""
    return subprocess.Popen([sys.executable, "-m", "sopt", *argv], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kwargs)


def listing(folder: pathlib.Path) -> dict[str, tuple[int, int]]:
    """Every path under ``folder`` with its size and modification time: what 'nothing written' compares."""
    return {str(p.relative_to(folder)): (p.stat().st_size if p.is_file() else -1, p.stat().st_mtime_ns)
            for p in sorted(folder.rglob("*"))}


def records(run_dir: pathlib.Path) -> list[dict[str, Any]]:
    """metrics.jsonl's lines (metrics records and events), timings left out."""
    return [{k: v for k, v in json.loads(line).items() if k not in TIMING}
            for line in (run_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines()]


def summary(run_dir: pathlib.Path) -> dict[str, Any]:
    return json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))


def importable(name: str) -> bool:
    return importlib.util.find_spec(PROBLEMS[name][0]) is not None


@pytest.fixture(scope="module")
def config_file(tmp_path_factory) -> pathlib.Path:
    """``sopt config fit_projectile`` as written to a file by a user."""
    code, out, err = sopt_main(["config", "fit_projectile"])
    assert code == 0 and err == ""
    path = tmp_path_factory.mktemp("config") / "fit.toml"
    path.write_text(out, encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def finished_run(config_file, tmp_path_factory) -> pathlib.Path:
    """A finished run of the documented default config with the overrides RUN, started in this process."""
    out = tmp_path_factory.mktemp("runs") / "finished"
    code, stdout, stderr = sopt_main(["run", str(config_file), *RUN, "--out", str(out), "--no-progress"])
    assert code == 0, stderr
    assert f"run directory: {out}\n" in stdout and "finished 30 steps" in stdout
    return out


# -- malformed configs and overrides --------------------------------------------------------------------------------
P = 'problem = "fit_projectile"\n'
FOLDER = object()   # a folder where the config file is named
# (id, files to write {name: text | bytes | FOLDER}, argv after "run" ("{tmp}": the test's folder), what the one
# error line holds)
MALFORMED: list[tuple[str, dict[str, Any], list[str], list[str]]] = [
    # unknown keys, at each level, with "did you mean"
    ("unknown_top_key", {"c.toml": P + "stepz = 10\n"}, ["{tmp}/c.toml"],
     ["config stepz = 10: unknown key; did you mean 'steps'?", "allowed: checkpoint_every,"]),
    ("unknown_section_key", {"c.toml": P + "[optimizer]\nlearnig_rate = 0.1\n"}, ["{tmp}/c.toml"],
     ["config optimizer.learnig_rate = 0.1: unknown key; did you mean 'learning_rate'?"]),
    ("unknown_key_in_true", {"c.toml": P + "[true]\ndragg = 0.05\n"}, ["{tmp}/c.toml"],
     ["config true.dragg = 0.05: unknown key; did you mean 'drag'? allowed: angle, drag, restitution, speed"]),
    ("unknown_nested_section_key", {"c.toml": 'problem = "heat_inverse"\n[true.inclusion]\nradiuss = 0.2\n'},
     ["{tmp}/c.toml"], ["config true.inclusion.radiuss = 0.2: unknown key; did you mean 'radius'?"]),
    ("unknown_section", {"c.toml": P + "[optimiser]\nlearning_rate = 0.1\n"}, ["{tmp}/c.toml"],
     ["config optimiser = {\"learning_rate\": 0.1}: unknown key; did you mean 'optimizer'?"]),
    ("key_of_another_otype", {"c.toml": P + '[optimizer]\notype = "SGD"\nbeta1 = 0.9\n'}, ["{tmp}/c.toml"],
     ["config optimizer.beta1 = 0.9: unknown key", "allowed: ", "learning_rate, max_grad_norm, momentum, nesterov"]),
    # wrong types
    ("string_for_float", {"c.toml": P + '[optimizer]\nlearning_rate = "0.01"\n'}, ["{tmp}/c.toml"],
     ["config optimizer.learning_rate = '0.01': must be a valid number"]),
    ("no_for_bool", {"c.toml": P + '[optimizer]\notype = "SGD"\nmomentum = 0.9\nnesterov = "no"\n'},
     ["{tmp}/c.toml"], ["config optimizer.nesterov = 'no': must be a valid boolean"]),
    ("int_for_bool", {"c.json": '{"problem": "fit_projectile", "optimizer": {"otype": "SGD", "momentum": 0.9, '
                                '"nesterov": 0}}'}, ["{tmp}/c.json"],
     ["config optimizer.nesterov = 0: must be a valid boolean"]),
    ("float_for_int", {"c.toml": P + "steps = 1.5\n"}, ["{tmp}/c.toml"],
     ["config steps = 1.5: must be a valid integer"]),
    ("bool_for_int", {"c.toml": P + "steps = true\n"}, ["{tmp}/c.toml"],
     ["config steps = true: must be a valid integer"]),
    ("word_for_int", {"c.toml": P + '[schedule]\nwarmup_steps = "ten"\n'}, ["{tmp}/c.toml"],
     ["config schedule.warmup_steps = 'ten': must be a valid integer"]),
    ("section_for_int", {"c.toml": P + "[steps]\nx = 1\n"}, ["{tmp}/c.toml"],
     ["config steps = {\"x\": 1}: must be a valid integer"]),
    ("number_for_section", {"c.toml": P + "init = 3\n"}, ["{tmp}/c.toml"], ["config init = 3: must be a section"]),
    # out of range
    ("above_range", {"c.toml": P + "[true]\ndrag = 0.5\n"}, ["{tmp}/c.toml"],
     ["config true.drag = 0.5: must be less than or equal to 0.1"]),
    ("below_range", {"c.toml": P + "multi_start = 0\n"}, ["{tmp}/c.toml"],
     ["config multi_start = 0: must be greater than or equal to 1"]),
    ("negative_seed", {"c.toml": P + "seed = -1\n"}, ["{tmp}/c.toml"],
     ["config seed = -1: must be greater than or equal to 0"]),
    ("huge_steps", {"c.toml": P + "steps = 100000000000\n"}, ["{tmp}/c.toml"],
     ["config steps = 100000000000: must be less than or equal to 10000000"]),
    ("nesterov_without_momentum", {"c.toml": P + '[optimizer]\notype = "SGD"\nnesterov = true\n'}, ["{tmp}/c.toml"],
     ["config optimizer = ", "nesterov needs momentum > 0"]),
    ("scene_not_divisible", {"c.toml": P + "observations = 33\n"}, ["{tmp}/c.toml"],
     ["config duration / dt = 1000 steps must be a whole multiple of observations = 33"]),
    # NaN and inf
    ("toml_nan", {"c.toml": P + "noise_std = nan\n"}, ["{tmp}/c.toml"],
     ["config noise_std = nan in file ", "must be a finite number"]),
    ("toml_inf_in_section", {"c.toml": P + "[optimizer]\nlearning_rate = inf\n"}, ["{tmp}/c.toml"],
     ["config optimizer.learning_rate = inf in file ", "must be a finite number"]),
    ("toml_minus_inf", {"c.toml": P + "[true]\nspeed = -inf\n"}, ["{tmp}/c.toml"],
     ["config true.speed = -inf in file ", "must be a finite number"]),
    ("json_nan", {"c.json": '{"problem": "fit_projectile", "noise_std": NaN}'}, ["{tmp}/c.json"],
     ["is not valid JSON: NaN is not a JSON number"]),
    ("override_nan", {}, ["--problem", "fit_projectile", "noise_std=nan"],
     ["override 'noise_std=nan': value 'nan' must be a finite number"]),
    ("override_inf", {}, ["--problem", "fit_projectile", "optimizer.learning_rate=inf"],
     ["override 'optimizer.learning_rate=inf': value 'inf' must be a finite number"]),
    ("override_nan_in_array", {}, ["--problem", "nbody_masses", "true.masses=[1.0, nan, 1.0, 1.0]"],
     ["config true.masses.1 = nan: must be a finite number"]),
    # files
    ("missing_file", {}, ["{tmp}/nope.toml"], ["config file '", "nope.toml' does not exist"]),
    ("folder", {"dir.toml": FOLDER}, ["{tmp}/dir.toml"], ["config file '", "dir.toml' is a folder"]),
    ("yaml_file", {"c.yaml": "problem: fit_projectile\n"}, ["{tmp}/c.yaml"],
     ["c.yaml' has suffix '.yaml'; allowed: .toml, .json"]),
    ("not_toml", {"c.toml": "this is not toml\n"}, ["{tmp}/c.toml"],
     ["c.toml' is not valid TOML: Expected '=' after a key"]),
    ("binary_toml", {"c.toml": b"\xff\xfe\x00steps"}, ["{tmp}/c.toml"], ["c.toml' cannot be read as UTF-8 text"]),
    ("toml_duplicate_key", {"c.toml": P + "steps = 3\nsteps = 4\n"}, ["{tmp}/c.toml"],
     ["c.toml' is not valid TOML: Cannot overwrite a value (at line 3"]),
    ("toml_duplicate_table", {"c.toml": P + "[true]\ndrag = 0.05\n[true]\nspeed = 10.0\n"}, ["{tmp}/c.toml"],
     ["c.toml' is not valid TOML"]),
    ("json_duplicate_key", {"c.json": '{"problem": "fit_projectile", "steps": 3, "steps": 4}'}, ["{tmp}/c.json"],
     ["config steps: duplicate key in file '", "give each key once"]),
    ("json_duplicate_nested_key", {"c.json": '{"problem": "fit_projectile", "true": {"drag": 0.05, "drag": 0.06}}'},
     ["{tmp}/c.json"], ["config true.drag: duplicate key in file '"]),
    ("json_trailing_comma", {"c.json": '{"problem": "fit_projectile",}'}, ["{tmp}/c.json"], ["is not valid JSON"]),
    ("json_array", {"c.json": "[1, 2]"}, ["{tmp}/c.json"], ["must hold a JSON object {...}, got list"]),
    # the problem
    ("no_problem_key", {"c.toml": "steps = 3\n"}, ["{tmp}/c.toml"],
     ["c.toml' has no top-level 'problem' key", "pass --problem NAME"]),
    ("empty_file", {"c.toml": ""}, ["{tmp}/c.toml"], ["c.toml' has no top-level 'problem' key"]),
    ("unknown_problem", {"c.toml": 'problem = "fit_projectil"\n'}, ["{tmp}/c.toml"],
     ["config problem = 'fit_projectil': unknown problem; did you mean 'fit_projectile'?", "allowed: "]),
    ("problem_not_a_string", {"c.toml": "problem = 3\n"}, ["{tmp}/c.toml"], ["config problem = 3: unknown problem"]),
    ("unknown_problem_flag", {}, ["--problem", "fit_clth"],
     ["config problem = 'fit_clth': unknown problem; did you mean 'fit_cloth'?"]),
    ("problem_flag_disagrees", {"c.toml": P}, ["--problem", "fit_cloth", "{tmp}/c.toml"],
     ["--problem 'fit_cloth' but config file '", "says problem = 'fit_projectile'"]),
    ("remove_problem", {}, ["--problem", "fit_projectile", "~problem"],
     ["override '~problem': the problem key can only be set (problem=NAME)"]),
    ("override_problem_disagrees_with_flag", {}, ["--problem", "neural_field_image", "problem=fit_cloth"],
     ["error: override 'problem=fit_cloth' conflicts with --problem 'neural_field_image': name the problem once "
      "(drop the override, or change the other)"]),
    ("override_unknown_problem", {}, ["--problem", "fit_projectile", "problem=heat_inverce"],
     ["error: override 'problem=heat_inverce' conflicts with --problem 'fit_projectile'"]),
    ("override_problem_disagrees_with_file", {"c.toml": P}, ["{tmp}/c.toml", "problem=fit_cloth"],
     ["error: override 'problem=fit_cloth' conflicts with config file '", "c.toml', which says problem = "
      "'fit_projectile': name the problem once (drop the override, or change the other)"]),
    ("override_problem_disagrees_with_override", {}, ["--problem", "fit_cloth", "problem=fit_cloth",
                                                      "problem=fit_projectile"],
     ["error: override 'problem=fit_projectile' conflicts with override 'problem=fit_cloth'"]),
    # override grammar
    ("double_dot", {}, ["--problem", "fit_projectile", "a..b=1"],
     ["override 'a..b=1': 'a..b' is not a dotted key like a.b"]),
    ("no_key", {}, ["--problem", "fit_projectile", "=1"], ["override '=1': '' is not a dotted key like a.b"]),
    ("remove_with_value", {}, ["--problem", "fit_projectile", "~a=1"],
     ["override '~a=1': ~KEY removes a key and takes no value (write ~a)"]),
    ("no_value", {}, ["--problem", "fit_projectile", "a="], ["override 'a=': no value after '='"]),
    ("not_a_literal", {}, ["--problem", "fit_projectile", "steps=1 2"],
     ["override 'steps=1 2': value '1 2' is not a TOML literal"]),
    ("add_existing", {}, ["--problem", "fit_projectile", "+steps=5"],
     ["override '+steps=5': key 'steps' exists; change it with steps=5"]),
    ("set_missing", {}, ["--problem", "fit_projectile", "stepz=5"],
     ["override 'stepz=5': no key 'stepz'; did you mean 'steps'? (add a new key with +stepz=5)"]),
    ("set_missing_in_section", {}, ["--problem", "fit_projectile", "optimizer.learnig_rate=0.1"],
     ["no key 'optimizer.learnig_rate'; did you mean 'learning_rate'?"]),
    ("remove_missing", {}, ["--problem", "fit_projectile", "~true.sped"],
     ["override '~true.sped': no key 'true.sped'; did you mean 'speed'?"]),
    ("set_under_a_value", {}, ["--problem", "fit_projectile", "true.drag.x=1"],
     ["override 'true.drag.x=1': true.drag is not a section"]),
    ("added_key_is_unknown", {}, ["--problem", "fit_projectile", "+optimizer.new=1"],
     ["config optimizer.new = 1: unknown key allowed: ", "beta1, beta2", "epsilon, lazy, learning_rate"]),
    ("override_string_for_float", {}, ["--problem", "fit_projectile", 'optimizer.learning_rate="0.01"'],
     ["config optimizer.learning_rate = '0.01': must be a valid number"]),
    ("override_zero_lr", {}, ["--problem", "fit_projectile", "optimizer.learning_rate=0"],
     ["config optimizer.learning_rate = 0: must be greater than 0"]),
    ("override_array_for_int", {}, ["--problem", "fit_projectile", "steps=[1,2]"],
     ["config steps = [1, 2]: must be a valid integer"]),
    ("override_float_for_int", {}, ["--problem", "fit_projectile", "steps=1e3"],
     ["config steps = 1000.0: must be a valid integer"]),
    ("override_no_for_bool", {}, ["--problem", "fit_projectile", "optimizer.otype=SGD", "optimizer.momentum=0.9",
                                  "optimizer.nesterov=no"],
     ["config optimizer.nesterov = 'no': must be a valid boolean"]),
    # unknown otype
    ("unknown_otype", {"c.toml": P + '[optimizer]\notype = "Adamm"\n'}, ["{tmp}/c.toml"],
     ["config optimizer.otype: otype 'Adamm'; did you mean 'Adam'? allowed: ", "Adam, AdamW", "SGD"]),
    ("unknown_schedule_otype", {}, ["--problem", "fit_projectile", "schedule.otype=Cosine"],
     ["config schedule.otype: otype 'Cosine'; did you mean 'WarmupCosine'?"]),
    ("unknown_nested_otype", {}, ["--problem", "heat_inverse", "true.inclusion.otype=Square"],
     ["config true.inclusion.otype: otype 'Square'", "allowed: Disc, Rectangle"]),
    # the command line and the output folder
    ("stray_word", {}, ["--problem", "fit_projectile", "steps=3", "extra"],
     ["'extra' is not an override (KEY=VALUE, +KEY=VALUE or ~KEY)"]),
    ("no_config_no_problem", {}, [], ["give a config file (sopt config PROBLEM writes one) or --problem NAME"]),
    ("unknown_flag", {}, ["--problem", "fit_projectile", "--bogus"], ["unrecognized arguments: --bogus"]),
    ("out_empty", {}, ["--problem", "fit_projectile", "--out", ""], ["--out '' is empty; name a new folder"]),
    ("out_not_empty", {"out/mine.txt": "user data"}, ["--problem", "fit_projectile", "--out", "{tmp}/out"],
     ["out' already exists and is not empty (nothing is overwritten); name a new folder"]),
    ("out_is_a_file", {"file": "x"}, ["--problem", "fit_projectile", "--out", "{tmp}/file"],
     ["file' is a file, not a folder"]),
    ("out_under_a_file", {"file": "x"}, ["--problem", "fit_projectile", "--out", "{tmp}/file/run"],
     ["file' is a file, so no folder can be made under it"]),
    ("root_under_a_file", {"file": "x"}, ["--problem", "fit_projectile", "--root", "{tmp}/file"],
     ["--root '", "cannot create the run folder"]),
]


def _prepare(case: tuple, tmp_path: pathlib.Path) -> list[str]:
    _, files, argv, _ = case
    for name, content in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if content is FOLDER:
            path.mkdir()
        elif isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
    root = [] if "--root" in argv else ["--root", "{tmp}/runs"]
    return ["run", *[a.replace("{tmp}", str(tmp_path)) for a in [*argv, *root, "--no-progress"]]]


def test_there_are_at_least_40_malformed_cases():
    assert len(MALFORMED) >= 40 and len({c[0] for c in MALFORMED}) == len(MALFORMED)


@pytest.mark.parametrize("case", MALFORMED, ids=[c[0] for c in MALFORMED])
def test_a_malformed_config_or_override_is_one_line_exit_2_and_writes_nothing(case, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)   # a default runs/ folder would appear here
    argv = _prepare(case, tmp_path)
    before = listing(tmp_path)
    code, stdout, stderr = sopt_main(argv)
    assert code == 2, (stdout, stderr)
    lines = stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr
    for fragment in case[3]:
        assert fragment in lines[0], (fragment, lines[0])
    assert "Traceback" not in stderr
    assert stdout == ""   # refused before the device is reported or a run directory named
    assert listing(tmp_path) == before   # no run directory, no file touched


def test_the_real_command_prints_one_line_and_exits_2(tmp_path):
    """``python -m sopt run ...`` as a user runs it: exit status 2, one stderr line, nothing on stdout."""
    cases = {c[0]: c for c in MALFORMED}
    procs = []
    for name in ("unknown_section_key", "double_dot", "out_under_a_file"):
        folder = tmp_path / name   # started together: each pays Python's and slangpy's start-up
        folder.mkdir()
        procs.append((cases[name], folder, sopt_process(_prepare(cases[name], folder))))
    for case, folder, proc in procs:
        stdout, stderr = proc.communicate(timeout=120)
        assert proc.returncode == 2, (case[0], stderr)
        lines = stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), (case[0], stderr)
        assert all(f in lines[0] for f in case[3]), (case[0], lines[0])
        assert stdout == "" and not (folder / "runs").exists()


def test_an_out_folder_holding_a_run_is_refused_pointing_to_sopt_resume(finished_run):
    before = listing(finished_run)
    code, stdout, stderr = sopt_main(["run", "--problem", "fit_projectile", "steps=2", "--out", str(finished_run)])
    assert code == 2 and stdout == ""
    assert stderr == (f"error: --out {str(finished_run)!r} already exists and is not empty (nothing is "
                      f"overwritten); continue that run with: sopt resume {finished_run}\n")
    assert listing(finished_run) == before


# -- sopt config and sopt problems ----------------------------------------------------------------------------------
KEY_LINE = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*) = ")
UNSET_LINE = re.compile(r"^# ([A-Za-z_][A-Za-z0-9_]*) =   \(unset\)$")
SECTION_LINE = re.compile(r"^\[([A-Za-z_][A-Za-z0-9_.]*)\]$")


def _keys(data: dict[str, Any], prefix: str = "") -> set[str]:
    out = set()
    for k, v in data.items():
        out |= _keys(v, f"{prefix}{k}.") if isinstance(v, dict) else {prefix + k}
    return out


@pytest.mark.parametrize("name", list(PROBLEMS))
def test_sopt_config_prints_documented_toml_that_sopt_run_takes_as_it_is(name, tmp_path):
    if not importable(name):
        pytest.skip(f"{PROBLEMS[name][0]} is not on this branch yet")
    code, text, stderr = sopt_main(["config", name])
    assert code == 0 and stderr == ""
    data = tomllib.loads(text)
    schema = problem_class(name).schema
    default = schema().model_dump(mode="json")
    assert data["problem"] == name and text.splitlines()[0].startswith(f"# {name}: ")
    # every key (set, or None and commented out) has a comment line above it, and every key of the schema is there
    section, seen = "", set()
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if m := SECTION_LINE.match(line):
            section = m.group(1) + "."
            assert lines[i - 1].startswith("# "), (name, line)
        elif m := KEY_LINE.match(line) or UNSET_LINE.match(line):
            assert lines[i - 1].startswith("# ") and not UNSET_LINE.match(lines[i - 1]), (name, line)
            seen.add(section + m.group(1))
    assert seen == _keys(default), seen ^ _keys(default)
    unset = {k for k in _keys(default) if _value_at(default, k) is None}
    assert _keys(data) == _keys(default) - unset
    path = tmp_path / "default.toml"
    path.write_text(text, encoding="utf-8")
    cls, config = load_run_config(str(path), None, [])
    assert cls is problem_class(name) and config == schema()
    code, js, _ = sopt_main(["config", name, "--json"])
    assert code == 0 and json.loads(js) == default


def test_sopt_config_documents_the_config_its_overrides_make(tmp_path):
    """`sopt config PROBLEM OVERRIDES` prints the config sopt run would run: a non-default encoding's own keys,
    each documented, a key changed, one removed to its default; sopt run takes the text as it is."""
    code, text, stderr = sopt_main(["config", "neural_field_image", "encoding.otype=HashGrid", "steps=7"])
    assert code == 0 and stderr == ""
    assert text.splitlines()[1] == "# The defaults with encoding.otype=HashGrid steps=7. Run with: sopt run " \
                                   "THIS_FILE [key=value ...]"
    data = tomllib.loads(text)
    assert data["steps"] == 7 and data["encoding"]["otype"] == "HashGrid"
    lines = text.splitlines()
    for key in ("n_levels", "n_features_per_level", "log2_hashmap_size", "base_resolution", "per_level_scale"):
        at = next(i for i, line in enumerate(lines) if line.startswith(f"{key} = "))
        assert lines[at - 1].startswith("# ") and "[" in lines[at - 1], (key, lines[at - 1])   # meaning [type; ...]
        assert key in data["encoding"]
    code, default, _ = sopt_main(["config", "neural_field_image"])
    assert "log2_hashmap_size" not in default     # the default encoding has none of those keys
    path = tmp_path / "hashgrid.toml"
    path.write_text(text, encoding="utf-8")
    _, from_file = load_run_config(str(path), None, [])
    _, from_overrides = load_run_config(None, "neural_field_image", ["encoding.otype=HashGrid", "steps=7"])
    assert from_file == from_overrides
    code, js, _ = sopt_main(["config", "fit_projectile", "--json", "optimizer.otype=SGD", "optimizer.momentum=0.9",
                             "~steps"])
    optimizer = json.loads(js)["optimizer"]
    assert code == 0 and (optimizer["otype"], optimizer["momentum"], json.loads(js)["steps"]) == ("SGD", 0.9, 300)
    assert "beta1" not in optimizer   # Adam's keys went with Adam


@pytest.mark.parametrize("words, message", [
    (["encoding.otype=HashGrd"], "error: config encoding.otype: otype 'HashGrd'; did you mean 'HashGrid'? allowed: "
                                 "Frequency, HashGrid, Identity"),
    (["steps=abc"], "error: config steps = 'abc': must be a valid integer (optimiser steps)"),
    (["problem=fit_cloth"], "error: override 'problem=fit_cloth': sopt config names the problem once, as PROBLEM "
                            "(drop the override)"),
    (["encoding"], "error: 'encoding' is not an override (KEY=VALUE, +KEY=VALUE or ~KEY) (see sopt config --help)"),
])
def test_sopt_config_refuses_a_bad_override_in_one_line_as_sopt_run(words, message, tmp_path):
    code, stdout, stderr = sopt_main(["config", "neural_field_image", *words])
    assert (code, stdout, stderr) == (2, "", message + "\n")
    if words[0] not in ("encoding", "problem=fit_cloth"):   # sopt run says the same of the same override
        out = tmp_path / "unused"
        code, _, run_stderr = sopt_main(["run", "--problem", "neural_field_image", *words, "--out", str(out)])
        assert (code, run_stderr) == (2, message + "\n") and not out.exists()


def _value_at(data: dict[str, Any], dotted: str) -> Any:
    for part in dotted.split("."):
        data = data[part]
    return data


def test_sopt_problems_lists_every_problem_and_an_unknown_command_suggests_one():
    code, out, _ = sopt_main(["problems"])
    assert code == 0
    assert [line.split()[0] for line in out.splitlines()] == list(PROBLEMS)
    assert all(len(line.split(None, 1)[1]) > 20 for line in out.splitlines())   # a description each
    code, _, err = sopt_main(["runn"])
    assert code == 2 and err.startswith("error: unknown command 'runn'; did you mean 'run'?")
    code, _, err = sopt_main(["config", "fit_projectil"])
    assert code == 2 and err.splitlines() == ["error: config PROBLEM = 'fit_projectil': unknown problem; did you mean "
                                              f"'fit_projectile'? allowed: {', '.join(PROBLEMS)}"]


# -- overrides ------------------------------------------------------------------------------------------------------
def _config(overrides: list[str], text: str | None = None, tmp_path: pathlib.Path | None = None) -> Any:
    path = None
    if text is not None:
        path = tmp_path / "c.toml"
        path.write_text(text, encoding="utf-8")
    return load_run_config(str(path) if path else None, None if path else "fit_projectile", overrides)[1]


def test_overrides_set_add_remove(tmp_path):
    default = problem_class("fit_projectile").schema()
    config = _config(["optimizer.learning_rate=0.2", "true.drag=0.05", "steps=5", "steps=7"])
    assert config.optimizer.learning_rate == 0.2 and config.true.drag == 0.05 and config.steps == 7   # last wins
    assert config.optimizer.beta1 == default.optimizer.beta1
    # +a.new adds the key, which the schema then refuses by name
    with pytest.raises(ConfigError) as info:
        _config(["+true.mass=1.0"])
    assert info.value.lines == ["config true.mass = 1.0: unknown key allowed: angle, drag, restitution, speed"]
    # ~a.b restores the default sopt config shows (fit_projectile's Adam runs at 0.1; Adam's own default is 0.05)
    text = P + "steps = 9\n[optimizer]\nlearning_rate = 0.3\nbeta1 = 0.5\n[true]\ndrag = 0.02\n"
    config = _config(["~optimizer.learning_rate", "~true.drag", "~steps"], text, tmp_path)
    assert config.optimizer.learning_rate == default.optimizer.learning_rate == 0.1
    assert config.true.drag == default.true.drag and config.steps == default.steps
    assert config.optimizer.beta1 == 0.5   # the file's, not removed


def test_an_otype_override_switches_the_family_and_resets_its_keys(tmp_path):
    config = _config(["optimizer.beta1=0.5", "optimizer.otype=SGD"])
    from sopt.optim import SGDConfig
    assert config.optimizer.model_dump() == SGDConfig().model_dump()   # SGD's defaults; Adam's beta1 dropped
    assert config.optimizer.learning_rate == 0.01 and config.optimizer.momentum == 0.0
    config = _config(["optimizer.otype=SGD", "optimizer.momentum=0.9", "optimizer.nesterov=true"])
    assert (config.optimizer.otype, config.optimizer.momentum, config.optimizer.nesterov) == ("SGD", 0.9, True)
    # a file naming SGD, then an override of one of SGD's keys
    config = _config(["optimizer.momentum=0.5"], P + '[optimizer]\notype = "SGD"\n', tmp_path)
    assert config.optimizer.momentum == 0.5 and config.optimizer.learning_rate == 0.01
    # the same otype keeps the section
    assert _config(["optimizer.learning_rate=0.3", "optimizer.otype=Adam"]).optimizer.learning_rate == 0.3
    config = _config(["schedule.otype=Step", "schedule.gamma=0.5"])
    assert config.schedule.model_dump() == {"otype": "Step", "step_size": None, "gamma": 0.5}


def test_override_values_are_toml_literals_or_bare_words():
    heat = load_run_config(None, "heat_inverse", ["sensor_grid=[4,6]", "true.inclusion.center=[0.4, 0.6]"])[1]
    assert heat.sensor_grid == [4, 6] and heat.true.inclusion.center == [0.4, 0.6]
    rect = load_run_config(None, "heat_inverse", ["true.inclusion.otype=Rectangle"])[1].true.inclusion
    assert type(rect).__name__ == "Rectangle"
    config = _config(['problem="fit_projectile"', "optimizer.otype=SGD", "optimizer.momentum=0.5",
                      "optimizer.nesterov=true", "true={drag = 0.05}", "noise_std=1e-2", "seed=0x10"])
    assert config.optimizer.nesterov is True and config.optimizer.momentum == 0.5
    assert config.true.drag == 0.05 and config.true.speed == 14.0   # an inline table updates the section
    assert config.noise_std == 0.01 and config.seed == 16
    cloth = load_run_config(None, None, ["problem=fit_cloth", "per_spring=true"])[1]   # a bare word names it
    assert cloth.problem == "fit_cloth" and cloth.per_spring is True


# -- the run directory ------------------------------------------------------------------------------------------------
def test_the_run_directory_holds_what_the_contract_says(finished_run, config_file):
    files = {p.name for p in finished_run.iterdir()}
    assert {"config.toml", "overrides.txt", "metrics.jsonl", "summary.json", "env.json", "checkpoint.npz",
            "result.json", "curves.png", "trajectories.png"} <= files
    assert not [f for f in files if f.endswith(".tmp")]
    # config.toml: the resolved config, problem first; reading it back gives the same validated config
    text = (finished_run / "config.toml").read_text(encoding="utf-8")
    assert text.startswith('problem = "fit_projectile"\n')
    _, resolved = load_run_config(str(config_file), None, RUN)
    _, again = load_run_config(str(finished_run / "config.toml"), None, [])
    assert again == resolved and again.steps == 30 and again.true.speed == 8.0 and again.multi_start == 1
    assert "max_grad_norm" not in text   # None: left out (TOML has no null), its default
    assert (finished_run / "overrides.txt").read_text(encoding="utf-8") == "".join(f"{o}\n" for o in RUN)
    env = json.loads((finished_run / "env.json").read_text(encoding="utf-8"))
    assert set(env) == {"sopt", "slangpy", "numpy", "python", "platform", "host", "argv", "git_commit",
                        "cuda_visible_devices", "device"}
    assert env["sopt"] == sopt.__version__ and env["device"]["kind"] == sopt.device_kind()
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    assert env["git_commit"].removesuffix("+dirty") == head.strip()
    # summary.json: finished, final metrics = the last record's numbers with the problem's final ones over them
    s = summary(finished_run)
    assert set(s) == {"problem", "status", "steps", "total_steps", "time_s", "metrics", "error", "pid", "updated"}
    assert (s["problem"], s["status"], s["steps"], s["total_steps"], s["error"]) == ("fit_projectile", "finished",
                                                                                      30, 30, None)
    assert s["pid"] == os.getpid() and s["time_s"] > 0
    result = json.loads((finished_run / "result.json").read_text(encoding="utf-8"))
    history = [r for r in records(finished_run) if "event" not in r]
    assert [r["step"] for r in history] == [5, 10, 15, 20, 25, 30]
    assert records(finished_run)[-1] == {"step": 30, "event": "end", "reason": "completed"}
    last = {k: v for k, v in history[-1].items() if isinstance(v, (int, float))}
    final = {**last, "loss": result["loss"], **{f"rel_error/{k}": v for k, v in result["rel_error"].items()}}
    assert {k: v for k, v in s["metrics"].items() if k not in TIMING} == pytest.approx(final, rel=0, abs=0)
    assert result["rel_error"]["speed"] < history[0]["rel_error/speed"]   # it fitted


# -- SIGTERM, resume ------------------------------------------------------------------------------------------------
SIGNALLED = [*SMALL, "steps=100", "log_every=1", "checkpoint_every=10"]


def _wait_for(predicate, proc: subprocess.Popen, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if proc.poll() is not None:
            raise AssertionError(f"the run ended first: {proc.communicate()}")
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError("timed out")
        time.sleep(0.005)


def _steps_logged(run_dir: pathlib.Path) -> list[int]:
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return []
    steps = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            steps.append(json.loads(line)["step"])
        except (ValueError, KeyError):
            pass   # a line being written
    return steps


def test_sigterm_checkpoints_and_exits_0_and_resume_ends_where_an_uninterrupted_run_ends(tmp_path, config_file):
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    proc = sopt_process(["run", str(config_file), *SIGNALLED, "--out", str(cut), "--no-progress"])
    _wait_for(lambda: any(s > 10 for s in _steps_logged(cut)), proc)   # past the first checkpoint (step 10)
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr
    s = summary(cut)
    at = s["steps"]
    assert s["status"] == "interrupted" and 10 < at < 100 and s["error"] is None, s
    assert stdout.splitlines()[-2:] == [f"interrupted after step {at}; checkpoint written. Continue with:",
                                        f"  sopt resume {cut}"]
    assert sopt.load(cut / "checkpoint.npz")["step"] == at   # the checkpoint of the step it stopped at
    assert not (cut / "result.json").exists()

    code, _, stderr = sopt_main(["run", str(config_file), *SIGNALLED, "--out", str(whole), "--no-progress"])
    assert code == 0, stderr
    code, stdout, stderr = sopt_main(["resume", str(cut), "--no-progress"])
    assert code == 0, stderr
    assert f"run directory: {cut} (resuming)" in stdout and "finished 100 steps" in stdout
    assert (cut / "result.json").read_text(encoding="utf-8") == (whole / "result.json").read_text(encoding="utf-8")
    done, reference = summary(cut), summary(whole)
    assert done["status"] == "finished" and done["steps"] == 100
    assert ({k: v for k, v in done["metrics"].items() if k not in TIMING}
            == {k: v for k, v in reference["metrics"].items() if k not in TIMING})
    # every step's record once (the interrupted run's end event dropped), the same numbers as the whole run's
    assert [r["step"] for r in records(cut) if "event" not in r] == list(range(1, 101))
    assert records(cut) == records(whole)
    assert (cut / "config.toml").read_text(encoding="utf-8") == (whole / "config.toml").read_text(encoding="utf-8")


# -- kill -9 inside a checkpoint write ------------------------------------------------------------------------------
# The second checkpoint save (step 20) writes half its bytes into its temporary file, then the process kills itself
# with SIGKILL: what a kill -9 at the worst moment leaves. (Every file goes through sopt.utils.atomic_write: its os.fdopen
# is replaced, and the temporary file's name tells a checkpoint's from the others'.)
KILLED_IN_SAVE = r"""
import os, signal, sys, types
import sopt.utils.atomic_write as atomic_write

saves = 0

class DyingFile:
    def __init__(self, f):
        self.f = f
    def __enter__(self):
        return self
    def __exit__(self, *exc):
        return False
    def write(self, data):
        self.f.write(data[: len(data) // 2])
        self.f.flush()
        os.fsync(self.f.fileno())
        os.kill(os.getpid(), signal.SIGKILL)

def fdopen(fd, *args, **kwargs):
    global saves
    f = os.fdopen(fd, *args, **kwargs)
    if ".checkpoint.npz." not in os.readlink(f"/proc/self/fd/{fd}"):
        return f
    saves += 1
    return f if saves < 2 else DyingFile(f)

class Os(types.ModuleType):   # sopt.utils.atomic_write's os, with fdopen replaced
    def __getattr__(self, name):
        return getattr(os, name)

patched = Os("os")
patched.fdopen = fdopen
atomic_write.os = patched
from sopt.experiments.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_kill_9_inside_a_checkpoint_write_keeps_the_previous_checkpoint_and_resume_finishes(
        tmp_path, config_file, finished_run):
    cut = tmp_path / "killed"
    proc = subprocess.Popen([sys.executable, "-c", KILLED_IN_SAVE, "run", str(config_file), *RUN, "--out", str(cut),
                             "--no-progress"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _, stderr = proc.communicate(timeout=300)
    assert proc.returncode == -signal.SIGKILL, stderr
    partial = list(cut.glob(".checkpoint.npz.*.tmp"))
    assert len(partial) == 1 and 0 < partial[0].stat().st_size < (cut / "checkpoint.npz").stat().st_size
    s = summary(cut)
    assert (s["status"], s["steps"], s["pid"]) == ("running", 10, proc.pid)   # killed: no chance to say so

    # the previous checkpoint loads whole into a fresh problem: step 10, the values logged at step 10
    _, config = load_run_config(str(cut / "config.toml"), None, [])
    problem = problem_class("fit_projectile")(config)
    parts = problem.trainer_parts()
    extra = sopt.load(cut / "checkpoint.npz", parameters=parts["parameters"], optimizer=parts["optimizer"],
                      scheduler=parts["scheduler"])
    assert extra["step"] == 10
    at_10 = next(r for r in records(cut) if r.get("step") == 10 and "event" not in r)
    for name, value in problem.fitted().items():
        assert value == pytest.approx(at_10[f"value/{name}"], rel=1e-6), name
    assert at_10["value/speed"] != config.init.speed   # it had moved

    code, stdout, stderr = sopt_main(["resume", str(cut), "--no-progress"])   # the stale pid is no obstacle
    assert code == 0, stderr
    assert summary(cut)["status"] == "finished" and not list(cut.glob(".checkpoint.npz.*.tmp"))
    assert (cut / "result.json").read_text(encoding="utf-8") == (finished_run / "result.json").read_text(
        encoding="utf-8")
    assert records(cut) == records(finished_run)


# -- runs sopt resume refuses -----------------------------------------------------------------------------------------
def test_resume_refuses_a_finished_run_an_empty_folder_a_file_and_a_running_run(finished_run, tmp_path):
    # a finished run is left as it is: one line saying so, exit 0 (as a finished fit resumed from its last
    # checkpoint ends at once; the README's block resumes the run it just finished)
    before = listing(finished_run)
    code, stdout, stderr = sopt_main(["resume", str(finished_run)])
    assert (code, stderr) == (0, "")
    assert stdout == f"the run in {str(finished_run)!r} has already finished (30 steps); nothing to resume\n"
    assert listing(finished_run) == before

    empty = tmp_path / "empty"
    empty.mkdir()
    code, stdout, stderr = sopt_main(["resume", str(empty)])
    assert (code, stdout, stderr) == (2, "", f"error: {str(empty)!r} holds no run to resume (no config.toml)\n")
    code, _, stderr = sopt_main(["resume", str(tmp_path / "nope")])
    assert code == 2 and stderr == (f"error: {str(tmp_path / 'nope')!r} is not a folder; give a run directory (it "
                                    "holds config.toml)\n")

    running = tmp_path / "running"
    running.mkdir()
    (running / "config.toml").write_text((finished_run / "config.toml").read_text(encoding="utf-8"), encoding="utf-8")
    other = subprocess.Popen(["sleep", "60"])   # a live process that is not this one
    try:
        (running / "summary.json").write_text(json.dumps({**summary(finished_run), "status": "running", "steps": 10,
                                                          "pid": other.pid}), encoding="utf-8")
        before = listing(running)
        code, stdout, stderr = sopt_main(["resume", str(running)])
        assert (code, stdout) == (2, "")
        assert stderr == (f"error: the run in {str(running)!r} is still running (process {other.pid}); stop it first "
                          "(Ctrl-C or kill, which checkpoints)\n")
        assert listing(running) == before
    finally:
        other.kill()
        other.wait()
