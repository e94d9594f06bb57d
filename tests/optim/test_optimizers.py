"""Every optimiser and option against float64 numpy implementations of torch's equations (and torch.optim
itself where torch is importable), over 100 steps of random gradients and several parameter shapes."""

from __future__ import annotations

import numpy as np
import pytest

import sopt
from sopt.runtime.kernel import Kernel
from sopt.optim import SGD, Adagrad, Adam, AdamW, RMSprop
from tests.optim.reference import ReferenceOptimizer

SHAPES = [(7,), (3, 5), (2, 3, 4), (1,), (33,)]
STEPS = 100
RTOL = 1e-5

CONFIGS = [
    ("sgd", SGD, dict(lr=0.05)),
    ("sgd", SGD, dict(lr=0.02, momentum=0.9)),
    ("sgd", SGD, dict(lr=0.02, momentum=0.8, dampening=0.3, weight_decay=0.01)),
    ("sgd", SGD, dict(lr=0.02, momentum=0.9, nesterov=True, maximize=True)),
    ("adam", Adam, dict(lr=0.01)),
    ("adam", Adam, dict(lr=0.01, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1)),
    ("adam", Adam, dict(lr=0.01, amsgrad=True)),
    ("adam", Adam, dict(lr=0.01, maximize=True, betas=(0.0, 0.9))),
    ("adamw", AdamW, dict(lr=0.01)),
    ("adamw", AdamW, dict(lr=0.01, weight_decay=0.1, amsgrad=True)),
    ("rmsprop", RMSprop, dict(lr=0.005)),
    ("rmsprop", RMSprop, dict(lr=0.005, centered=True, weight_decay=0.05)),
    ("rmsprop", RMSprop, dict(lr=0.002, momentum=0.9, alpha=0.9)),
    ("rmsprop", RMSprop, dict(lr=0.002, momentum=0.5, centered=True, maximize=True)),
    ("adagrad", Adagrad, dict(lr=0.05)),
    ("adagrad", Adagrad, dict(lr=0.05, lr_decay=0.01, initial_accumulator_value=0.1, weight_decay=0.02)),
]


def _ids(config):
    kind, _, kw = config
    return kind + "-" + "-".join(f"{k}={v}" for k, v in kw.items())


def _random_run(seed: int):
    rng = np.random.default_rng(seed)
    init = [rng.standard_normal(s).astype(np.float32) for s in SHAPES]
    grads = [[(rng.standard_normal(s) * rng.uniform(0.1, 3.0)).astype(np.float32) for s in SHAPES]
             for _ in range(STEPS)]
    return init, grads


def _run_sopt(cls, kwargs, init, grads, **options):
    params = [sopt.Parameter(a, name=f"p{i}") for i, a in enumerate(init)]
    opt = cls(params, **kwargs, **options)
    for step_grads in grads:
        for p, g in zip(params, step_grads):
            p.set_grad(g)
        opt.step()
    return params, opt


def assert_close(actual, expected, rtol=RTOL, what="", scale=None):
    """|actual - expected| <= rtol * (|expected| + s), s the rms of the values the parameter took (its start
    ``scale`` and ``expected``): float32 rounding near the start stays behind when an element passes zero."""
    actual, expected = np.asarray(actual, np.float64), np.asarray(expected, np.float64)
    floor = rtol * max(np.sqrt(np.mean(expected**2)), 0.0 if scale is None else np.sqrt(np.mean(np.square(scale))))
    err = np.abs(actual - expected)
    bad = err > rtol * np.abs(expected) + floor
    assert not bad.any(), f"{what}: {bad.sum()} elements differ; worst {err.max():.3e} (rtol {rtol})"


# how the step checks gradients: double-buffered check (the default), the scan before an in-place update, none
CHECKS = {"double": {}, "scan": {"double_buffer": False}, "nocheck": {"skip_nonfinite": False}}


@pytest.mark.parametrize("check", list(CHECKS))
@pytest.mark.parametrize("config", CONFIGS, ids=[_ids(c) for c in CONFIGS])
def test_matches_float64_reference(config, check):
    kind, cls, kwargs = config
    init, grads = _random_run(seed=len(_ids(config)))
    params, opt = _run_sopt(cls, kwargs, init, grads, **CHECKS[check])
    ref = ReferenceOptimizer(kind, init, **kwargs)
    for g in grads:
        ref.step(g)
    for p, expected in zip(params, ref.params):
        assert_close(p.numpy(), expected, what=f"{_ids(config)} {p.name}", scale=init[int(p.name[1:])])
        assert not np.array_equal(p.numpy(), init[int(p.name[1:])])
    assert opt.step_count == STEPS


@pytest.mark.parametrize("config", [CONFIGS[2], CONFIGS[6], CONFIGS[11], CONFIGS[15], CONFIGS[9]],
                         ids=[_ids(c) for c in [CONFIGS[2], CONFIGS[6], CONFIGS[11], CONFIGS[15], CONFIGS[9]]])
