"""Optimizer and LR-scheduler load_state_dict: the whole state is checked first, then applied all or nothing."""

import copy

import numpy as np
import pytest

import sopt
from sopt.optim import SGD, Adam
from sopt.optim import lr_scheduler as S


def _plain(value):
    """A state_dict with arrays as lists, for == comparisons."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, np.ndarray):
        return value.tolist()
    return value


def _adam(lr=0.05):
    params = [sopt.Parameter(np.linspace(-1, 1, 5), name="a"), sopt.Parameter(np.ones((2, 2)), name="b")]
    opt = Adam(params, lr=lr, amsgrad=True)
    for k in range(2):
        for p in params:
            p.set_grad(np.random.default_rng(k).standard_normal(p.shape))
        opt.step()
    return opt


def _edited(state, edit):
    state = copy.deepcopy(state)
    edit(state)
    return state


def _set_group(key, value):
    return lambda s: s["param_groups"][0].__setitem__(key, value)


BAD_OPTIMIZER_STATES = [
    ("lr NaN", _set_group("lr", float("nan")), r"lr must be finite"),
    ("eps negative", _set_group("eps", -1.0), r"eps must be in"),
    ("foreign key", _set_group("momentum", 0.9), r"\['momentum'\].*Adam does not have"),
    ("max_grad_norm -5", lambda s: s.update(max_grad_norm=-5), r"max_grad_norm must be in \(0.0, inf\)"),
    ("skip_nonfinite str", lambda s: s.update(skip_nonfinite="yes"), r"skip_nonfinite must be True or False"),
    ("step negative", lambda s: s.update(step=-1), r"step must be >= 0"),
    ("skipped float", lambda s: s.update(skipped_steps=1.5), r"skipped_steps must be an integer"),
    ("state shape", lambda s: s["state"][1].update(exp_avg=np.zeros(3)), r"exp_avg.*parameter 1.*shape \(3,\)"),
    ("state NaN", lambda s: s["state"][0].update(exp_avg_sq=np.full(5, np.nan)), r"exp_avg_sq.*non-finite"),
    ("unknown state", lambda s: s["state"][0].update(momentum_buffer=np.zeros(5)), r"momentum_buffer"),
    ("state index", lambda s: s["state"].update({7: {}}), r"entry 7"),
    ("group size", lambda s: s["param_groups"][0].update(params=[0]), r"1 parameters in the state_dict, 2 here"),
]


@pytest.mark.parametrize("edit,match", [c[1:] for c in BAD_OPTIMIZER_STATES], ids=[c[0] for c in BAD_OPTIMIZER_STATES])
def test_optimizer_load_state_dict_checks_everything_before_changing_anything(edit, match):
    saved = _adam(lr=0.01).state_dict()
    # a bad field in the last position checked must not leave the good ones (lr here) applied
    bad = _edited(saved, lambda s: (s["param_groups"][0].update(lr=0.5), edit(s)))
    opt = _adam()
    before = _plain(opt.state_dict())
    with pytest.raises(ValueError, match=match):
        opt.load_state_dict(bad)
    assert _plain(opt.state_dict()) == before
    assert opt.param_groups[0]["lr"] == 0.05


def test_optimizer_load_state_dict_rejects_other_optimizers_and_non_dicts():
    sgd = SGD([sopt.Parameter(np.zeros(5), name="a"), sopt.Parameter(np.zeros((2, 2)), name="b")], lr=0.1,
              momentum=0.9, nesterov=True)
    opt = _adam()
    before = _plain(opt.state_dict())
    with pytest.raises(ValueError, match=r"saved from a 'SGD' optimizer, cannot load it into a Adam"):
        opt.load_state_dict(sgd.state_dict())
    # without the type (older state_dicts) the keys must fit: SGD's are named
    untyped = {k: v for k, v in sgd.state_dict().items() if k != "type"}
    with pytest.raises(ValueError, match=r"\['dampening', 'momentum', 'nesterov'\].*Adam does not have"):
        opt.load_state_dict(untyped)
    for bad in (None, [1, 2], "state"):
        with pytest.raises(ValueError, match="expects a dict"):
            opt.load_state_dict(bad)
    assert _plain(opt.state_dict()) == before


def test_optimizer_round_trip_still_works_with_and_without_type_and_with_schedule_keys():
    opt = _adam(lr=0.01)
    S.OneCycleLR(opt, max_lr=0.1, total_steps=10)   # puts max_lr, min_lr, momenta into the group
    saved = opt.state_dict()
    assert saved["type"] == "Adam"
    assert {"max_lr", "min_lr", "max_momentum", "base_momentum", "initial_lr"} <= set(saved["param_groups"][0])
    for state in (saved, {k: v for k, v in saved.items() if k != "type"}):
        fresh = _adam()
        fresh.load_state_dict(state)
        assert _plain(fresh.state_dict()) == _plain(saved)


def test_schedule_group_keys_cover_every_key_a_scheduler_puts_into_groups():
    from sopt.optim.optimizer import SCHEDULE_GROUP_KEYS
    opt = _adam()
    defaults = set(opt.param_groups[0])
    S.OneCycleLR(opt, max_lr=0.1, total_steps=10)
    assert set(opt.param_groups[0]) - defaults <= SCHEDULE_GROUP_KEYS


# -- schedulers -------------------------------------------------------------------------------------------------
def _sgd():
    return SGD([{"params": [sopt.Parameter(np.zeros(2))], "lr": lr} for lr in (0.1, 0.2)], lr=0.1, momentum=0.9)


def _stepped(scheduler, n=3):
    for _ in range(n):
        scheduler.step()
    return scheduler


def _set(key, value):
    return lambda s: s.__setitem__(key, value)


BAD_SCHEDULER_STATES = [
    ("StepLR gamma", lambda o: S.StepLR(o, 2, gamma=0.5), _set("gamma", -1.0), r"gamma"),
    ("StepLR step_size", lambda o: S.StepLR(o, 2), _set("step_size", 0), r"step_size must be >= 1"),
    ("StepLR last_epoch", lambda o: S.StepLR(o, 2), _set("last_epoch", 2.5), r"last_epoch must be an integer"),
    ("StepLR base_lrs", lambda o: S.StepLR(o, 2), _set("base_lrs", [0.1, float("nan")]), r"base_lrs\[1\]"),
    ("StepLR last_lr bool", lambda o: S.StepLR(o, 2), _set("last_lr", [True, 0.1]), r"last_lr\[0\] must be a number"),
    ("MultiStepLR milestones", lambda o: S.MultiStepLR(o, [2, 4]), _set("milestones", [4, 2]), r"milestones"),
    ("ConstantLR factor", lambda o: S.ConstantLR(o), _set("factor", 2.0), r"factor must be in"),
    ("LinearLR total_iters", lambda o: S.LinearLR(o), _set("total_iters", "5"), r"total_iters must be an integer"),
    ("CosineAnnealingLR T_max", lambda o: S.CosineAnnealingLR(o, 10), _set("T_max", -3), r"T_max"),
    ("ExponentialLR gamma", lambda o: S.ExponentialLR(o, 0.9), _set("gamma", float("inf")), r"gamma"),
    ("WarmupCosineLR warmup", lambda o: S.WarmupCosineLR(o, 2, 10), _set("warmup_steps", 10), r"warmup_steps"),
    ("OneCycleLR phases", lambda o: S.OneCycleLR(o, 0.5, total_steps=20), _set("phases", [{"end_step": 1}]),
     r"phases"),
    ("OneCycleLR strategy", lambda o: S.OneCycleLR(o, 0.5, total_steps=20), _set("anneal_strategy", "cubic"),
     r"anneal_strategy"),
    ("OneCycleLR beta1 on SGD", lambda o: S.OneCycleLR(o, 0.5, total_steps=20), _set("use_beta1", True),
     r"cycles betas\[0\], which SGD does not have"),
    ("Plateau factor", lambda o: S.ReduceLROnPlateau(o), _set("factor", 2.0), r"factor must be in"),
    ("Plateau counter", lambda o: S.ReduceLROnPlateau(o), _set("num_bad_epochs", -1), r"num_bad_epochs"),
    ("Plateau best", lambda o: S.ReduceLROnPlateau(o), _set("best", "low"), r"best must be a number"),
    ("Sequential child", lambda o: S.SequentialLR(o, [S.StepLR(o, 2), S.ExponentialLR(o, 0.9)], [2]),
     lambda s: s["schedulers"][1].update(step_count=-1), r"schedulers\[1\].*step_count must be >= 0"),
    ("Sequential milestones", lambda o: S.SequentialLR(o, [S.StepLR(o, 2), S.ExponentialLR(o, 0.9)], [2]),
     _set("milestones", [2, 3]), r"one fewer"),
    ("Chained child", lambda o: S.ChainedScheduler([S.StepLR(o, 2), S.ExponentialLR(o, 0.9)]),
     lambda s: s["schedulers"][1].update(gamma=0.0), r"schedulers\[1\].*gamma"),
]


def _step(scheduler):
    if isinstance(scheduler, S.ReduceLROnPlateau):
        scheduler.step(1.0)
    else:
        scheduler.step()


@pytest.mark.parametrize("build,edit,match", [c[1:] for c in BAD_SCHEDULER_STATES],
                         ids=[c[0] for c in BAD_SCHEDULER_STATES])
def test_scheduler_load_state_dict_checks_everything_before_changing_anything(build, edit, match):
    source = build(_sgd())
    for _ in range(3):
        _step(source)
    bad = _edited(source.state_dict(), edit)
    opt = _sgd()
    target = build(opt)
    _step(target)
    before, groups = target.state_dict(), copy.deepcopy([{k: v for k, v in g.items() if k != "params"}
                                                         for g in opt.param_groups])
    with pytest.raises(ValueError, match=match):
        target.load_state_dict(bad)
    assert target.state_dict() == before
    assert [{k: v for k, v in g.items() if k != "params"} for g in opt.param_groups] == groups
    target.load_state_dict(source.state_dict())   # the unedited state loads
    assert target.state_dict() == source.state_dict()


def test_every_saved_scheduler_attribute_is_checked_on_load():
    for cls in (S.ConstantLR, S.StepLR, S.MultiStepLR, S.ExponentialLR, S.CosineAnnealingLR, S.LinearLR,
                S.WarmupCosineLR, S.OneCycleLR):
        assert set(cls._state_checks) == set(cls._state_attrs), cls.__name__
