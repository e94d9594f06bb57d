"""Adam's ``lazy`` option (torch.optim.SparseAdam's rule): elements whose gradient is exactly 0 keep their value
and moments, against the float64 reference, in every way a step can check its gradients, per param group, and
through state_dict and config round trips."""

from __future__ import annotations

import numpy as np
import pytest

import sopt
from sopt.config.registry import build
from sopt.optim import Adam, AdamW
from tests.optim.reference import ReferenceOptimizer
from tests.optim.test_optimizers import assert_close

# (4, 3) is three whole float4 vectors, (5,) one and a padded one; group 0 (lazy) holds the first two
SHAPES = [(4, 3), (5,), (6,)]
STEPS = 7
NAN_STEP = 4   # a NaN in a float4 whose other gradients are 0: the whole step is skipped where checked
# how a step checks its gradients: double-buffered check, scan + in place, none, clipping double-buffered
# (grad_stats then the checked update) and clipping in place (grad_stats skips, the update runs in place)
CHECKS = {"double": {}, "scan": {"double_buffer": False}, "nocheck": {"skip_nonfinite": False},
          "clip-double": {"max_grad_norm": 1.0}, "clip-inplace": {"max_grad_norm": 1.0, "skip_nonfinite": False}}
STATE_NAMES = {"m": "exp_avg", "v": "exp_avg_sq", "vmax": "max_exp_avg_sq"}


def _gradients(seed: int, with_nan: bool) -> list[list[np.ndarray]]:
    """Random gradients, about half of them 0 on each step (so float4 vectors mix zero and nonzero components), the
    whole of parameter 0's second vector 0 on step 1 and all of parameter 0 on step 2; a NaN on NAN_STEP; zero
    and nonzero gradients in each of parameters 0 and 1 on the last step."""
    rng = np.random.default_rng(seed)
    steps = []
    for k in range(STEPS):
        grads = [rng.standard_normal(s) * (rng.uniform(size=s) < 0.5) for s in SHAPES]
        if k == 1:
            grads[0].flat[4:8] = 0.0
        if k == 2:
            grads[0][:] = 0.0
        if k == STEPS - 1:   # both kinds of element in each lazy parameter on the last step
            grads[0].flat[:2] = [0.0, 0.7]
            grads[1].flat[:2] = [-0.4, 0.0]
        if k == NAN_STEP and with_nan:
            grads[0].flat[8:12] = [0.0, np.nan, 0.0, 0.0]
        steps.append([g.astype(np.float32) for g in grads])
    return steps


def _clipped(grads: list[np.ndarray], max_norm: float | None) -> list[np.ndarray]:
    """torch.nn.utils.clip_grad_norm_ over every parameter (both groups), in float64."""
    grads = [np.asarray(g, np.float64) for g in grads]
    if max_norm is None:
        return grads
    coef = min(max_norm / (np.sqrt(sum((g**2).sum() for g in grads)) + 1e-6), 1.0)
    return [g * coef for g in grads]


@pytest.mark.filterwarnings(r"ignore:.*step\(s\) skipped:RuntimeWarning")
@pytest.mark.parametrize("check", list(CHECKS))
@pytest.mark.parametrize("cls,kwargs", [(Adam, dict(lr=0.05, weight_decay=0.1, amsgrad=True)),
                                        (AdamW, dict(lr=0.05, weight_decay=0.3))], ids=["adam", "adamw"])