def test_matches_torch_optim(config):
    torch = pytest.importorskip("torch", reason="torch is not installed: comparison with torch.optim skipped")
    kind, cls, kwargs = config
    init, grads = _random_run(seed=7)
    params, _ = _run_sopt(cls, kwargs, init, grads)
    torch_cls = {"sgd": torch.optim.SGD, "adam": torch.optim.Adam, "adamw": torch.optim.AdamW,
                 "rmsprop": torch.optim.RMSprop, "adagrad": torch.optim.Adagrad}[kind]
    tparams = [torch.tensor(a, requires_grad=True) for a in init]
    topt = torch_cls(tparams, foreach=False, **kwargs)
    for step_grads in grads:
        for tp, g in zip(tparams, step_grads):
            tp.grad = torch.tensor(g)
        topt.step()
    for p, tp in zip(params, tparams):
        assert_close(p.numpy(), tp.detach().numpy(), what=f"torch {_ids(config)} {p.name}",
                     scale=init[int(p.name[1:])])


@pytest.mark.parametrize("max_norm", [0.5, 1e3])
def test_clipping_matches_clip_grad_norm(max_norm):
    init, grads = _random_run(seed=3)
    params, _ = _run_sopt(Adam, dict(lr=0.01), init, grads, max_grad_norm=max_norm)
    ref = ReferenceOptimizer("adam", init, max_grad_norm=max_norm, lr=0.01)
    for g in grads:
        ref.step(g)
    for p, a, expected in zip(params, init, ref.params):
        assert_close(p.numpy(), expected, what=f"clip {max_norm}", scale=a)
    # the clipped run differs from the unclipped one when the norm exceeds max_norm
    unclipped = ReferenceOptimizer("adam", init, lr=0.01)
    for g in grads:
        unclipped.step(g)
    differs = any(not np.allclose(a, b, rtol=1e-4) for a, b in zip(ref.params, unclipped.params))
    assert differs == (max_norm < 1.0)


def test_clipping_against_torch():
    torch = pytest.importorskip("torch", reason="torch is not installed: comparison with torch clip_grad_norm_ skipped")
    init, grads = _random_run(seed=5)
    params, _ = _run_sopt(SGD, dict(lr=0.1, momentum=0.9), init, grads, max_grad_norm=1.0)
    tparams = [torch.tensor(a, requires_grad=True) for a in init]
    topt = torch.optim.SGD(tparams, lr=0.1, momentum=0.9, foreach=False)
    for step_grads in grads:
        for tp, g in zip(tparams, step_grads):
            tp.grad = torch.tensor(g)
        torch.nn.utils.clip_grad_norm_(tparams, 1.0, foreach=False)
        topt.step()
    for p, a, tp in zip(params, init, tparams):
        assert_close(p.numpy(), tp.detach().numpy(), what="torch clip", scale=a)


def test_param_groups_have_their_own_hyperparameters():
    init, grads = _random_run(seed=11)
    params = [sopt.Parameter(a, name=f"p{i}") for i, a in enumerate(init)]
    opt = Adam([{"params": params[:2], "lr": 0.05, "betas": (0.5, 0.9)},
                {"params": params[2:], "weight_decay": 0.1}], lr=0.01)
    for step_grads in grads[:30]:
        for p, g in zip(params, step_grads):
            p.set_grad(g)
        opt.step()
    ref_a = ReferenceOptimizer("adam", init[:2], lr=0.05, betas=(0.5, 0.9))
    ref_b = ReferenceOptimizer("adam", init[2:], lr=0.01, weight_decay=0.1)
    for g in grads[:30]:
        ref_a.step(g[:2])
        ref_b.step(g[2:])
    for p, a, expected in zip(params, init, ref_a.params + ref_b.params):
        assert_close(p.numpy(), expected, what=f"group {p.name}", scale=a)


def test_lr_change_every_step_without_recompiling():
    init, grads = _random_run(seed=13)
    params = [sopt.Parameter(a) for a in init]
    opt = SGD(params, lr=0.1)
    ref = ReferenceOptimizer("sgd", init, lr=0.1)
    kernels = None
    for k, step_grads in enumerate(grads[:20]):
        lr = 0.1 / (1 + k)
        opt.param_groups[0]["lr"] = lr
        ref.h["lr"] = lr
        for p, g in zip(params, step_grads):
            p.set_grad(g)
        opt.step()
        ref.step(step_grads)
        used = {role: bound.kernel for (role, _, _), bound in opt._bound.items()}
        kernels = kernels or used
        assert used == kernels, f"step {k} used kernels {used}, step 0 used {kernels}"
    assert kernels == {"update": Kernel("optim/sgd", "sgd_step").load()}   # (its last group undoes a bad step)
    for p, a, expected in zip(params, init, ref.params):
        assert_close(p.numpy(), expected, what="lr schedule", scale=a)


