"""Learning-rate schedulers against independent float64 closed forms of torch's documented formulas, and against
torch.optim.lr_scheduler itself where torch is importable.

The optimisers are real sopt optimisers (tiny parameters): schedulers only touch their param groups, so the
tests mean the same on any device; one test also checks that the kernel really uses the scheduled lr.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

import sopt
from sopt.optim import SGD, Adagrad, Adam
from sopt.optim import lr_scheduler as S

BASE_LRS = (0.1, 0.03)   # two param groups, so per-group handling is exercised
RTOL = 1e-12
TORCH_REASON = "torch not installed: comparison against torch.optim.lr_scheduler skipped (float64 references still run)"


# -- optimisers -------------------------------------------------------------------------------------------------
def sopt_optimizer(kind: str = "sgd", lrs=BASE_LRS):
    groups = [{"params": [sopt.Parameter(np.zeros(4))], "lr": lr} for lr in lrs]
    if kind == "sgd":
        return SGD(groups, lr=0.5, momentum=0.9)
    if kind == "adam":
        return Adam(groups, lr=0.5, betas=(0.9, 0.999))
    return Adagrad(groups, lr=0.5)


def torch_optimizer(torch, kind: str = "sgd", lrs=BASE_LRS):
    groups = [{"params": [torch.nn.Parameter(torch.zeros(4))], "lr": lr} for lr in lrs]
    if kind == "sgd":
        return torch.optim.SGD(groups, lr=0.5, momentum=0.9)
    if kind == "adam":
        return torch.optim.Adam(groups, lr=0.5, betas=(0.9, 0.999))
    return torch.optim.Adagrad(groups, lr=0.5)


def momentum_of(opt) -> list[float]:
    """beta1 or momentum of every group (0 for optimisers with neither)."""
    return [g["betas"][0] if "betas" in g else g.get("momentum", 0.0) for g in opt.param_groups]


def lr_sequence(scheduler, opt, steps: int):
    """(lrs, momenta) after construction and after each of ``steps`` steps; checks groups match get_last_lr."""
    lrs, momenta = [scheduler.get_last_lr()], [momentum_of(opt)]
    for _ in range(steps):
        scheduler.step()
        last = scheduler.get_last_lr()
        assert last == [g["lr"] for g in opt.param_groups]
        lrs.append(last)
        momenta.append(momentum_of(opt))
    return np.array(lrs, np.float64), np.array(momenta, np.float64)


def assert_close(actual, expected, what: str, rtol: float = RTOL) -> None:
    actual, expected = np.asarray(actual, np.float64), np.asarray(expected, np.float64)
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    err = np.abs(actual - expected)
    bad = err > rtol * np.abs(expected)
    if bad.any():
        i = np.argwhere(bad)[0]
        raise AssertionError(f"{what}: {bad.sum()} values differ beyond rtol {rtol}; first at step {i[0]} "
                             f"group {i[1]}: got {actual[tuple(i)]!r}, expected {expected[tuple(i)]!r}")


# -- float64 references (torch's documented formulas, written independently of the implementation) -------------
def cosine(base, t, T, eta_min=0.0):
    return eta_min + (base - eta_min) * (1 + math.cos(math.pi * t / T)) / 2


def linear(base, t, start, end, total):
    return base * (start + (end - start) * min(t, total) / total)


def one_cycle(t, lo, hi, lo_end, N, pct, strategy="cos", three_phase=False):
    """1cycle value at step t for a quantity going lo -> hi -> lo_end (lr) or hi -> lo -> hi (momentum)."""
    anneal = ((lambda a, b, p: b + (a - b) * (1 + math.cos(math.pi * p)) / 2) if strategy == "cos"
              else (lambda a, b, p: a + (b - a) * p))
    e1 = pct * N - 1
    if t <= e1:
        return anneal(lo, hi, t / e1)
    if not three_phase:
        return anneal(hi, lo_end, (t - e1) / (N - 1 - e1))
    e2 = 2 * pct * N - 2
    if t <= e2:
        return anneal(hi, lo, (t - e1) / (e2 - e1))
    return anneal(lo, lo_end, (t - e2) / (N - 1 - e2))


def warmup_cosine(base, t, W, T, eta_min, s):
    if t < W:
        return base * (s + (1 - s) * t / W)
    if t <= T:
        return eta_min + (base - eta_min) * (1 + math.cos(math.pi * (t - W) / (T - W))) / 2
    return eta_min


def constant(base, t, factor, total):
    return base * factor if t < total else base


# (id, steps, optimiser kind, build(M, opt) for M = sopt's or torch's lr_scheduler (None: no torch twin, see WARMUP),
#  reference(base_lr, t) -> lr (None: no closed form, compared with torch only))
CASES = [
    ("ConstantLR-default", 30, "sgd", lambda M, o: M.ConstantLR(o), lambda b, t: constant(b, t, 1 / 3, 5)),
    ("ConstantLR", 60, "adam", lambda M, o: M.ConstantLR(o, factor=0.25, total_iters=17),
     lambda b, t: constant(b, t, 0.25, 17)),
    ("StepLR", 80, "sgd", lambda M, o: M.StepLR(o, step_size=7, gamma=0.5), lambda b, t: b * 0.5 ** (t // 7)),
    ("StepLR-default-gamma", 50, "adam", lambda M, o: M.StepLR(o, 10), lambda b, t: b * 0.1 ** (t // 10)),
    ("MultiStepLR", 80, "sgd", lambda M, o: M.MultiStepLR(o, milestones=[3, 10, 10, 41], gamma=0.3),
     lambda b, t: b * 0.3 ** sum(m <= t for m in (3, 10, 10, 41))),
    ("ExponentialLR", 100, "sgd", lambda M, o: M.ExponentialLR(o, gamma=0.95), lambda b, t: b * 0.95 ** t),
    ("ExponentialLR-grow", 50, "adam", lambda M, o: M.ExponentialLR(o, gamma=1.02), lambda b, t: b * 1.02 ** t),
    ("CosineAnnealingLR", 100, "sgd", lambda M, o: M.CosineAnnealingLR(o, T_max=30),
     lambda b, t: cosine(b, t, 30)),
    ("CosineAnnealingLR-eta_min", 100, "adam", lambda M, o: M.CosineAnnealingLR(o, T_max=45, eta_min=0.004),
     lambda b, t: cosine(b, t, 45, 0.004)),
    ("LinearLR-default", 30, "sgd", lambda M, o: M.LinearLR(o), lambda b, t: linear(b, t, 1 / 3, 1.0, 5)),
    ("LinearLR-decay", 60, "adam", lambda M, o: M.LinearLR(o, start_factor=1.0, end_factor=0.05, total_iters=40),
     lambda b, t: linear(b, t, 1.0, 0.05, 40)),
    ("OneCycleLR", 100, "sgd", lambda M, o: M.OneCycleLR(o, max_lr=[1.0, 0.3], total_steps=100),
     lambda b, t: one_cycle(t, 10 * b / 25, 10 * b, 10 * b / 25 / 1e4, 100, 0.3)),
    ("OneCycleLR-epochs-linear-3phase", 96, "adam",
     lambda M, o: M.OneCycleLR(o, max_lr=0.8, epochs=8, steps_per_epoch=12, pct_start=0.25,
                               anneal_strategy="linear", three_phase=True, div_factor=10.0, final_div_factor=100.0),
     lambda b, t: one_cycle(t, 0.08, 0.8, 0.08 / 100, 96, 0.25, "linear", True)),
    ("WarmupCosineLR", 90, "adam", None, lambda b, t: warmup_cosine(b, t, 10, 80, 1e-4, 0.0)),
    ("WarmupCosineLR-start-factor", 60, "sgd", None, lambda b, t: warmup_cosine(b, t, 7, 60, 0.0, 0.1)),
    ("WarmupCosineLR-no-warmup", 40, "sgd", None, lambda b, t: warmup_cosine(b, t, 0, 40, 0.001, 0.0)),
    ("SequentialLR", 90, "sgd",
     lambda M, o: M.SequentialLR(o, [M.LinearLR(o, start_factor=0.1, total_iters=10), M.CosineAnnealingLR(o, 30),
                                     M.ExponentialLR(o, 0.9)], milestones=[10, 50]),
     lambda b, t: (linear(b, t, 0.1, 1.0, 10) if t < 10 else cosine(b, t - 10, 30) if t < 50
                   else b * 0.9 ** (t - 50))),
    ("SequentialLR-step", 50, "adam",
     lambda M, o: M.SequentialLR(o, [M.ExponentialLR(o, 0.8), M.StepLR(o, 5, 0.5)], milestones=[7]),
     lambda b, t: b * 0.8 ** t if t < 7 else b * 0.5 ** ((t - 7) // 5)),
    ("ChainedScheduler", 80, "sgd",
     lambda M, o: M.ChainedScheduler([M.ConstantLR(o, factor=0.1, total_iters=5), M.ExponentialLR(o, 0.95),
                                      M.CosineAnnealingLR(o, T_max=90)]),
     lambda b, t: constant(b, t, 0.1, 5) * 0.95 ** t * cosine(1.0, t, 90)),
    # Past T_max torch's cosine recursion adds a base_lr term, so the chain is no longer a product: torch only.
    ("ChainedScheduler-cosine-past-T_max", 60, "sgd",
     lambda M, o: M.ChainedScheduler([M.ExponentialLR(o, 0.97), M.CosineAnnealingLR(o, T_max=20)]), None),
    ("ChainedScheduler-linear-multistep", 50, "adam",
     lambda M, o: M.ChainedScheduler([M.LinearLR(o, 0.2, 1.0, 8), M.MultiStepLR(o, [12, 20], 0.5)]),
     lambda b, t: linear(b, t, 0.2, 1.0, 8) * 0.5 ** sum(m <= t for m in (12, 20))),
]

# WarmupCosineLR has no torch twin; its builders are here.
WARMUP = {
    "WarmupCosineLR": lambda o: S.WarmupCosineLR(o, warmup_steps=10, total_steps=80, eta_min=1e-4),
    "WarmupCosineLR-start-factor": lambda o: S.WarmupCosineLR(o, 7, 60, warmup_start_factor=0.1),
    "WarmupCosineLR-no-warmup": lambda o: S.WarmupCosineLR(o, 0, 40, eta_min=0.001),
}


def build_sopt(case, opt):
    name, _, _, build, _ = case
    return WARMUP[name](opt) if build is None else build(S, opt)


def reference(case) -> np.ndarray:
    _, steps, _, _, ref = case
    return np.array([[ref(b, t) for b in BASE_LRS] for t in range(steps + 1)])


CASE_IDS = [c[0] for c in CASES]


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_matches_float64_reference(case):
    name, steps, kind, _, ref = case
    if ref is None:
        pytest.skip("no closed form (compared with torch only)")
    opt = sopt_optimizer(kind)
    scheduler = build_sopt(case, opt)
    lrs, _ = lr_sequence(scheduler, opt, steps)
    expected = reference(case)
    assert_close(lrs, expected, name)
    assert len(set(lrs[:, 0])) > 1, f"{name}: the schedule should move"


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_matches_torch(case):
    torch = pytest.importorskip("torch", reason=TORCH_REASON)
    from torch.optim import lr_scheduler as T
    name, steps, kind, build, _ = case
    if build is None:
        pytest.skip("no torch twin (compared with torch's SequentialLR in test_warmup_cosine_matches_torch)")
    opt = sopt_optimizer(kind)
    lrs, momenta = lr_sequence(build(S, opt), opt, steps)
    topt = torch_optimizer(torch, kind)
    t_lrs, t_momenta = [], []
    t_sched = build(T, topt)
    t_lrs.append(t_sched.get_last_lr())
    t_momenta.append(momentum_of(topt))
    for _ in range(steps):
        topt.step()
        t_sched.step()
        t_lrs.append(t_sched.get_last_lr())
        t_momenta.append(momentum_of(topt))
    assert_close(lrs, t_lrs, f"{name} lr vs torch")
    assert_close(momenta, t_momenta, f"{name} momentum vs torch")
    assert [g["initial_lr"] for g in opt.param_groups] == [g["initial_lr"] for g in topt.param_groups]


def test_warmup_cosine_matches_torch():
    # Up to total_steps (where torch's cosine would start to rise again) WarmupCosineLR is torch's
    # SequentialLR(LinearLR warmup, CosineAnnealingLR).
    torch = pytest.importorskip("torch", reason=TORCH_REASON)
    from torch.optim import lr_scheduler as T
    W, N, s, eta_min = 12, 70, 0.05, 2e-4
    opt = sopt_optimizer("adam")
    lrs, _ = lr_sequence(S.WarmupCosineLR(opt, W, N, eta_min=eta_min, warmup_start_factor=s), opt, N)
    topt = torch_optimizer(torch, "adam")
    t_sched = T.SequentialLR(topt, [T.LinearLR(topt, s, 1.0, W), T.CosineAnnealingLR(topt, N - W, eta_min)], [W])
    t_lrs = [t_sched.get_last_lr()]
    for _ in range(N):
        topt.step()
        t_sched.step()
        t_lrs.append(t_sched.get_last_lr())
    assert_close(lrs, t_lrs, "WarmupCosineLR vs torch SequentialLR(LinearLR, CosineAnnealingLR)")


def test_construction_sets_initial_lr_and_epoch0_lr():
    opt = sopt_optimizer("sgd")
    scheduler = S.LinearLR(opt, start_factor=0.25, total_iters=4)
    assert [g["initial_lr"] for g in opt.param_groups] == list(BASE_LRS)
    assert scheduler.base_lrs == list(BASE_LRS)
    assert scheduler.last_epoch == 0
    assert [g["lr"] for g in opt.param_groups] == [b * 0.25 for b in BASE_LRS]
    # A second scheduler on the same optimiser keeps the first initial_lr (setdefault, as torch).
    second = S.StepLR(opt, 3)
    assert second.base_lrs == list(BASE_LRS)
    last = scheduler.get_last_lr()
    last[0] = 123.0
    assert scheduler.get_last_lr()[0] != 123.0, "get_last_lr must return a copy"


# -- OneCycleLR momentum ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["sgd", "adam"])
@pytest.mark.parametrize("three_phase", [False, True])
def test_one_cycle_momentum(kind, three_phase):
    N, pct = 60, 0.3
    opt = sopt_optimizer(kind)
    scheduler = S.OneCycleLR(opt, max_lr=0.5, total_steps=N, pct_start=pct, base_momentum=[0.8, 0.7],
                             max_momentum=0.9, three_phase=three_phase)
    lrs, momenta = lr_sequence(scheduler, opt, N)
    lo_m = (0.8, 0.7)
    expected_m = np.array([[one_cycle(t, 0.9, m, 0.9, N, pct, three_phase=three_phase) for m in lo_m]
                           for t in range(N + 1)])
    # Momentum runs inversely: starts at max_momentum, reaches base_momentum at the lr peak.
    assert_close(momenta, expected_m, f"OneCycleLR {kind} momentum")
    peak = int(np.argmax(lrs[:, 0]))
    assert momenta[peak, 0] == pytest.approx(0.8, abs=0.01) and momenta[0, 0] == 0.9
    assert_close(lrs, [[one_cycle(t, 0.02, 0.5, 0.02 / 1e4, N, pct, three_phase=three_phase)] * 2
                       for t in range(N + 1)], f"OneCycleLR {kind} lr")
    if kind == "adam":
        assert all(isinstance(g["betas"], tuple) and g["betas"][1] == 0.999 for g in opt.param_groups)
    with pytest.raises(ValueError, match=r"total_steps=60"):
        scheduler.step()


def test_one_cycle_without_momentum_cycling_leaves_momentum():
    opt = sopt_optimizer("adagrad")
    scheduler = S.OneCycleLR(opt, max_lr=0.3, total_steps=20, cycle_momentum=False)
    lrs, _ = lr_sequence(scheduler, opt, 20)
    assert_close(lrs, [[one_cycle(t, 0.012, 0.3, 1.2e-6, 20, 0.3)] * 2 for t in range(21)], "OneCycleLR adagrad")
    assert "max_momentum" not in opt.param_groups[0]


# -- ReduceLROnPlateau ----------------------------------------------------------------------------------------------
def test_plateau_min_rel_with_cooldown_and_min_lr():
    opt = sopt_optimizer("sgd")
    scheduler = S.ReduceLROnPlateau(opt, mode="min", factor=0.5, patience=2, threshold=0.1, cooldown=1,
                                    min_lr=[0.0, 0.02])
    metrics = [10, 9.5, 8.9, 9, 9, 9, 9, 9, 9, 9, 1, 1]
    # step 2: 9.5 is not below 10 * 0.9 (bad 1); step 3: 8.9 is (new best); steps 4-6 bad 1,2,3 > patience:
    # halve (group 1 clipped to min_lr 0.02); step 7 is cooldown; 8-10 bad 1,2,3: halve again (group 1 stays,
    # 0.02 - 0.02 <= eps); 11: new best.
    expected = [[0.1, 0.03]] * 5 + [[0.05, 0.02]] * 4 + [[0.025, 0.02]] * 3
    got = []
    for m in metrics:
        scheduler.step(m)
        got.append(scheduler.get_last_lr())
        assert got[-1] == [g["lr"] for g in opt.param_groups]
    assert_close(got, expected, "ReduceLROnPlateau min/rel")
    assert scheduler.best == 1 and scheduler.last_epoch == len(metrics)


def test_plateau_max_abs_and_eps():
    opt = sopt_optimizer("adam", lrs=(1.0, 1e-8))
    scheduler = S.ReduceLROnPlateau(opt, mode="max", factor=0.1, patience=0, threshold=0.5, threshold_mode="abs")
    metrics = [1, 1.4, 2, 2.4, 0, 3, np.float32(2.9)]
    # A rise of 0.4 is below the 0.5 threshold: bad; patience 0 cuts at once. Group 1's cut (9e-9) is
    # below eps = 1e-8 and is skipped.
    expected_0 = [1.0, 0.1, 0.1, 0.01, 0.001, 0.001, 0.0001]
    got = []
    for m in metrics:
        scheduler.step(m)
        got.append(scheduler.get_last_lr())
    assert_close(np.array(got)[:, 0], expected_0, "ReduceLROnPlateau max/abs")
    assert all(lr[1] == 1e-8 for lr in got)


def plateau_metrics(n: int = 120) -> list[float]:
    rng = np.random.default_rng(3)
    return list(np.maximum(0.05, 1.0 / np.sqrt(1 + np.arange(n) / 4)) + 0.02 * rng.standard_normal(n))


PLATEAU_KW = [dict(patience=3, factor=0.5, cooldown=2, min_lr=1e-3),
              dict(mode="max", patience=1, threshold=0.01, threshold_mode="abs", factor=0.3),
              dict(patience=0, threshold=0.0, eps=1e-3, min_lr=[0.0, 0.01])]


@pytest.mark.parametrize("kw", PLATEAU_KW, ids=["min-rel-cooldown", "max-abs", "eps-min_lr-list"])
def test_plateau_matches_torch(kw):
    torch = pytest.importorskip("torch", reason=TORCH_REASON)
    metrics = plateau_metrics()
    if kw.get("mode") == "max":
        metrics = [-m for m in metrics]
    opt, topt = sopt_optimizer("sgd"), torch_optimizer(torch, "sgd")
    mine, theirs = S.ReduceLROnPlateau(opt, **kw), torch.optim.lr_scheduler.ReduceLROnPlateau(topt, **kw)
    got, want = [], []
    for m in metrics:
        mine.step(m)
        topt.step()
        theirs.step(m)
        got.append(mine.get_last_lr())
        want.append(theirs.get_last_lr())
    assert_close(got, want, f"ReduceLROnPlateau {kw} vs torch")
    assert len({lr[0] for lr in got}) > 2, "the metric sequence should trigger reductions"


# -- state_dict round trip ------------------------------------------------------------------------------------------
def json_round_trip(state: dict) -> dict:
    return json.loads(json.dumps(state, allow_nan=False))


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_state_dict_round_trip(case):
    name, steps, kind, _, _ = case
    opt = sopt_optimizer(kind)
    scheduler = build_sopt(case, opt)
    full, full_m = lr_sequence(scheduler, opt, steps)
    half = steps // 2 + 1
    opt = sopt_optimizer(kind)
    scheduler = build_sopt(case, opt)
    lr_sequence(scheduler, opt, half)
    saved = json_round_trip(scheduler.state_dict())
    # A fresh optimiser and scheduler (constructed at epoch 0) continue from the saved state alone.
    fresh_opt = sopt_optimizer(kind)
    fresh = build_sopt(case, fresh_opt)
    fresh.load_state_dict(saved)
    assert fresh.state_dict() == saved
    rest, rest_m = lr_sequence(fresh, fresh_opt, steps - half)
    assert_close(rest, full[half:], f"{name} after load")
    assert_close(rest_m, full_m[half:], f"{name} momentum after load")


def test_state_dict_round_trip_plateau():
    metrics = plateau_metrics(80)
    kw = dict(patience=2, factor=0.5, cooldown=1, min_lr=[1e-3, 0.0])
    opt = sopt_optimizer("sgd")
    scheduler = S.ReduceLROnPlateau(opt, **kw)
    saved_at_start = json_round_trip(scheduler.state_dict())   # best is +inf here
    full = []
    for m in metrics:
        scheduler.step(m)
        full.append(scheduler.get_last_lr())
    for cut in (0, 37):
        opt = sopt_optimizer("sgd")
        scheduler = S.ReduceLROnPlateau(opt, **kw)
        for m in metrics[:cut]:
            scheduler.step(m)
        saved = json_round_trip(scheduler.state_dict())
        if cut == 0:
            assert saved == saved_at_start and saved["best"] is None
        fresh_opt = sopt_optimizer("sgd")
        fresh = S.ReduceLROnPlateau(fresh_opt, mode="max", patience=50)   # hyperparameters come from the state
        fresh.load_state_dict(saved)
        rest = []
        for m in metrics[cut:]:
            fresh.step(m)
            rest.append(fresh.get_last_lr())
        assert_close(rest, full[cut:], f"ReduceLROnPlateau after load at step {cut}")


def test_state_dict_is_strict_json_with_numpy_lrs():
    # Group lrs given as numpy scalars must still give a JSON-serialisable state.
    opt = SGD([{"params": [sopt.Parameter(np.zeros(2))], "lr": np.float32(0.1)}], lr=0.1)
    for scheduler in (S.StepLR(opt, 3), S.ReduceLROnPlateau(opt)):
        state = scheduler.state_dict()
        assert json_round_trip(state) == state


def test_load_state_dict_rejects_other_scheduler_and_group_count():
    opt = sopt_optimizer("sgd")
    state = S.StepLR(opt, 3).state_dict()
    with pytest.raises(ValueError, match=r"'StepLR'.*ExponentialLR"):
        S.ExponentialLR(sopt_optimizer("sgd"), 0.9).load_state_dict(state)
    with pytest.raises(ValueError, match=r"'base_lrs' has 2 entries.*1 param group"):
        S.StepLR(sopt_optimizer("sgd", lrs=(0.1,)), 3).load_state_dict(state)
    with pytest.raises(ValueError, match=r"lacks \['gamma'\]"):
        S.StepLR(sopt_optimizer("sgd"), 3).load_state_dict({k: v for k, v in state.items() if k != "gamma"})


# -- resuming with last_epoch, as torch ------------------------------------------------------------------------------
# (id, build(M, opt, last_epoch), closed form, whether the constructor's step moves the lr). Like torch,
# ExponentialLR, LinearLR and CosineAnnealingLR keep the group's lr at the constructor's step (then recurse from
# it), StepLR and MultiStepLR apply the next epoch's decay there.
RESUME = [
    ("StepLR", lambda M, o, e: M.StepLR(o, 4, 0.5, last_epoch=e), lambda b, t: b * 0.5 ** (t // 4), True),
    ("MultiStepLR", lambda M, o, e: M.MultiStepLR(o, [5, 10, 15], 0.5, last_epoch=e),
     lambda b, t: b * 0.5 ** sum(m <= t for m in (5, 10, 15)), True),
    ("CosineAnnealingLR", lambda M, o, e: M.CosineAnnealingLR(o, 25, 0.001, last_epoch=e),
     lambda b, t: cosine(b, t, 25, 0.001), False),
    ("LinearLR", lambda M, o, e: M.LinearLR(o, 0.1, 0.5, 20, last_epoch=e), lambda b, t: linear(b, t, 0.1, 0.5, 20),
     False),
    ("ExponentialLR", lambda M, o, e: M.ExponentialLR(o, 0.9, last_epoch=e), lambda b, t: b * 0.9 ** t, False),
]


def resumed(opt, build, module, epoch, ref_lr, steps):
    for group, lr in zip(opt.param_groups, ref_lr):
        group["initial_lr"], group["lr"] = group["lr"], lr
    scheduler = build(module, opt, epoch)
    out = [scheduler.get_last_lr()]
    for _ in range(steps):
        if not isinstance(opt, sopt.optim.Optimizer):
            opt.step()
        scheduler.step()
        out.append(scheduler.get_last_lr())
    return scheduler, np.array(out)


@pytest.mark.parametrize("resume", RESUME, ids=[r[0] for r in RESUME])
def test_last_epoch_resume(resume):
    name, build, ref, moves = resume
    epoch = 9
    at_epoch = [ref(b, epoch) for b in BASE_LRS]
    scheduler, lrs = resumed(sopt_optimizer("sgd"), build, S, epoch, at_epoch, 20)
    # The constructor advances last_epoch to epoch + 1, as torch's does.
    assert scheduler.last_epoch == epoch + 21
    assert scheduler.base_lrs == list(BASE_LRS)
    if moves:
        assert_close(lrs, [[ref(b, t) for b in BASE_LRS] for t in range(epoch + 1, epoch + 22)], f"{name} resumed")
    else:
        assert_close(lrs[0], at_epoch, f"{name} lr kept at the constructor's step")


@pytest.mark.parametrize("resume", RESUME, ids=[r[0] for r in RESUME])
def test_last_epoch_resume_matches_torch(resume):
    torch = pytest.importorskip("torch", reason=TORCH_REASON)
    name, build, ref, _ = resume
    at_epoch = [ref(b, 9) for b in BASE_LRS]
    _, lrs = resumed(sopt_optimizer("sgd"), build, S, 9, at_epoch, 20)
    _, t_lrs = resumed(torch_optimizer(torch, "sgd"), build, torch.optim.lr_scheduler, 9, at_epoch, 20)
    assert_close(lrs, t_lrs, f"{name} resumed vs torch")


def test_last_epoch_resume_needs_initial_lr():
    with pytest.raises(ValueError, match=r"last_epoch=4.*param_groups\[0\] has no 'initial_lr'"):
        S.StepLR(sopt_optimizer("sgd"), 3, last_epoch=4)


# -- the kernel uses the scheduled lr -----------------------------------------------------------------------------
def test_sgd_steps_with_scheduled_lr():
    p = sopt.Parameter(np.zeros(4))
    opt = SGD([p], lr=0.2)
    scheduler = S.WarmupCosineLR(opt, warmup_steps=3, total_steps=10, warmup_start_factor=0.2)
    used = []
    for _ in range(12):
        used.append(opt.param_groups[0]["lr"])
        p.set_grad(np.ones(4))
        opt.step()
        scheduler.step()
    expected = -np.cumsum([warmup_cosine(0.2, t, 3, 10, 0.0, 0.2) for t in range(12)])
    assert_close(used, [warmup_cosine(0.2, t, 3, 10, 0.0, 0.2) for t in range(12)], "lr used")
    np.testing.assert_allclose(p.numpy(), np.full(4, expected[-1]), rtol=1e-6)


def test_adam_steps_with_cycled_beta1():
    p = sopt.Parameter(np.ones(3))
    opt = Adam([p], lr=0.01)
    scheduler = S.OneCycleLR(opt, max_lr=0.05, total_steps=10)
    for _ in range(10):
        p.set_grad(np.full(3, 0.5))
        opt.step()
        scheduler.step()
    assert np.all(np.isfinite(p.numpy())) and np.all(p.numpy() < 1.0)
    # Step 10 is one past the last index of the cycle: torch extrapolates the last phase there.
    assert opt.param_groups[0]["betas"] == (pytest.approx(one_cycle(10, 0.95, 0.85, 0.95, 10, 0.3), rel=1e-12), 0.999)
    assert scheduler.get_last_lr()[0] == pytest.approx(one_cycle(10, 0.002, 0.05, 2e-7, 10, 0.3), rel=1e-12)


# -- argument errors --------------------------------------------------------------------------------------------
def _seq(o, milestones, n=2):
    return S.SequentialLR(o, [S.ExponentialLR(o, 0.9) for _ in range(n)], milestones)


ERRORS = [
    (lambda o: S.StepLR(o, step_size=0), r"step_size must be >= 1, got 0"),
    (lambda o: S.StepLR(o, step_size=-3), r"step_size must be >= 1, got -3"),
    (lambda o: S.StepLR(o, step_size=2.5), r"step_size must be an integer, got 2.5"),
    (lambda o: S.StepLR(o, 5, gamma=0.0), r"gamma must be in \(0.0, inf\), got 0.0"),
    (lambda o: S.MultiStepLR(o, [5, 3]), r"milestones must be non-decreasing, got \[5, 3\]"),
    (lambda o: S.MultiStepLR(o, [2, 4.5]), r"milestones\[1\] must be an integer, got 4.5"),
    (lambda o: S.MultiStepLR(o, 7), r"milestones must be a list of integers, got 7"),
    (lambda o: S.MultiStepLR(o, [2], gamma=-0.5), r"gamma must be in \(0.0, inf\), got -0.5"),
    (lambda o: S.ExponentialLR(o, gamma=0), r"gamma must be in \(0.0, inf\), got 0"),
    (lambda o: S.ExponentialLR(o, gamma=float("nan")), r"gamma must be finite, got nan"),
    (lambda o: S.CosineAnnealingLR(o, T_max=0), r"T_max must be >= 1, got 0"),
    (lambda o: S.CosineAnnealingLR(o, T_max=-5), r"T_max must be >= 1, got -5"),
    (lambda o: S.CosineAnnealingLR(o, T_max=10, eta_min=-1e-3), r"eta_min must be in \[0.0, inf\), got -0.001"),
    (lambda o: S.ConstantLR(o, factor=1.5), r"factor must be in \(0.0, 1.0\], got 1.5"),
    (lambda o: S.ConstantLR(o, factor=0), r"factor must be in \(0.0, 1.0\], got 0"),
    (lambda o: S.ConstantLR(o, total_iters=0), r"total_iters must be >= 1, got 0"),
    (lambda o: S.LinearLR(o, start_factor=0.0), r"start_factor must be in \(0.0, 1.0\], got 0.0"),
    (lambda o: S.LinearLR(o, end_factor=1.2), r"end_factor must be in \[0.0, 1.0\], got 1.2"),
    (lambda o: S.LinearLR(o, total_iters=-1), r"total_iters must be >= 1, got -1"),
    (lambda o: S.OneCycleLR(o, 0.1), r"needs total_steps, or both epochs and steps_per_epoch"),
    (lambda o: S.OneCycleLR(o, 0.1, epochs=3), r"steps_per_epoch=None"),
    (lambda o: S.OneCycleLR(o, 0.1, total_steps=0), r"total_steps must be >= 1, got 0"),
    (lambda o: S.OneCycleLR(o, 0.1, epochs=0, steps_per_epoch=5), r"epochs must be >= 1, got 0"),
    (lambda o: S.OneCycleLR(o, 0.1, 100, anneal_strategy="exp"), r"anneal_strategy must be 'cos' or 'linear', got 'exp'"),
    (lambda o: S.OneCycleLR(o, 0.1, 100, pct_start=1.5), r"pct_start must be in \[0.0, 1.0\], got 1.5"),
    (lambda o: S.OneCycleLR(o, 0.1, 10, pct_start=0.1), r"pct_start=0.1 with total_steps=10 gives phase 1"),
    (lambda o: S.OneCycleLR(o, 0.1, 10, pct_start=1.0), r"pct_start=1.0 with total_steps=10 gives phase 2"),
    (lambda o: S.OneCycleLR(o, [0.1], 100), r"max_lr has 1 values but the optimizer has 2 param group"),
    (lambda o: S.OneCycleLR(o, -0.1, 100), r"max_lr must be in \(0.0, inf\), got -0.1"),
    (lambda o: S.OneCycleLR(o, 0.1, 100, div_factor=0), r"div_factor must be in \(0.0, inf\), got 0"),
    (lambda o: S.ReduceLROnPlateau(o, mode="avg"), r"mode must be 'min' or 'max', got 'avg'"),
    (lambda o: S.ReduceLROnPlateau(o, threshold_mode="pct"), r"threshold_mode must be 'rel' or 'abs', got 'pct'"),
    (lambda o: S.ReduceLROnPlateau(o, factor=1.0), r"factor must be in \[0.0, 1.0\), got 1.0"),
    (lambda o: S.ReduceLROnPlateau(o, patience=-1), r"patience must be >= 0, got -1"),
    (lambda o: S.ReduceLROnPlateau(o, cooldown=1.5), r"cooldown must be an integer, got 1.5"),
    (lambda o: S.ReduceLROnPlateau(o, min_lr=[0.1]), r"min_lr has 1 values but the optimizer has 2"),
    (lambda o: S.ReduceLROnPlateau(o, min_lr=-1), r"min_lr must be in \[0.0, inf\), got -1"),
    (lambda o: S.ReduceLROnPlateau(o).step("loss"), r"metrics must be a number, got 'loss'"),
    (lambda o: S.WarmupCosineLR(o, 10, 10), r"warmup_steps must be < total_steps.*warmup_steps=10, total_steps=10"),
    (lambda o: S.WarmupCosineLR(o, -1, 10), r"warmup_steps must be >= 0, got -1"),
    (lambda o: S.WarmupCosineLR(o, 2, 10, warmup_start_factor=2), r"warmup_start_factor must be in \[0.0, 1.0\], got 2"),
    (lambda o: S.WarmupCosineLR(o, 2, 10, eta_min=-0.1), r"eta_min must be in \[0.0, inf\), got -0.1"),
    (lambda o: _seq(o, [0]), r"milestones\[0\] must be >= 1, got 0"),
    (lambda o: _seq(o, [5, 3], n=3), r"milestones must be strictly increasing, got \[5, 3\]"),
    (lambda o: _seq(o, [4, 4], n=3), r"milestones must be strictly increasing, got \[4, 4\]"),
    (lambda o: _seq(o, [3, 6]), r"one entry fewer than schedulers: got 2 schedulers and milestones=\[3, 6\]"),
    (lambda o: S.SequentialLR(o, [], []), r"needs at least one scheduler"),
    (lambda o: S.SequentialLR(o, [S.StepLR(o, 2), S.ReduceLROnPlateau(o)], [3]), r"ReduceLROnPlateau \(schedulers\[1\]\)"),
    (lambda o: S.SequentialLR(o, [S.StepLR(o, 2), S.StepLR(sopt_optimizer(), 2)], [3]), r"schedulers\[1\].*different optimizer"),
    (lambda o: S.SequentialLR(o, [S.StepLR(o, 2), S.ChainedScheduler([S.StepLR(o, 3)])], [3]),
     r"schedulers\[1\] is a ChainedScheduler"),
    (lambda o: S.SequentialLR(o, [S.StepLR(o, 2), "cosine"], [3]), r"schedulers\[1\] must be an LRScheduler, got str"),
    (lambda o: S.ChainedScheduler([]), r"needs at least one scheduler"),
    (lambda o: S.ChainedScheduler([S.ExponentialLR(o, 0.9), S.ReduceLROnPlateau(o)]), r"ReduceLROnPlateau"),
]


@pytest.mark.parametrize("make, message", ERRORS, ids=[f"error{i}" for i in range(len(ERRORS))])
def test_bad_arguments_raise_value_error(make, message):
    with pytest.raises(ValueError, match=message):
        make(sopt_optimizer("sgd"))


@pytest.mark.parametrize("make", [
    lambda o: S.LinearLR(o, start_factor=0.1, total_iters=0),
    lambda o: S.OneCycleLR(o, 0.1, 100, anneal_strategy="exp"),
    lambda o: S.OneCycleLR(o, 0.1, 100, base_momentum=[0.8, 1.2]),
    lambda o: S.WarmupCosineLR(o, 5, 4),
], ids=["LinearLR", "OneCycleLR-strategy", "OneCycleLR-momentum", "WarmupCosineLR"])
def test_rejected_scheduler_leaves_groups_alone(make):
    opt = sopt_optimizer("adam")
    before = [{k: v for k, v in g.items() if k != "params"} for g in opt.param_groups]
    with pytest.raises(ValueError):
        make(opt)
    assert [{k: v for k, v in g.items() if k != "params"} for g in opt.param_groups] == before


def test_momentum_cycling_needs_momentum_and_valid_beta():
    with pytest.raises(ValueError, match=r"cycle_momentum=True needs an optimizer with momentum or betas, Adagrad"):
        S.OneCycleLR(sopt_optimizer("adagrad"), 0.1, 100)
    with pytest.raises(ValueError, match=r"max_momentum must be in \[0.0, 1.0\), got 1.0"):
        S.OneCycleLR(sopt_optimizer("adam"), 0.1, 100, max_momentum=1.0)
    # SGD momentum may exceed 1 (torch allows it); only negatives are rejected.
    S.OneCycleLR(sopt_optimizer("sgd"), 0.1, 100, max_momentum=1.5)
    with pytest.raises(ValueError, match=r"base_momentum\[1\] must be in \[0.0, inf\), got -0.2"):
        S.OneCycleLR(sopt_optimizer("sgd"), 0.1, 100, base_momentum=[0.8, -0.2])


def test_not_an_optimizer_is_a_type_error():
    with pytest.raises(TypeError, match=r"param_groups.*got list"):
        S.StepLR([0.1, 0.2], 3)


# every constructor argument of every scheduler given a value of the wrong type: (make, argument, value)
_SCHEDULER_ARGS = [
    (lambda o, **k: S.ConstantLR(o, **k), {"factor": "number", "total_iters": "int", "last_epoch": "int"}),
    (lambda o, **k: S.StepLR(o, **{"step_size": 2, **k}), {"step_size": "int", "gamma": "number"}),
    (lambda o, **k: S.MultiStepLR(o, **{"milestones": [2], **k}), {"gamma": "number"}),
    (lambda o, **k: S.ExponentialLR(o, **{"gamma": 0.9, **k}), {"gamma": "number", "last_epoch": "int"}),
    (lambda o, **k: S.CosineAnnealingLR(o, **{"T_max": 10, **k}), {"T_max": "int", "eta_min": "number"}),
    (lambda o, **k: S.LinearLR(o, **k), {"start_factor": "number", "end_factor": "number", "total_iters": "int"}),
    (lambda o, **k: S.WarmupCosineLR(o, **{"warmup_steps": 2, "total_steps": 10, **k}),
     {"warmup_steps": "int", "total_steps": "int", "eta_min": "number", "warmup_start_factor": "number"}),
    (lambda o, **k: S.OneCycleLR(o, **{"max_lr": 0.1, "total_steps": 100, **k}),
     {"max_lr": "number", "total_steps": "int", "pct_start": "number", "anneal_strategy": "str",
      "cycle_momentum": "flag", "base_momentum": "number", "max_momentum": "number", "div_factor": "number",
      "final_div_factor": "number", "three_phase": "flag", "last_epoch": "int"}),
    (lambda o, **k: S.OneCycleLR(o, **{"max_lr": 0.1, "epochs": 2, "steps_per_epoch": 5, **k}),
     {"epochs": "int", "steps_per_epoch": "int"}),
    (lambda o, **k: S.ReduceLROnPlateau(o, **k),
     {"mode": "str", "factor": "number", "patience": "int", "threshold": "number", "threshold_mode": "str",
      "cooldown": "int", "min_lr": "number", "eps": "number"}),
]
_BAD_VALUES = {"number": ("0.5", True, None), "int": ("5", True, 2.0), "flag": (1, "yes", 1.0),
               "str": (5, True, ["min"])}
_SCHEDULER_CASES = [(make, name, bad) for make, args in _SCHEDULER_ARGS for name, kind in args.items()
                    for bad in _BAD_VALUES[kind]]


@pytest.mark.parametrize("make,name,bad", _SCHEDULER_CASES, ids=[f"{n}-{b!r}" for _, n, b in _SCHEDULER_CASES])
def test_scheduler_arguments_of_the_wrong_type_are_rejected(make, name, bad):
    opt = sopt_optimizer()
    before = [dict(g) for g in opt.param_groups]
    with pytest.raises(ValueError, match=rf"^{name}(\[\d\])? must be"):
        make(opt, **{name: bad})
    assert [dict(g) for g in opt.param_groups] == before   # no lr, initial_lr or momentum written
