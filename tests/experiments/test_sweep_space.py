"""sopt sweep's search space: which tokens are axes, the grammar, grid and seeded random trials, malformed specs."""

from __future__ import annotations

import math

import pytest

from sopt.experiments.search_space import (SpaceError, format_value, is_axis, parse_axis, parse_space,
                                           parse_value, split_top_level)
from tests.experiments.sweep_harness import fake_config, sweep


def test_axes_are_top_level_commas_and_space_functions():
    assert is_axis("a=1,2") and is_axis("a.b=range(3)") and is_axis("a=uniform(0,1)") and is_axis("a=choice(x)")
    assert is_axis('a="x,y",z')                      # one quoted string with a comma, and z
    for base in ("steps=50", "+a.new=1", "~a.b", "layers=[1,2]", 'name="x,y"', "t={a = 1, b = 2}"):
        assert not is_axis(base), base
    assert split_top_level('[1,2],"a,b",{x = 1, y = 2}') == ["[1,2]", '"a,b"', "{x = 1, y = 2}"]


def test_grid_is_the_cartesian_product_first_key_slowest():
    space = parse_space(["steps=5", "x=1,2", "y=range(3)", "+opt.kind=choice(Adam,SGD)"])
    assert space.method == "grid" and space.base_overrides == ("steps=5",)
    trials = space.trials()
    assert len(trials) == 2 * 3 * 2 == space.grid_size
    assert trials[0] == {"x": 1, "y": 0, "opt.kind": "Adam"}
    assert trials[1] == {"x": 1, "y": 0, "opt.kind": "SGD"}
    assert trials[-1] == {"x": 2, "y": 2, "opt.kind": "SGD"}
    assert len({tuple(t.values()) for t in trials}) == 12
    assert space.overrides(trials[5]) == ["x=1", "y=2", "+opt.kind=SGD"]


@pytest.mark.parametrize("spec, values", [("range(4)", [0, 1, 2, 3]), ("range(1,10,3)", [1, 4, 7]),
                                          ("range(5,0,-2)", [5, 3, 1]), ("range(-2, 1)", [-2, -1, 0])])
def test_range_is_pythons(spec, values):
    assert list(parse_axis(f"k={spec}").values) == values


def test_list_values_are_toml_literals_and_bare_words():
    axis = parse_axis('k=0.1,1e-3,7,true,"a b",[1, 2],Adam,data/img.png')
    assert axis.values == (0.1, 1e-3, 7, True, "a b", [1, 2], "Adam", "data/img.png")
    assert [type(v) for v in axis.values[:4]] == [float, float, int, bool]


@pytest.mark.parametrize("value", [0.1, 0.1 + 0.2, 1e-5, 3e300, -0.0, 7, -3, True, False, "Adam", "a b", "true",
                                   "1.5", "", 'q"uote', [1, 2.5, "x"], {"a": 1, "b c": [True]}])
def test_formatted_values_read_back_equal(value):
    """A trial's override KEY=format_value(v) gives sopt run (and parse_value) the same value and type."""
    from sopt.config.overrides import parse_value as run_parse_value
    text = format_value(value)
    for parse in (lambda t: parse_value(t, "k"), lambda t: run_parse_value(t, "k")):
        back = parse(text)
        assert back == value and type(back) is type(value)
        if isinstance(value, float):
            assert math.copysign(1, back) == math.copysign(1, value)


@pytest.mark.parametrize("text", ["0.1", "1e-3", "Adam", "relu6", "a/b.png", "true", "[1, 2]", '"x"', "inf", ".5",
                                  "[1,", "a b"])
def test_values_parse_as_sopt_run_parses_override_values(text):
    """Axis values follow sopt run's override grammar (sopt.config.overrides): same value, or both refuse."""
    from sopt.config.overrides import parse_value as run_parse_value
    from sopt.config.schema import ConfigError
    try:
        expected = run_parse_value(text, "k")
    except ConfigError:
        with pytest.raises(SpaceError):
            parse_value(text, "k")
        return
    assert parse_value(text, "k") == expected


def test_random_search_is_seeded_and_draws_from_the_distributions():
    tokens = ["lr=loguniform(1e-4,1e-1)", "w=uniform(-1,3)", "opt=Adam,SGD,AdamW"]
    space = parse_space(tokens, samples=2000, seed=7)
    trials = space.trials()
    assert space.method == "random" and len(trials) == 2000
    assert trials == parse_space(tokens, samples=2000, seed=7).trials()
    assert trials != parse_space(tokens, samples=2000, seed=8).trials()
    lr = [t["lr"] for t in trials]
    w = [t["w"] for t in trials]
    assert all(1e-4 <= v < 1e-1 for v in lr) and all(-1 <= v < 3 for v in w)
    # log-uniform: half the draws below the geometric mean 10^-2.5 (uniform would put 0.3% there)
    assert abs(sum(v < 10 ** -2.5 for v in lr) / 2000 - 0.5) < 0.05
    assert abs(sum(w) / 2000 - 1.0) < 0.1                             # uniform on [-1, 3]: mean 1
    counts = {k: sum(t["opt"] == k for t in trials) for k in ("Adam", "SGD", "AdamW")}
    assert sum(counts.values()) == 2000 and min(counts.values()) > 600  # each about a third
    assert parse_space(tokens, samples=3).seed == 0                   # no --seed: seed 0, so re-runs resume