@pytest.mark.parametrize("cls,kwargs,toggle", [
    (SGD, dict(lr=0.05), ("momentum", 0.9)),
    (Adam, dict(lr=0.01), ("amsgrad", True)),
    (RMSprop, dict(lr=0.005), ("centered", True)),
    (RMSprop, dict(lr=0.005), ("momentum", 0.5)),
])
def test_state_of_groups_without_the_feature_is_carried_across_sides(cls, kwargs, toggle):
    """Group 0 always uses a state slot, group 1 switches it on, off and on again. While off, its state must
    stay as it was: a double-buffered step writes the other side, so the kernel has to carry it over. The
    double-buffered run must equal the in-place one bit for bit."""
    name, value = toggle
    init, grads = _random_run(seed=17)
    grads[3] = [10 * g for g in grads[3]]   # the last step before "off": a running max would keep it
    off = {name: False if isinstance(value, bool) else 0.0}
    runs = []
    for options in ({}, {"skip_nonfinite": False}):
        params = [sopt.Parameter(a, name=f"p{i}") for i, a in enumerate(init)]
        opt = cls([{"params": params[:2], name: value}, {"params": params[2:], **off}], **kwargs, **options)
        for k, step_grads in enumerate(grads[:9]):
            opt.param_groups[1].update({name: value} if k in (2, 3, 7, 8) else off)
            for p, g in zip(params, step_grads):
                p.set_grad(g)
            opt.step()
        runs.append(([p.numpy() for p in params], opt.state_dict()["state"]))
    (double_params, double_state), (inplace_params, inplace_state) = runs
    for a, b in zip(double_params, inplace_params):
        np.testing.assert_array_equal(a, b)
    for i in inplace_state:
        for key, expected in inplace_state[i].items():
            np.testing.assert_array_equal(double_state[i][key], expected, err_msg=f"state {key} of parameter {i}")


# every hyperparameter of every optimiser, with values of the wrong type: (class, argument, kind)
_NUMBERS = {SGD: ("lr", "momentum", "dampening", "weight_decay"),
            Adam: ("lr", "eps", "weight_decay"), AdamW: ("lr", "eps", "weight_decay"),
            RMSprop: ("lr", "alpha", "eps", "weight_decay", "momentum"),
            Adagrad: ("lr", "lr_decay", "weight_decay", "initial_accumulator_value", "eps")}
_FLAGS = {SGD: ("nesterov", "maximize"), Adam: ("amsgrad", "maximize", "lazy"), AdamW: ("amsgrad", "maximize", "lazy"),
          RMSprop: ("centered", "maximize"), Adagrad: ("maximize",)}
_OPTIONS = [("max_grad_norm", "1.0"), ("max_grad_norm", True), ("skip_nonfinite", 1), ("skip_nonfinite", "no"),
            ("double_buffer", 1.0), ("poll_every", -1), ("poll_every", "64"), ("poll_every", True),
            ("poll_every", 8.0)]
_WRONG_TYPES = ([(cls, name, value) for cls, names in _NUMBERS.items() for name in names for value in ("0.01", True)]
                + [(cls, name, value) for cls, names in _FLAGS.items() for name in names for value in (1.0, "yes", 1)]
                + [(cls, "betas", value) for cls in (Adam, AdamW) for value in (("0.9", 0.99), (0.9, True), 0.9, "ab")]
                + [(cls, name, value) for cls in _NUMBERS for name, value in _OPTIONS])


@pytest.mark.parametrize("cls,name,value", _WRONG_TYPES,
                         ids=[f"{c.__name__}-{n}-{v!r}" for c, n, v in _WRONG_TYPES])
def test_hyperparameters_of_the_wrong_type_are_rejected(cls, name, value):
    p = sopt.Parameter(np.ones(3), name="w")
    with pytest.raises(ValueError, match=rf"^{name}(\[\d\])? must be"):
        cls([p], **{name: value})
    # the same through a param group dict (options are not per group)
    if name not in dict(_OPTIONS):
        with pytest.raises(ValueError, match=rf"^{name}(\[\d\])? must be"):
            cls([{"params": [p], name: value}])


def test_hyperparameters_are_stored_as_python_numbers():
    p = sopt.Parameter(np.ones(3), name="w")
    opt = Adam([p], lr=np.float32(0.5), betas=[np.float64(0.8), 0.9], eps=1, amsgrad=np.bool_(True))
    g = opt.param_groups[0]
    assert type(g["lr"]) is float and g["lr"] == 0.5
    assert g["betas"] == (0.8, 0.9) and type(g["eps"]) is float and g["amsgrad"] is True


def test_a_rejected_param_group_leaves_the_optimizer_and_the_dict_unchanged():
    p, q = sopt.Parameter(np.ones(3), name="w"), sopt.Parameter(np.ones(2), name="v")
    opt = SGD([p], lr=0.1)
    bad = {"params": [q], "lr": 0.2, "momentum": "0.9"}
    with pytest.raises(ValueError, match="momentum must be a number, got '0.9'"):
        opt.add_param_group_config(bad)
    assert len(opt.param_groups) == 1 and opt.param_groups[0]["lr"] == 0.1
    assert bad == {"params": [q], "lr": 0.2, "momentum": "0.9"}
