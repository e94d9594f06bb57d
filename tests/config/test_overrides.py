"""sopt.config.overrides (Hydra's grammar: ``a.b=v``, ``+a.new=v``, ``~a.b``; values as TOML literals or bare words)
and sopt.config.schema.complete (the defaults an override's section falls back to). Pure Python: no device."""

from __future__ import annotations

import copy

import pytest

from sopt.config.overrides import REMOVED, Override, apply_override, apply_overrides, parse_override, parse_value
from sopt.config.schema import ConfigError, complete, defaults, merge, validate
from problems.fit_projectile import ProjectileConfig


def one_line(info: pytest.ExceptionInfo) -> str:
    assert len(info.value.lines) == 1, info.value.lines
    return info.value.lines[0]


@pytest.mark.parametrize("text,value", [
    ("0.1", 0.1), ("1e-3", 0.001), ("-2", -2), ("20", 20), ("0x10", 16), ("1_000", 1000),
    ("true", True), ("false", False),
    ('"x"', "x"), ("'single'", "single"), ('""', ""), ('"0.01"', "0.01"), ('"true"', "true"),
    ("[1,2]", [1, 2]), ("[1, 2.5]", [1, 2.5]), ('["a", "b"]', ["a", "b"]), ("[]", []),
    ("{k = 1}", {"k": 1}), ("{otype = \"SGD\", momentum = 0.9}", {"otype": "SGD", "momentum": 0.9}),
    ("SGD", "SGD"), ("ReLU", "ReLU"), ("fit_cloth", "fit_cloth"), ("a/b-c.d", "a/b-c.d"),
    ("/data/photo.jpg", "/data/photo.jpg"), ("./photo.jpg", "./photo.jpg"), ("../a/b.png", "../a/b.png"),
    ("/a/x+y.png", "/a/x+y.png"),
])
def test_values_are_toml_literals_or_bare_words(text, value):
    got = parse_value(text, "x")
    assert got == value and type(got) is type(value)


@pytest.mark.parametrize("text", ["nan", "+nan", "-nan", "inf", "+inf", "-inf"])
def test_nan_and_inf_values_are_refused(text):
    # (a NaN inside an array or table is the schema's to refuse: tests/experiments/test_cli.py)
    with pytest.raises(ConfigError) as info:
        parse_value(text, "'k=...'")
    assert one_line(info) == f"override 'k=...': value {text!r} must be a finite number"


@pytest.mark.parametrize("text", ["1 2", "[1, 2", "'open", "a b", "{k = }", "1.2.3.", "@x", ".5", "/a b", "~/x"])
def test_a_value_that_is_neither_toml_nor_a_bare_word_is_refused(text):
    with pytest.raises(ConfigError) as info:
        parse_value(text, "'k=...'")
    assert one_line(info) == (f"override 'k=...': value {text!r} is not a TOML literal (numbers, true/false, "
                              "\"strings\", [arrays], {tables}) nor a bare word")


def test_parse_override_ops_and_keys():
    assert parse_override("a.b=1") == Override("a.b=1", "set", ("a", "b"), 1)
    assert parse_override("+a.new=x") == Override("+a.new=x", "add", ("a", "new"), "x")
    assert parse_override("~a.b") == Override("~a.b", "remove", ("a", "b"))
    assert parse_override("steps=5").dotted == "steps"
    assert parse_override('s="a=b"').value == "a=b"   # the first '=' splits key and value
    assert parse_override("_x.y_2=0").key == ("_x", "y_2")


@pytest.mark.parametrize("text,expected", [
    ("a..b=1", "override 'a..b=1': 'a..b' is not a dotted key like a.b"),
    ("=1", "override '=1': '' is not a dotted key like a.b"),
    (".a=1", "override '.a=1': '.a' is not a dotted key like a.b"),
    ("a.=1", "override 'a.=1': 'a.' is not a dotted key like a.b"),
    ("1a=1", "override '1a=1': '1a' is not a dotted key like a.b"),
    ("a-b=1", "override 'a-b=1': 'a-b' is not a dotted key like a.b"),
    ("+=1", "override '+=1': '' is not a dotted key like a.b"),
    ("~a=1", "override '~a=1': ~KEY removes a key and takes no value (write ~a)"),
    ("~", "override '~': '' is not a dotted key like a.b"),
    ("~a..b", "override '~a..b': 'a..b' is not a dotted key like a.b"),
    ("a=", "override 'a=': no value after '='; give one (a string as \"\")"),
    ("+a=", "override '+a=': no value after '='"),
    ("a", "override 'a': expected KEY=VALUE, +KEY=VALUE or ~KEY"),
    ("+a", "override '+a': expected KEY=VALUE, +KEY=VALUE or ~KEY"),
    ("a=1 2", "override 'a=1 2': value '1 2' is not a TOML literal"),
    ("a=nan", "override 'a=nan': value 'nan' must be a finite number"),
])
def test_bad_grammar_is_one_line_naming_the_override(text, expected):
    with pytest.raises(ConfigError) as info:
        parse_override(text)
    assert one_line(info).startswith(expected), one_line(info)


