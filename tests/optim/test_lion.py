"""Lion (sopt/optim/lion.py + slang_lib/optim/lion.slang, one registration) against a float64 numpy reference of
the published update (Chen et al. 2023 with lion-pytorch's decoupled weight decay), its state_dict, its config
through the registry, its constructor's checks and the learning-rate schedulers."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

import sopt
from sopt.config import registry
from sopt.optim import Lion, LionConfig
from sopt.optim import lr_scheduler as S
from tests.optim.reference import ReferenceOptimizer
from tests.optim.test_optimizers import CHECKS, assert_close

SHAPES = [(7,), (3, 5), (33,), (2, 3, 4)]
GROUPS = [dict(lr=0.01, betas=(0.9, 0.99), weight_decay=0.1), dict(lr=0.003, betas=(0.5, 0.9), weight_decay=0.0)]


def _gradients(steps: int, seed: int = 0) -> tuple[list[np.ndarray], list[list[np.ndarray]]]:
    rng = np.random.default_rng(seed)
    init = [rng.standard_normal(s).astype(np.float32) for s in SHAPES]
    grads = [[(rng.standard_normal(s) * rng.uniform(0.1, 3.0)).astype(np.float32) for s in SHAPES]
             for _ in range(steps)]
    return init, grads


def _reference(init, grads, groups, max_grad_norm=None, lrs=None):
    """Two float64 references, one per group (params [0, 2) and [2, 4)), clipped by the global norm."""
    refs = [ReferenceOptimizer("lion", init[:2], **groups[0]), ReferenceOptimizer("lion", init[2:], **groups[1])]
    for t, step_grads in enumerate(grads):
        g64 = [np.asarray(g, np.float64) for g in step_grads]
        if max_grad_norm is not None:
            norm = np.sqrt(sum((g**2).sum() for g in g64))
            g64 = [g * min(max_grad_norm / (norm + 1e-6), 1.0) for g in g64]
        for ref in refs:
            if lrs is not None:
                ref.h["lr"] = lrs[t]
        refs[0].step(g64[:2])
        refs[1].step(g64[2:])
    return refs[0].params + refs[1].params, refs[0].state + refs[1].state


def _lion(init, groups, **options) -> tuple[list[sopt.Parameter], Lion]:
    params = [sopt.Parameter(a, name=f"p{i}") for i, a in enumerate(init)]
    return params, Lion([{"params": params[:2], **groups[0]}, {"params": params[2:], **groups[1]}], **options)


def _run(params, opt, grads, scheduler=None):
    for step_grads in grads:
        for p, g in zip(params, step_grads):
            p.set_grad(g)
        opt.step()
        if scheduler is not None:
            scheduler.step()


@pytest.mark.parametrize("check", list(CHECKS))
@pytest.mark.parametrize("max_grad_norm", [None, 2.0])
def test_lion_matches_the_float64_reference_with_groups_weight_decay_and_clipping(check, max_grad_norm):
    init, grads = _gradients(25)
    params, opt = _lion(init, GROUPS, max_grad_norm=max_grad_norm, **CHECKS[check])
    _run(params, opt, grads)
    values, state = _reference(init, grads, GROUPS, max_grad_norm)
    for i, (p, v, s) in enumerate(zip(params, values, state)):
        assert_close(p.numpy(), v, what=f"p{i}", scale=init[i])
        assert_close(opt.state_dict()["state"][i]["exp_avg"], s["m"], what=f"exp_avg of p{i}")
    assert opt.state_dict()["step"] == 25


def test_lion_state_dict_round_trip_continues_bit_for_bit():
    init, grads = _gradients(6, seed=1)
    params, opt = _lion(init, GROUPS)
    _run(params, opt, grads[:3])
    saved = opt.state_dict()
    assert saved["type"] == "Lion" and set(saved["state"][0]) == {"step", "exp_avg"}
    assert [sorted(k for k in g if k != "params") for g in saved["param_groups"]] == [["betas", "lr", "weight_decay"]] * 2
    twin_params, twin = _lion([p.numpy() for p in params], [dict(lr=0.5, betas=(0.1, 0.2), weight_decay=0.0)] * 2)
    twin.load_state_dict(saved)
    assert twin.param_groups[1]["betas"] == (0.5, 0.9)
    _run(params, opt, grads[3:])
    _run(twin_params, twin, grads[3:])
    for a, b in zip(params, twin_params):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_lion_config_round_trips_through_the_registry():
    assert "Lion" in registry.otypes("optimizer")
    assert LionConfig().model_dump() == {"otype": "Lion", "learning_rate": 1e-4, "beta1": 0.9, "beta2": 0.99,
                                         "weight_decay": 0.0, "max_grad_norm": None, "skip_nonfinite": True,
                                         "double_buffer": True}
    params = [sopt.Parameter(np.ones(5, np.float32))]
    config = {"otype": "Lion", "learning_rate": 3e-4, "beta1": 0.95, "beta2": 0.98, "weight_decay": 0.1,
              "max_grad_norm": 1.0}
    opt = registry.build("optimizer", config, params)
    assert isinstance(opt, Lion) and opt.max_grad_norm == 1.0
    group = opt.param_groups[0]
    assert (group["lr"], group["betas"], group["weight_decay"]) == (3e-4, (0.95, 0.98), 0.1)
    assert opt.to_config() == registry.as_config("optimizer", config)
    with pytest.raises(Exception, match="beta1"):
        registry.as_config("optimizer", {"otype": "Lion", "beta1": 1.0})


@pytest.mark.parametrize("kwargs,error,match", [
    (dict(lr=-1.0), ValueError, r"lr must be in \[0\.0, inf\), got -1\.0"),
    (dict(betas=(1.0, 0.99)), ValueError, r"betas\[0\] must be in \[0\.0, 1\.0\), got 1\.0"),
    (dict(betas=(0.9,)), ValueError, r"betas must be a pair \(beta1, beta2\), got \(0\.9,\)"),
    (dict(weight_decay="0.1"), ValueError, r"weight_decay must be a number, got '0\.1'"),
    (dict(lr=1e-50), ValueError, r"Lion lr = 1e-50: float32 stores it as"),
    (dict(eps=1e-8), TypeError, r"unexpected keyword argument 'eps'"),
])
def test_lion_constructor_checks(kwargs, error, match):
    with pytest.raises(error, match=match):
        Lion([sopt.Parameter(np.ones(3, np.float32))], **kwargs)


def test_lion_signature_is_lion_pytorchs():
    assert str(inspect.signature(Lion)).startswith("(params, lr=0.0001, betas=(0.9, 0.99), weight_decay=0.0, *,")


def test_lion_follows_a_learning_rate_schedule():
    init, grads = _gradients(6, seed=2)
    groups = [dict(GROUPS[0], lr=0.02), dict(GROUPS[1], lr=0.02)]
    params, opt = _lion(init, groups)
    _run(params, opt, grads, S.StepLR(opt, step_size=2, gamma=0.5))
    values, _ = _reference(init, grads, groups, lrs=[0.02, 0.02, 0.01, 0.01, 0.005, 0.005])
    for i, (p, v) in enumerate(zip(params, values)):
        assert_close(p.numpy(), v, what=f"p{i}", scale=init[i])
    assert opt.param_groups[0]["lr"] == pytest.approx(0.0025)


def test_kernel_fields_and_the_kernel_struct_must_name_the_same_fields():
    class Misnamed(Lion):
        def kernel_fields(self, group):
            return {**super().kernel_fields(group), "eps": 1e-8}

    p = sopt.Parameter(np.ones(3, np.float32))
    with pytest.raises(TypeError, match=r"Misnamed.kernel_fields gives \['beta1', 'beta2', 'eps', 'lr', "
                                        r"'weight_decay'\], but the struct LionHyper of optim/lion.slang has"):
        Misnamed([p]).step()


def test_no_optimiser_kernel_reads_a_hyperparameter_by_position():
    from sopt.runtime import device

    sources = sorted((device.slang_lib_path() / "optim").glob("*.slang"))
    assert len(sources) >= 6
    for source in sources:
        text = source.read_text()
        assert ".hyper(" not in text and "hyper_fields" not in text, source.name
