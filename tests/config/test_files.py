"""sopt.config.files: TOML and JSON config files in (by suffix; duplicate keys, NaN/inf and every unreadable file one
ConfigError line naming the file or the dotted key), TOML out (None left out, atomic), and the round trip of every
problem's default config through TOML. Pure Python: no device."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import tomllib

import pytest

from sopt.config.files import dumps_toml, read_config, without_none, write_atomic
from sopt.config.schema import ConfigError, defaults, validate
from problems import PROBLEMS, problem_class


def one_line(info: pytest.ExceptionInfo) -> str:
    assert len(info.value.lines) == 1, info.value.lines
    assert "\n" not in info.value.lines[0]
    return info.value.lines[0]


# -- reading -------------------------------------------------------------------------------------------------------
def test_toml_and_json_give_the_same_nested_dict(tmp_path):
    toml = tmp_path / "c.toml"
    toml.write_text('problem = "fit_projectile"\nsteps = 20\n[optimizer]\notype = "SGD"\nmomentum = 0.5\n'
                    '[true]\nspeed = 8\n', encoding="utf-8")
    data = {"problem": "fit_projectile", "steps": 20, "optimizer": {"otype": "SGD", "momentum": 0.5},
            "true": {"speed": 8}}
    js = tmp_path / "c.json"
    js.write_text(json.dumps(data), encoding="utf-8")
    assert read_config(toml) == data == read_config(js)
    upper = tmp_path / "C.TOML"   # the suffix's case does not matter
    upper.write_text(toml.read_text(encoding="utf-8"), encoding="utf-8")
    assert read_config(upper) == data
    assert type(read_config(toml)["true"]["speed"]) is int   # TOML's 8 is an int (the schema takes it as a float)


@pytest.mark.parametrize("text,expected", [
    ("steps = 3\nsteps = 4\n", "is not valid TOML: Cannot overwrite a value (at line 2"),         # duplicate key
    ("[a]\nx = 1\n[a]\ny = 2\n", "is not valid TOML"),                                            # duplicate table
    ("this is not toml\n", "is not valid TOML: Expected '=' after a key"),
    ("x = 'unterminated\n", "is not valid TOML"),
])
def test_invalid_toml_is_one_line_naming_the_file(text, expected, tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        read_config(path)
    line = one_line(info)
    assert line.startswith(f"config file {str(path)!r} ") and expected in line, line


@pytest.mark.parametrize("text,key", [
    ("noise_std = nan\n", "noise_std = nan"),
    ("[optimizer]\nlearning_rate = inf\n", "optimizer.learning_rate = inf"),
    ("[true]\nspeed = -inf\n", "true.speed = -inf"),
    ("[a.b]\nc = [1.0, +nan]\n", "a.b.c[1] = nan"),
])
def test_nan_and_inf_in_toml_name_their_dotted_key(text, key, tmp_path):
    path = tmp_path / "c.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        read_config(path)
    assert one_line(info) == f"config {key} in file {str(path)!r}: must be a finite number"


@pytest.mark.parametrize("text,expected", [
    ('{"steps": 3, "steps": 4}', "config steps: duplicate key in file"),
    ('{"true": {"drag": 0.05, "drag": 0.06}}', "config true.drag: duplicate key in file"),
    ('{"a": [{"b": 1, "b": 2}]}', "config a[0].b: duplicate key in file"),
    ('{"noise_std": NaN}', "is not valid JSON: NaN is not a JSON number"),
    ('{"noise_std": -Infinity}', "is not valid JSON: -Infinity is not a JSON number"),
    ('{"steps": 3,}', "is not valid JSON"),
    ("[1, 2]", "must hold a JSON object {...}, got list"),
])
def test_bad_json_is_one_line(text, expected, tmp_path):
    path = tmp_path / "c.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        read_config(path)
    assert expected in one_line(info)


def test_unreadable_files_are_one_line(tmp_path):
    cases = {"missing": (tmp_path / "nope.toml", "does not exist; expected a .toml or .json file"),
             "folder": (tmp_path / "dir.toml", "is a folder; expected a .toml or .json file"),
             "yaml": (tmp_path / "c.yaml", "has suffix '.yaml'; allowed: .toml, .json"),
             "no suffix": (tmp_path / "config", "has suffix ''; allowed: .toml, .json"),
             "binary": (tmp_path / "b.toml", "cannot be read as UTF-8 text")}
    (tmp_path / "dir.toml").mkdir()
    (tmp_path / "c.yaml").write_text("problem: fit_projectile\n", encoding="utf-8")
    (tmp_path / "config").write_text('problem = "fit_projectile"\n', encoding="utf-8")
    (tmp_path / "b.toml").write_bytes(b"steps = 3\n\xff\xfe\n")
    for name, (path, expected) in cases.items():
        with pytest.raises(ConfigError) as info:
            read_config(path)
        line = one_line(info)
        assert line.startswith(f"config file {str(path)!r} ") and expected in line, (name, line)
    with pytest.raises(ConfigError, match="config file '': empty path"):
        read_config("")


# -- writing -------------------------------------------------------------------------------------------------------
def test_dumps_toml_leaves_out_none_and_reads_back():
    data = {"problem": "p", "steps": 3, "x": None, "f": 1e-08, "big": 2**40, "flag": False, "s": 'a "quoted" \\ b',
            "sec": {"otype": "Adam", "max_grad_norm": None, "lr": 0.1, "deep": {"v": [1, 2], "n": None}}}
    text = dumps_toml(data)
    assert "None" not in text and "null" not in text and "max_grad_norm" not in text
    assert tomllib.loads(text) == without_none(data)
    assert without_none(data) == {"problem": "p", "steps": 3, "f": 1e-08, "big": 2**40, "flag": False,
                                  "s": 'a "quoted" \\ b', "sec": {"otype": "Adam", "lr": 0.1, "deep": {"v": [1, 2]}}}
    assert text.index("steps") < text.index("[sec]")   # scalars first: a section would swallow them


def test_write_atomic_replaces_whole_files_only(tmp_path, monkeypatch):
    path = tmp_path / "config.toml"
    write_atomic(path, dumps_toml({"steps": 1}))
    assert tomllib.loads(path.read_text(encoding="utf-8")) == {"steps": 1}
    write_atomic(path, "steps = 2\n")
    assert path.read_text(encoding="utf-8") == "steps = 2\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.toml"]   # no temporary file left

    def crash(fd: int) -> None:   # the disk fails after the new text was written to the temporary file
        raise OSError("disk full")
    monkeypatch.setattr(os, "fsync", crash)
    with pytest.raises(OSError, match="disk full"):
        write_atomic(path, "steps = 3\n")
    assert path.read_text(encoding="utf-8") == "steps = 2\n"   # the old file, whole


# -- every problem's default config through TOML --------------------------------------------------------------------
def _importable(name: str) -> bool:
    return importlib.util.find_spec(PROBLEMS[name][0]) is not None


@pytest.mark.parametrize("name", list(PROBLEMS))
def test_every_default_config_round_trips_through_toml(name):
    if not _importable(name):
        pytest.skip(f"{PROBLEMS[name][0]} is not on this branch yet")
    schema = problem_class(name).schema
    config = schema()
    text = dumps_toml(config.model_dump(mode="json"))
    again = validate(schema, tomllib.loads(text))
    assert again == config
    assert dumps_toml(again.model_dump(mode="json")) == text
    floats = [v for v in _leaves(defaults(schema)) if isinstance(v, float)]
    assert all(math.isfinite(v) for v in floats)


def _leaves(value):
    if isinstance(value, dict):
        for v in value.values():
            yield from _leaves(v)
    elif isinstance(value, list):
        for v in value:
            yield from _leaves(v)
    else:
        yield value