DATA = {"steps": 300, "optimizer": {"otype": "Adam", "learning_rate": 0.1, "beta1": 0.9},
        "true": {"drag": 0.04, "speed": 14.0}}


def test_apply_set_add_remove_without_touching_the_input():
    before = copy.deepcopy(DATA)
    out = apply_overrides(DATA, ["steps=20", "optimizer.learning_rate=0.5", "+true.extra=[1, 2]", "~true.speed",
                                 "+newsec.x=1"])
    assert DATA == before
    assert out == {"steps": 20, "optimizer": {"otype": "Adam", "learning_rate": 0.5, "beta1": 0.9},
                   "true": {"drag": 0.04, "extra": [1, 2]}, "newsec": {"x": 1}}
    assert REMOVED is not None   # the module's marker exists for callers; removal deletes the key itself


def test_changing_otype_drops_the_sections_other_keys_and_the_same_otype_keeps_them():
    assert apply_overrides(DATA, ["optimizer.otype=SGD"])["optimizer"] == {"otype": "SGD"}
    assert apply_overrides(DATA, ["optimizer.otype=Adam"])["optimizer"] == DATA["optimizer"]


@pytest.mark.parametrize("text,expected", [
    ("stepz=5", "override 'stepz=5': no key 'stepz'; did you mean 'steps'? (add a new key with +stepz=5) allowed "
                "here: optimizer, steps, true"),
    ("optimizer.learnig_rate=1", "override 'optimizer.learnig_rate=1': no key 'optimizer.learnig_rate'; did you "
                                 "mean 'learning_rate'? (add a new key with +optimizer.learnig_rate=1) allowed here: "
                                 "beta1, learning_rate, otype"),
    ("optimiser.beta1=0.5", "override 'optimiser.beta1=0.5': no key 'optimiser'; did you mean 'optimizer'?"),
    ("~true.sped", "override '~true.sped': no key 'true.sped'; did you mean 'speed'? allowed here: drag, speed"),
    ("+steps=5", "override '+steps=5': key 'steps' exists; change it with steps=5"),
    ("+true.drag=0.1", "override '+true.drag=0.1': key 'true.drag' exists; change it with true.drag=0.1"),
    ("steps.x=1", "override 'steps.x=1': steps is not a section"),
    ("true.drag.x=1", "override 'true.drag.x=1': true.drag is not a section"),
    ("+steps.x=1", "override '+steps.x=1': steps is not a section"),
])
def test_a_key_that_must_exist_or_must_not_is_one_line(text, expected):
    with pytest.raises(ConfigError) as info:
        apply_override(DATA, parse_override(text))
    assert one_line(info).startswith(expected), one_line(info)


# -- complete: the defaults behind an override ------------------------------------------------------------------------
def test_complete_fills_an_otype_change_with_that_otypes_defaults():
    base = merge(defaults(ProjectileConfig), {})
    switched = complete(ProjectileConfig, apply_overrides(base, ["optimizer.otype=SGD"]))
    from sopt.optim import SGDConfig
    assert switched["optimizer"] == SGDConfig().model_dump(mode="json")   # SGD's own defaults, not Adam's lr 0.1
    assert switched["optimizer"]["learning_rate"] == 0.01 and switched["optimizer"]["momentum"] == 0.0
    tuned = apply_overrides(switched, ["optimizer.momentum=0.9", "optimizer.nesterov=true"])   # its keys exist now
    assert validate(ProjectileConfig, tuned).optimizer.momentum == 0.9
    # back to the problem's own otype: the problem's defaults (fit_projectile's Adam runs at 0.1, Adam's own is 0.05)
    back = complete(ProjectileConfig, apply_overrides(tuned, ["optimizer.otype=Adam"]))
    assert back["optimizer"] == defaults(ProjectileConfig)["optimizer"]
    assert back["optimizer"]["learning_rate"] == 0.1


def test_complete_restores_removed_keys_and_keeps_what_validation_must_see():
    base = merge(defaults(ProjectileConfig), {"steps": 7, "true": {"drag": 0.05}, "optimizer": {"beta1": 0.5}})
    removed = apply_overrides(base, ["~steps", "~true.drag", "~optimizer.learning_rate", "~optimizer.beta1",
                                     "~schedule"])
    assert complete(ProjectileConfig, removed) == defaults(ProjectileConfig)
    odd = {"problem": "fit_projectile", "bogus": 1, "optimizer": {"otype": "Adamm"}, "true": 3}
    done = complete(ProjectileConfig, odd)
    assert done["bogus"] == 1 and done["optimizer"] == {"otype": "Adamm"} and done["true"] == 3   # left to validate
    assert done["steps"] == 300 and done["schedule"] == defaults(ProjectileConfig)["schedule"]