def test_samples_over_a_grid_is_random_search_of_its_values():
    space = parse_space(["x=1,2,3", "y=range(10)"], samples=5, seed=1)
    assert space.method == "random" and len(space.trials()) == 5
    assert all(t["x"] in (1, 2, 3) and t["y"] in range(10) for t in space.trials())
    assert parse_space(["x=1,2"], seed=3).seed is None                # a grid has no seed


@pytest.mark.parametrize("token, words", [
    ("lr=range(1,1)", ["lr", "empty"]),
    ("lr=range(a,3)", ["lr", "integers"]),
    ("lr=range(0.5,3)", ["lr", "integers"]),
    ("lr=range(1,5,0)", ["lr", "step"]),
    ("lr=range(1,2,3,4)", ["lr", "arguments"]),
    ("lr=uniform(1)", ["lr", "two bounds"]),
    ("lr=uniform(2,1)", ["lr", "a < b"]),
    ("lr=uniform(0,inf)", ["lr", "finite"]),
    ("lr=loguniform(0,1)", ["lr", "0 < a"]),
    ("lr=loguniform(x,1)", ["lr", "finite"]),
    ("lr=normal(0,1)", ["lr", "unknown space function", "loguniform"]),
    ("lr=choice()", ["lr", "at least one"]),
    ("lr=1,,2", ["lr", "empty value"]),
    ("lr=1,1", ["lr", "twice"]),
    ("lr=1,[2", ["lr", "TOML"]),
    ("1lr=1,2", ["1lr", "dotted key"]),
])
def test_malformed_specs_are_one_line_naming_the_key_before_any_trial(tmp_path, capsys, token, words):
    config = fake_config(tmp_path / "c.toml", steps=3)
    out = tmp_path / "sweep"
    code, lines = sweep([str(config), "steps=2", token, "--samples", "2", "--out", str(out)] if "uniform" in token
                        else [str(config), "steps=2", token, "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and lines == []
    assert len(err.splitlines()) == 1 and err.startswith("error: ")
    for word in words:
        assert word in err, (word, err)
    assert not out.exists()


@pytest.mark.parametrize("argv, words", [
    (["lr=uniform(0,1)"], ["lr", "--samples"]),
    (["x=1,2", "x=3,4"], ["x", "twice"]),
    (["x=1,2", "x=5"], ["x", "base override"]),
    (["steps=5"], ["no sweep axes"]),
    (["x=1,2", "--samples", "0"], ["--samples"]),
    (["x=1,2", "--trials-per-gpu", "2"], ["--trials-per-gpu", "--gpus"]),
    (["x=1,2", "--gpus", "0,0"], ["--gpus", "twice"]),
    (["x=1,2", "--address", "auto"], ["--address", "ray"]),
    (["x=1,2", "--backend", "ray", "--gpus", "0"], ["--gpus", "Ray"]),
    (["x=1,2", "--prune", "median"], ["--min-steps"]),             # the config sets no steps
    (["x=1,2", "--jobs", "0"], ["--jobs"]),
    (["x=1,2", "--out", ""], ["--out"]),
])
def test_bad_command_lines_are_one_line(tmp_path, capsys, argv, words):
    config = fake_config(tmp_path / "c.toml")
    code, lines = sweep([str(config), *argv])
    err = capsys.readouterr().err
    assert code == 2 and lines == []
    assert len(err.splitlines()) == 1 and err.startswith("error: ")
    for word in words:
        assert word in err, (word, err)
    assert not (tmp_path / "runs").exists()


def test_config_file_errors_are_one_line(tmp_path, capsys):
    missing = sweep([str(tmp_path / "nope.toml"), "x=1,2"])
    bad = tmp_path / "bad.toml"
    bad.write_text("steps = = 3\n")
    invalid = sweep([str(bad), "x=1,2"])
    no_problem = tmp_path / "np.toml"
    no_problem.write_text("steps = 3\n")
    unnamed = sweep([str(no_problem), "x=1,2"])
    err = capsys.readouterr().err.splitlines()
    assert [missing[0], invalid[0], unnamed[0]] == [2, 2, 2] and len(err) == 3
    assert "nope.toml" in err[0] and "no such file" in err[0]
    assert "bad.toml" in err[1] and "TOML" in err[1]
    assert "problem" in err[2]
