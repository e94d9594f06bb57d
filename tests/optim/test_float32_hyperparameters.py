"""Hyperparameters mean what they say in float32 (issue 19): a nonzero value that float32 stores as 0, a subnormal
or Inf is refused with the key and the representable range, in the optimiser constructors, ``load_state_dict``
(and so ``sopt.load``), the schedulers and the config schema; 0 and every normal float32 stay allowed."""

from __future__ import annotations

import copy
import re

import numpy as np
import pytest

import sopt
from sopt.train.checkpoint import CheckpointError
from sopt.config import registry
from sopt.config.schema import ConfigError, StrictModel, validate
from sopt.optim import SGD, Adagrad, Adam, AdamW, RMSprop
from sopt.optim import lr_scheduler as S
from sopt.utils.validation import check_float32

TINY = float(np.finfo(np.float32).tiny)
BIG = float(np.finfo(np.float32).max)
RANGE = "allowed: 0 or 1.1754944e-38 <= |{key}| <= 3.4028235e+38"


def _params(n: int = 2) -> list[sopt.Parameter]:
    return [sopt.Parameter(np.full(3, float(i + 1)), name=f"p{i}") for i in range(n)]


def _refused(key: str, stored: str, owner: str = "") -> str:
    """The regex of the one-line refusal of ``owner``'s ``key`` whose value float32 stores as ``stored``."""
    prefix = re.escape(f"{owner} {key}" if owner else key)
    shown = key if re.fullmatch(r"[\w.\[\]]+", key) else "value"
    return rf"{prefix} = \S+: float32 stores it as {stored}.*; {re.escape(RANGE.format(key=shown))}$"


@pytest.mark.parametrize("value, stored", [(1e-50, "0 \\(subnormal or zero\\)"), (1e-40, "the subnormal 9.99"),
                                           (1e39, "inf"), (3.5e38, "inf"), (-1e-45, "the subnormal -1.4")])
def test_check_float32_names_the_key_what_float32_makes_of_it_and_the_range(value, stored):
    with pytest.raises(ValueError, match="^" + _refused("lr", stored, "Adam")):
        check_float32(value, "lr", owner="Adam")


@pytest.mark.parametrize("value", [0.0, -0.0, TINY, -TINY, BIG, 1e-3, 3.4028235e38, 1.1754943e-38])
def test_zero_and_what_float32_stores_as_a_normal_number_pass(value):
    # 1.1754943e-38 is below tiny in double precision but rounds to tiny in float32
    assert check_float32(value, "lr") == value


CONSTRUCTOR_CASES = [
    (Adam, {"lr": 1e-50}, "lr", "0"),
    (Adam, {"lr": 1e39}, "lr", "inf"),
    (Adam, {"eps": 1e-50}, "eps", "0"),
    (Adam, {"betas": (1e-40, 0.999)}, "betas[0]", "the subnormal"),
    (AdamW, {"weight_decay": 1e-45}, "weight_decay", "the subnormal"),
    (SGD, {"lr": 0.1, "momentum": 1e-40}, "momentum", "the subnormal"),
    (SGD, {"lr": 0.1, "dampening": 1e39}, "dampening", "inf"),
    (RMSprop, {"alpha": 1e-45}, "alpha", "the subnormal"),
    (Adagrad, {"lr_decay": 1e-50}, "lr_decay", "0"),
    (Adagrad, {"initial_accumulator_value": 1e39}, "initial_accumulator_value", "inf"),
]


@pytest.mark.parametrize("cls, kwargs, key, stored", CONSTRUCTOR_CASES,
                         ids=[f"{c[0].__name__}-{c[2]}" for c in CONSTRUCTOR_CASES])
def test_constructors_refuse_what_float32_cannot_hold(cls, kwargs, key, stored):
    with pytest.raises(ValueError, match="^" + _refused(key, stored, cls.__name__)):
        cls(_params(), **kwargs)


def test_param_groups_and_max_grad_norm_are_checked_and_zero_stays_allowed():
    a, b = _params()
    with pytest.raises(ValueError, match="^" + _refused("lr", "0", "Adam")):
        Adam([{"params": [a]}, {"params": [b], "lr": 1e-50}], lr=0.01)
    with pytest.raises(ValueError, match="^" + _refused("max_grad_norm", "0")):
        SGD([a, b], lr=0.01, max_grad_norm=1e-50)
    opt = Adam([{"params": [a]}], lr=0.01)
    with pytest.raises(ValueError, match="^" + _refused("eps", "inf", "Adam")):
        opt.add_param_group_config({"params": [b], "eps": 1e39})
    assert len(opt.param_groups) == 1
    # 0, where it was allowed, and the extremes of float32's normal range pass
    SGD(_params(), lr=0.0, momentum=0.0, weight_decay=0.0)
    Adam(_params(), lr=TINY, betas=(0.0, 0.0), eps=0.0, weight_decay=0.0)
    Adagrad(_params(), lr_decay=0.0, initial_accumulator_value=0.0, eps=BIG)


def test_load_state_dict_refuses_a_huge_lr_and_changes_nothing():
    params = _params()
    opt = Adam(params, lr=0.01)
    for p in params:
        p.set_grad(np.ones(3))
    opt.step()
    before = opt.state_dict()
    for edit, key, stored in [(lambda s: s["param_groups"][0].update(lr=1e39), "lr", "inf"),
                              (lambda s: s["param_groups"][0].update(betas=[0.9, 1e-45]), "betas[1]", "the subnormal"),
                              (lambda s: s.update(max_grad_norm=1e-50), "max_grad_norm", "0")]:
        bad = copy.deepcopy(before)
        edit(bad)
        with pytest.raises(ValueError, match=_refused(key, stored)):
            opt.load_state_dict(bad)
        after = opt.state_dict()
        assert after["param_groups"] == before["param_groups"] and after["max_grad_norm"] is None
        for i, state in before["state"].items():
            assert all(np.array_equal(after["state"][i][k], v) for k, v in state.items())