def test_lazy_group_matches_the_float64_reference(cls, kwargs, check):
    """Group 0 lazy, group 1 not, the same gradients zero here and there: values and moments of each follow the
    reference's rule; an element whose gradient is 0 on the last step keeps its value and moments bit for bit."""
    options = CHECKS[check]
    skips = options.get("skip_nonfinite", True) or "max_grad_norm" in options   # grad_stats skips NaN steps
    grads = _gradients(seed=3, with_nan=skips)
    init = [np.random.default_rng(i).standard_normal(s).astype(np.float32) for i, s in enumerate(SHAPES)]
    params = [sopt.Parameter(a, name=f"p{i}") for i, a in enumerate(init)]
    opt = cls([{"params": params[:2], "lazy": True}, {"params": params[2:]}], **kwargs, poll_every=0, **options)
    kind = cls.__name__.lower()
    refs = [ReferenceOptimizer(kind, init[:2], lazy=True, **kwargs), ReferenceOptimizer(kind, init[2:], **kwargs)]
    dense = ReferenceOptimizer(kind, init[:2], **kwargs)   # what group 0 would be without lazy
    for k, step_grads in enumerate(grads):
        if k == STEPS - 1:
            before_values, before_state = [p.numpy() for p in params], opt.state_dict()["state"]
        for p, g in zip(params, step_grads):
            p.set_grad(g)
        opt.step()
        if all(np.isfinite(g).all() for g in step_grads):   # a NaN anywhere skips the step of both groups
            clipped = _clipped(step_grads, options.get("max_grad_norm"))
            for ref, part in ((refs[0], clipped[:2]), (refs[1], clipped[2:]), (dense, clipped[:2])):
                ref.step(part)
    assert opt.step_count == refs[0].t == STEPS - (1 if skips else 0)
    state = opt.state_dict()["state"]
    ref_params = refs[0].params + refs[1].params
    ref_states = refs[0].state + refs[1].state
    for i, p in enumerate(params):
        assert_close(p.numpy(), ref_params[i], what=f"{check} {p.name}", scale=init[i])
        for short, name in STATE_NAMES.items():
            if short in ref_states[i]:
                assert_close(state[i][name], ref_states[i][short], what=f"{check} {name} of {p.name}")
        np.testing.assert_array_equal(p.grad_numpy(), np.zeros(p.shape))   # the NaN was cleared too
    # lazy made a difference the check above would see: the dense rule ends elsewhere
    for lazy_p, dense_p in zip(refs[0].params, dense.params):
        assert np.abs(lazy_p - dense_p).max() > 1e-3
    # exactly untouched where the last gradient was 0 (and moved where it was not)
    for i in range(2):
        zero = grads[-1][i] == 0
        assert zero.any() and (~zero).any()
        np.testing.assert_array_equal(params[i].numpy()[zero], before_values[i][zero])
        assert (params[i].numpy()[~zero] != before_values[i][~zero]).all()
        for name in state[i]:
            if name != "step":
                np.testing.assert_array_equal(state[i][name][zero], before_state[i][name][zero])


def _run(opt: Adam, params: list[sopt.Parameter], grads: list[list[np.ndarray]]) -> None:
    for step_grads in grads:
        for p, g in zip(params, step_grads):
            p.set_grad(g)
        opt.step()


def test_lazy_round_trips_through_state_dict_and_old_state_dicts_load():
    grads = _gradients(seed=5, with_nan=False)
    made = [[sopt.Parameter(np.ones(s), name=f"p{i}") for i, s in enumerate(SHAPES)] for _ in range(2)]
    a = Adam([{"params": made[0][:2], "lazy": True}, {"params": made[0][2:]}], lr=0.05, double_buffer=False)
    b = Adam([{"params": made[1][:2]}, {"params": made[1][2:]}], lr=0.05, double_buffer=False)
    _run(a, made[0], grads[:3])
    saved = a.state_dict()
    assert [g["lazy"] for g in saved["param_groups"]] == [True, False]
    b.load_state_dict(saved)
    assert [g["lazy"] for g in b.param_groups] == [True, False]
    for p, q in zip(made[0], made[1]):
        q.load(p.numpy())
    _run(a, made[0], grads[3:])
    _run(b, made[1], grads[3:])
    for p, q in zip(made[0], made[1]):
        np.testing.assert_array_equal(p.numpy(), q.numpy())
    # a state_dict saved before lazy existed has no such key: the groups keep their own setting
    for group in saved["param_groups"]:
        del group["lazy"]
    c = Adam([{"params": [sopt.Parameter(np.ones(s)) for s in SHAPES[:2]], "lazy": True},
              {"params": [sopt.Parameter(np.ones(SHAPES[2]))]}])
    c.load_state_dict(saved)
    assert [g["lazy"] for g in c.param_groups] == [True, False]
    saved["param_groups"][0]["lazy"] = "yes"
    with pytest.raises(ValueError, match="param group 0 of the state_dict: lazy must be True or False"):
        c.load_state_dict(saved)


@pytest.mark.parametrize("otype", ["Adam", "AdamW"])
def test_lazy_is_a_config_key(otype):
    params = [sopt.Parameter(np.ones(4), name="w")]
    opt = build("optimizer", {"otype": otype, "learning_rate": 0.01, "lazy": True}, params)
    assert opt.param_groups[0]["lazy"] is True
    assert opt.to_config().lazy is True
    assert build("optimizer", {"otype": otype}, [sopt.Parameter(np.ones(4))]).param_groups[0]["lazy"] is False
    mixed = type(opt)([{"params": [sopt.Parameter(np.ones(4))], "lazy": True},
                       {"params": [sopt.Parameter(np.ones(2))]}])
    with pytest.raises(ValueError, match=r"param group 1 differs from group 0 in \['lazy'\]"):
        mixed.to_config()