def test_sopt_load_of_a_checkpoint_with_lr_1e39_is_a_checkpoint_error(tmp_path):
    saved = Adam(_params(), lr=0.01)
    saved.param_groups[0]["lr"] = 1e39   # an edit after construction is saved as it is
    path = tmp_path / "huge_lr.ckpt"
    sopt.save(path, optimizer=saved)
    fresh = Adam(_params(), lr=0.01)
    with pytest.raises(CheckpointError, match=r"lr = 1e\+39: float32 stores it as inf"):
        sopt.load(path, optimizer=fresh)
    assert fresh.param_groups[0]["lr"] == 0.01


SCHEDULE_CASES = [
    (lambda o: S.CosineAnnealingLR(o, T_max=10, eta_min=1e-50), "CosineAnnealingLR", "eta_min", "0"),
    (lambda o: S.WarmupCosineLR(o, warmup_steps=2, total_steps=10, eta_min=1e-40), "WarmupCosineLR", "eta_min",
     "the subnormal"),
    (lambda o: S.ExponentialLR(o, gamma=1e-50), "ExponentialLR", "gamma", "0"),
    (lambda o: S.ConstantLR(o, factor=1e-30), "ConstantLR", "base_lrs[0] * factor", "the subnormal"),
    (lambda o: S.LinearLR(o, start_factor=0.5, end_factor=1e-35), "LinearLR", "base_lrs[0] * end_factor",
     "the subnormal"),
    (lambda o: S.OneCycleLR(o, max_lr=1e-36, total_steps=10), "OneCycleLR",
     "min_lr[0] (initial_lr / final_div_factor)", "the subnormal"),
    (lambda o: S.ReduceLROnPlateau(o, min_lr=1e-45), "", "min_lr", "the subnormal"),
    (lambda o: S.ReduceLROnPlateau(o, factor=1e-50), "", "factor", "0"),
]


@pytest.mark.parametrize("make, owner, key, stored", SCHEDULE_CASES, ids=[f"{c[1]}-{c[2]}" for c in SCHEDULE_CASES])
def test_schedules_refuse_an_lr_float32_cannot_hold_and_leave_the_groups_alone(make, owner, key, stored):
    opt = SGD(_params(1), lr=1e-10, momentum=0.5)
    before = copy.deepcopy([{k: v for k, v in g.items() if k != "params"} for g in opt.param_groups])
    with pytest.raises(ValueError, match="^" + _refused(key, stored, owner)):
        make(opt)
    assert [{k: v for k, v in g.items() if k != "params"} for g in opt.param_groups] == before


def test_schedule_load_state_dict_refuses_eta_min_and_base_lrs_float32_cannot_hold():
    opt = SGD(_params(1), lr=0.1)
    sched = S.CosineAnnealingLR(opt, T_max=10)
    sched.step()
    state = sched.state_dict()
    for edit, key in [(lambda s: s.update(eta_min=1e-50), "eta_min"),
                      (lambda s: s.update(base_lrs=[1e39]), "state_dict's base_lrs[0]")]:
        bad = copy.deepcopy(state)
        edit(bad)
        with pytest.raises(ValueError, match="^" + _refused(key, "\\S+", "CosineAnnealingLR")):
            sched.load_state_dict(bad)
        assert sched.state_dict() == state and opt.param_groups[0]["lr"] == state["last_lr"][0]


class _Nested(StrictModel):
    x: float = 1.0
    xs: list[float] = [1.0]
    table: dict[str, tuple[float, float]] = {}
    count: int = 3


def test_every_float_of_a_strict_model_must_be_a_normal_float32():
    for data, line in [
        ({"x": 1e-50}, "config x = 1e-50: float32 stores it as 0"),
        ({"x": -3.5e38}, "config x = -3.5e+38: float32 stores it as inf"),
        ({"xs": [1.0, 1e-40, 1e-50]}, "config xs = [1.0, 1e-40, 1e-50]: its element 1e-40: float32 stores it as the "
                                      "subnormal"),
        ({"table": {"a": (1.0, 1e39)}}, "config table = {\"a\": [1.0, 1e+39]}: its element 1e+39: float32 stores it "
                                        "as inf"),
    ]:
        with pytest.raises(ConfigError) as info:
            validate(_Nested, data)
        assert len(info.value.lines) == 1 and info.value.lines[0].startswith(line), info.value.lines
    # ints (not float32 values) are left alone; 0 and float32's normal extremes pass
    model = validate(_Nested, {"x": 0.0, "xs": [TINY, -BIG], "count": 10 ** 40})
    assert model.count == 10 ** 40


@pytest.mark.parametrize("family", ["optimizer", "schedule", "loss", "encoding", "simulator"])
def test_every_registered_float_key_refuses_1e_minus_50(family):
    """No float key of a registered component takes a value float32 stores as 0 (its own lower bound, or the
    float32 check, refuses it): the check sits on the base class, not on chosen fields."""
    checked = 0
    for otype in registry.otypes(family):
        config = registry.entry(family, otype).config
        for name, field in config.model_fields.items():
            if field.annotation not in (float, float | None):
                continue
            checked += 1
            with pytest.raises(ConfigError) as info:
                registry.as_config(family, {"otype": otype, name: 1e-50})
            assert f"config {family}.{name} = 1e-50: " in str(info.value), str(info.value)
    assert checked > 0
