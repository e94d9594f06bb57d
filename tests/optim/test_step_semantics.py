"""Zero-on-step, dispatch counts, non-finite skipping, state_dict and argument validation."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import sopt
from sopt.runtime.device import dispatch_count
from sopt.optim import SGD, Adagrad, Adam, AdamW, RMSprop
from sopt.optim import optimizer as optimizer_module
from tests.optim.reference import ReferenceOptimizer

ALL = [SGD, Adam, AdamW, RMSprop, Adagrad]


def _params(n, seed=0, size=5):
    rng = np.random.default_rng(seed)
    return [sopt.Parameter(rng.standard_normal(size + i % 3), name=f"w{i}") for i in range(n)]


def _set_random_grads(params, seed):
    rng = np.random.default_rng(seed)
    for p in params:
        p.set_grad(rng.standard_normal(p.shape))


@pytest.mark.parametrize("cls", ALL)
def test_gradients_are_zero_after_step(cls):
    params = _params(4)
    opt = cls(params, lr=0.01)
    _set_random_grads(params, 1)
    assert all(np.abs(p.grad_numpy()).sum() > 0 for p in params)
    opt.step()
    for p in params:
        assert np.array_equal(p.grad_numpy(), np.zeros(p.shape))


@pytest.mark.parametrize("skip_nonfinite,max_grad_norm,double_buffer,expected", [
    (True, None, True, 1), (True, None, False, 2), (False, None, True, 1), (False, 1.0, True, 2),
    (True, 1.0, True, 2), (True, 1.0, False, 2)])
def test_dispatches_per_step_do_not_depend_on_parameter_count(skip_nonfinite, max_grad_norm, double_buffer, expected):
    counts = []
    for n in (1, 100):
        params = _params(n)
        opt = Adam(params, lr=0.01, skip_nonfinite=skip_nonfinite, max_grad_norm=max_grad_norm,
                   double_buffer=double_buffer)
        _set_random_grads(params, 2)
        before = dispatch_count()
        opt.step()
        counts.append(dispatch_count() - before)
    assert counts == [expected, expected]


def test_a_large_arena_is_undone_by_its_own_dispatch(monkeypatch):
    # above UNDO_MAX_VECTORS float4 vectors the double-buffered checked step adds nonfinite_restore's dispatch
    monkeypatch.setattr(optimizer_module, "UNDO_MAX_VECTORS", 24)
    counts = []
    for n in (96, 100):   # 24 and 25 vectors
        p = sopt.Parameter(np.ones(n, np.float32))
        opt = Adam([p], lr=0.01)
        p.set_grad(np.full(n, np.nan, np.float32))
        before = dispatch_count()
        opt.step()
        counts.append(dispatch_count() - before)
        np.testing.assert_array_equal(p.numpy(), 1.0)   # skipped: values as they were
        assert opt.skipped_steps == 1
    assert counts == [1, 2]


def test_hundred_parameters_all_updated_in_one_step():
    params = _params(100, seed=4)
    init = [p.numpy() for p in params]
    opt = SGD(params, lr=0.5, skip_nonfinite=False)
    _set_random_grads(params, 5)
    grads = [p.grad_numpy() for p in params]
    opt.step()
    for p, x, g in zip(params, init, grads):
        np.testing.assert_allclose(p.numpy(), x - 0.5 * g, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("double_buffer", [True, False])
@pytest.mark.parametrize("cls", [Adam, RMSprop, SGD])
def test_nonfinite_step_changes_nothing(cls, double_buffer):
    kwargs = {"lr": 0.01, "momentum": 0.9} if cls in (SGD, RMSprop) else {"lr": 0.01}
    params = _params(3, seed=6)
    opt = cls(params, **kwargs, poll_every=0, double_buffer=double_buffer)
    _set_random_grads(params, 7)
    opt.step()
    values = [p.numpy() for p in params]
    state = opt.state_dict()["state"]
    for bad in (np.nan, np.inf, -np.inf):
        _set_random_grads(params, 8)
        g = params[1].grad_numpy()
        g.flat[2] = bad
        params[1].set_grad(g)
        opt.step()
        for p, v in zip(params, values):
            assert np.array_equal(p.numpy(), v), "a skipped step changed a parameter"
            assert np.array_equal(p.grad_numpy(), np.zeros(p.shape)), "a skipped step must still zero gradients"
    with pytest.warns(RuntimeWarning, match="3 step\\(s\\) skipped"):
        assert opt.poll_skipped() == 3
    after = opt.state_dict()
    assert after["skipped_steps"] == 3 and after["step"] == 1
    for i, s in state.items():
        for name, value in s.items():
            if name != "step":
                assert np.array_equal(after["state"][i][name], value), f"state {name} changed on a skipped step"
    # the next finite step continues as if the skipped ones never happened (t = 2 for the bias correction)
    _set_random_grads(params, 9)
    grads = [p.grad_numpy() for p in params]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # reported once: no second warning
        opt.step()
        opt.poll_skipped()
    kind = cls.__name__.lower()
    ref = ReferenceOptimizer(kind, [v for v in values], **kwargs)
    ref.t = 1
    for s, p in zip(ref.state, params):
        st = state[params.index(p)]
        s.update({"m": st.get("exp_avg"), "v": st.get("exp_avg_sq"), "buf": st.get("momentum_buffer"),
                  "sq": st.get("square_avg")})
        for k in [k for k, v in s.items() if v is None]:
            del s[k]
        for k in s:
            s[k] = np.array(s[k], np.float64)
    ref.step(grads)
    for p, expected in zip(params, ref.params):
        np.testing.assert_allclose(p.numpy(), expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("double_buffer,undo_in_update", [(True, True), (True, False), (False, False)])
def test_nonfinite_found_anywhere_across_steps_and_passes(double_buffer, undo_in_update, monkeypatch):
    """A NaN/Inf at either end of an arena of several thread groups skips exactly its step, on both parities of
    the non-finite flags and when steps alternate with clipping steps (the statistics pass) and unchecked ones
    (in place, so that a double-buffered arena changes sides on some steps only). A double-buffered step is undone
    by its update's last group (small arenas) or by nonfinite_restore (UNDO_MAX_VECTORS lowered to 0)."""
    if not undo_in_update:
        monkeypatch.setattr(optimizer_module, "UNDO_MAX_VECTORS", 0)
    rng = np.random.default_rng(11)
    x = rng.standard_normal(20003).astype(np.float32)   # 5001 float4 vectors: 5 groups of the scan pass
    p = sopt.Parameter(x)
    opt = SGD([p], lr=0.5, poll_every=0, double_buffer=double_buffer)
    expected = x.astype(np.float64)
    plan = [  # (bad element or None, max_grad_norm, skip_nonfinite)
        (0, None, True), (None, None, True), (20002, None, True), (20002, None, True), (None, None, True),
        (7, 1e9, True), (None, None, True), (None, 1e9, True), (9000, None, True), (None, None, False),
        (None, None, True), (None, None, True)]
    skipped = 0
    for k, (bad, max_norm, check) in enumerate(plan):
        opt.max_grad_norm, opt.skip_nonfinite = max_norm, check
        g = rng.standard_normal(x.size).astype(np.float32)
        if bad is not None:
            g[bad] = np.nan if k % 2 else np.inf
        p.set_grad(g)
        opt.step()
        if bad is None:
            expected -= 0.5 * g.astype(np.float32)
        else:
            skipped += 1
        np.testing.assert_allclose(p.numpy(), expected, rtol=1e-5, atol=1e-5, err_msg=f"after step {k}")
        assert not p.grad_numpy().any(), f"step {k} left gradients"
    assert opt.skipped_steps == skipped == 5


def test_state_dict_round_trip_continues_identically():
    params_a = _params(3, seed=10)
    params_b = _params(3, seed=10)
    opt_a = AdamW(params_a, lr=0.02, amsgrad=True)
    opt_b = AdamW(params_b, lr=0.02, amsgrad=True)
    for k in range(5):
        _set_random_grads(params_a, 20 + k)
        opt_a.step()
    state = opt_a.state_dict()
    assert state["step"] == 5 and set(state["state"][0]) == {"step", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"}
    for pa, pb in zip(params_a, params_b):
        pb.load(pa.numpy())
    opt_b.load_state_dict(state)
    for k in range(5):
        _set_random_grads(params_a, 40 + k)
        _set_random_grads(params_b, 40 + k)
        opt_a.step()
        opt_b.step()
    for pa, pb in zip(params_a, params_b):
        assert np.array_equal(pa.numpy(), pb.numpy())


def test_load_state_dict_rejects_wrong_shapes():
    opt = Adam(_params(2, seed=1), lr=0.01)
    state = opt.state_dict()
    state["state"][1]["exp_avg"] = np.zeros((99,))
    other = Adam(_params(2, seed=1), lr=0.01)
    with pytest.raises(ValueError, match=r"exp_avg.*shape \(99,\)"):
        other.load_state_dict(state)
    with pytest.raises(ValueError, match="param groups"):
        other.load_state_dict({**state, "param_groups": []})


@pytest.mark.parametrize("make,match", [
    (lambda p: SGD(p, lr=-0.1), r"lr must be in \[0\.0, inf\), got -0\.1"),
    (lambda p: Adam(p, betas=(1.0, 0.999)), r"betas\[0\] must be in \[0\.0, 1\.0\), got 1\.0"),
    (lambda p: Adam(p, betas=(0.9, -0.1)), r"betas\[1\].*got -0\.1"),
    (lambda p: AdamW(p, eps=-1.0), r"eps.*got -1\.0"),
    (lambda p: SGD(p, lr=0.1, nesterov=True), r"nesterov.*momentum=0\.0"),
    (lambda p: SGD(p, lr=0.1, momentum=0.9, dampening=0.1, nesterov=True), r"nesterov.*dampening=0\.1"),
    (lambda p: RMSprop(p, alpha=-1), r"alpha.*got -1"),
    (lambda p: Adagrad(p, lr_decay=-1e-3), r"lr_decay.*got -0\.001"),
    (lambda p: Adam(p, lr="fast"), r"lr must be a number, got 'fast'"),
    (lambda p: Adam(p, lr=float("nan")), r"lr must be finite"),
    (lambda p: Adam(p, max_grad_norm=0.0), r"max_grad_norm must be in \(0\.0, inf\), got 0\.0"),
    (lambda p: Adam([{"params": p, "momentum": 0.9}]), r"unknown option\(s\) \['momentum'\]"),
    (lambda p: Adam([]), r"empty parameter list"),
    (lambda p: Adam([1.0, 2.0]), r"params\[0\] must be a sopt.Parameter, got float"),
])
def test_bad_hyperparameters_raise_value_error(make, match):
    with pytest.raises(ValueError, match=match):
        make(_params(1))


def test_parameter_in_two_optimisers_is_rejected():
    params = _params(1)
    SGD(params, lr=0.1)
    with pytest.raises(ValueError, match="already belongs to another optimiser"):
        Adam(params)


def test_zero_grad_clears_only_gradients():
    params = _params(3, seed=12)
    opt = RMSprop(params, lr=0.01, centered=True)
    _set_random_grads(params, 13)
    values = [p.numpy() for p in params]
    params[1].zero_grad()  # one parameter's view: the others keep theirs
    assert not params[1].grad_numpy().any() and params[0].grad_numpy().any() and params[2].grad_numpy().any()
    opt.zero_grad()
    for p, v in zip(params, values):
        assert not p.grad_numpy().any()
        assert np.array_equal(p.numpy(), v)


@pytest.mark.parametrize("change", ["second side", "new state slot"])
def test_gradients_recorded_before_a_step_that_moves_the_arena_are_used(change):
    """A step that must move the arena into a new buffer (the second side of the default check appears, or a
    state slot for newly enabled momentum) copies it on the GPU, in the step's encoder: gradients that a
    backward pass recorded earlier into the same encoder (here an upload into p.grad) reach the update."""
    device = sopt.get_device()
    p = sopt.Parameter(np.ones(4))
    opt = SGD([p], lr=1.0, skip_nonfinite=False)
    p.set_grad(np.full(4, 0.5))
    opt.step()
    buffer = opt.arena.buffer
    if change == "second side":
        opt.skip_nonfinite = True
    else:
        opt.param_groups[0]["momentum"] = 0.9
    encoder = device.create_command_encoder()
    encoder.upload_buffer_data(p.grad.storage, p.grad.offset * 4, np.full(4, 2.0, np.float32))
    opt.step(encoder)
    device.submit_command_buffer(encoder.finish())
    assert opt.arena.buffer is not buffer
    # t = 2: a fresh momentum buffer is zero, so buf = 0.9 * 0 + g = g either way
    np.testing.assert_array_equal(p.numpy(), np.full(4, 0.5 - 2.0, np.float32))
    assert not p.grad_numpy().any()
    assert all(bound._values["arena"] is opt.arena.buffer for bound in opt._bound.values()), \
        "a kernel still holds the previous buffer"


def test_double_buffer_memory_follows_the_option():
    """The second copy of values and state is allocated when a step first needs it and dropped with
    double_buffer=False, keeping the values and state."""
    params = _params(3, seed=15)
    opt = Adam(params, lr=0.01)
    assert opt.arena.double and opt.arena.storage.shape[0] == (1 + 2 * 3) * opt.arena.n_elements
    _set_random_grads(params, 16)
    opt.step()
    values = [p.numpy() for p in params]
    state = opt.state_dict()["state"]
    opt.double_buffer = False
    _set_random_grads(params, 17)
    grads = [p.grad_numpy() for p in params]
    opt.step()
    assert not opt.arena.double and opt.arena.storage.shape[0] == (1 + 3) * opt.arena.n_elements
    assert all(bound._values["arena"] is opt.arena.buffer for bound in opt._bound.values())
    ref = ReferenceOptimizer("adam", values, lr=0.01)
    ref.t = 1
    for i, s in enumerate(ref.state):
        s.update({"m": np.array(state[i]["exp_avg"], np.float64), "v": np.array(state[i]["exp_avg_sq"], np.float64)})
    ref.step(grads)
    for p, expected in zip(params, ref.params):
        np.testing.assert_allclose(p.numpy(), expected, rtol=1e-5, atol=1e-6)
    assert not Adam(_params(2), double_buffer=False).arena.double
    assert not Adam(_params(2), skip_nonfinite=False).arena.double


def test_state_needed_later_is_allocated_when_hyperparameters_change():
    init, = [np.random.default_rng(14).standard_normal(9).astype(np.float32)]
    p = sopt.Parameter(init)
    opt = SGD([p], lr=0.1)
    assert opt.arena.n_slots == 0
    p.set_grad(np.ones(9))
    opt.step()
    opt.param_groups[0]["momentum"] = 0.5
    p.set_grad(np.ones(9))
    opt.step()
    assert opt.arena.n_slots == 1
    # second step: fresh buffer (zeros, since t > 1) -> buf = 0.5 * 0 + 1 * g
    np.testing.assert_allclose(p.numpy(), init - 0.1 - 0.1, rtol=1e-6)


def _clip_reference(x, g, max_norm, lr):
    """SGD after torch.nn.utils.clip_grad_norm_, in float64."""
    g64 = g.astype(np.float64)
    coef = min(1.0, max_norm / (np.sqrt(np.sum(g64 * g64)) + 1e-6))
    return x.astype(np.float64) - lr * g64 * coef


@pytest.mark.parametrize("double_buffer", [True, False])
@pytest.mark.parametrize("case", ["all 1e30", "two 3e38", "groups of different scale", "huge max_norm"])
def test_clipping_a_finite_gradient_whose_norm_overflows_float32(case, double_buffer):
    """The global norm of finite float32 gradients can exceed float32 (its square long before): the step is
    clipped like torch's clip_grad_norm_ in float64, not skipped as if the gradients held NaN/Inf."""
    rng = np.random.default_rng(21)
    n, max_norm = 20003, 1.0   # 5001 float4 vectors: 5 thread groups of grad_stats, partials combined
    g = rng.standard_normal(n).astype(np.float32)
    if case == "all 1e30":
        g = np.where(g < 0, -1e30, 1e30).astype(np.float32)
    elif case == "two 3e38":
        g[[5, 19000]] = [3e38, -3e38]   # norm 4.2e38 > float32 max; coefficient 2.4e-39 is subnormal
    elif case == "groups of different scale":
        # one 1e30 in the first group, 10000 x 1e28 in later ones: equal shares of the norm at other scales
        g[3] = 1e30
        g[10000:20000] = 1e28
    else:
        g *= 1e13   # scaled sum (|g| > 2^40) while the norm stays below max_grad_norm: no clipping
        max_norm = 1e20
    x = rng.standard_normal(n).astype(np.float32)
    p = sopt.Parameter(x)
    opt = SGD([p], lr=1.0, max_grad_norm=max_norm, poll_every=0, double_buffer=double_buffer)
    p.set_grad(g)
    opt.step()
    assert opt.skipped_steps == 0 and opt.nonfinite_results == 0
    expected = _clip_reference(x, g, max_norm, 1.0)
    scale = np.abs(expected).max()
    np.testing.assert_allclose(p.numpy(), expected, rtol=2e-6, atol=2e-7 * scale)
    assert not p.grad_numpy().any()


def _overflow_kwargs(cls):
    # momentum / centered so that every state slot a rule has is written (and must be left as it was)
    return {SGD: {"momentum": 0.9}, RMSprop: {"momentum": 0.9, "centered": True}, Adam: {"amsgrad": True},
            AdamW: {}, Adagrad: {}}[cls]


@pytest.mark.parametrize("mode", ["default", "max_grad_norm", "double_buffer=False",
                                  "max_grad_norm, double_buffer=False", "skip_nonfinite=False"])
@pytest.mark.parametrize("cls", ALL)
def test_update_that_overflows_is_a_nonfinite_step(cls, mode):
    """lr=1e40, set in param_groups (the constructor refuses an lr float32 stores as Inf), drives every update to
    +-inf/NaN. Double-buffered modes undo the step and count it in skipped_steps; in-place ones cannot undo it and
    count it in nonfinite_results with a warning; skip_nonfinite=False checks nothing."""
    options = {"default": {}, "max_grad_norm": {"max_grad_norm": 1e9},
               "double_buffer=False": {"double_buffer": False},
               "max_grad_norm, double_buffer=False": {"max_grad_norm": 1e9, "double_buffer": False},
               "skip_nonfinite=False": {"skip_nonfinite": False}}[mode]
    with pytest.raises(ValueError, match=r"lr = 1e\+40: float32 stores it as inf"):
        cls(_params(1, seed=30), lr=1e40)
    params = _params(3, seed=31)
    opt = cls(params, lr=0.01, poll_every=0, **_overflow_kwargs(cls), **options)
    _set_random_grads(params, 32)
    opt.step()
    values = [p.numpy() for p in params]
    before = opt.state_dict()["state"]
    opt.param_groups[0]["lr"] = 1e40
    _set_random_grads(params, 33)
    opt.step()
    assert all(not p.grad_numpy().any() for p in params), "gradients are zeroed on every step"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        skipped = opt.poll_skipped()
        results = opt.nonfinite_results
        after = opt.state_dict()["state"]
    messages = " ".join(str(w.message) for w in caught)
    undone = options.get("double_buffer", True) and options.get("skip_nonfinite", True)
    if undone:
        assert (skipped, results) == (1, 0)
        assert "1 step(s) skipped" in messages and "too large for float32" in messages
        for p, v in zip(params, values):
            assert np.array_equal(p.numpy(), v), "an undone step changed a parameter"
        for i, s in before.items():
            for name, value in s.items():
                if name != "step":
                    assert np.array_equal(after[i][name], value), f"state {name} changed on an undone step"
        assert opt.step_count == 1
        opt.param_groups[0]["lr"] = 0.01   # the next step applies, with t = 2
        _set_random_grads(params, 34)
        opt.step()
        assert opt.step_count == 2 and all(np.isfinite(p.numpy()).all() for p in params)
        assert any(not np.array_equal(p.numpy(), v) for p, v in zip(params, values))
    elif "skip_nonfinite" in options:
        assert (skipped, results) == (0, 0) and not caught   # no check
        assert not all(np.isfinite(p.numpy()).all() for p in params)
    else:
        assert (skipped, results) == (0, 1)
        assert "cannot undo: parameters now hold non-finite values" in messages
        assert not all(np.isfinite(p.numpy()).all() for p in params)
        assert opt.step_count == 2


@pytest.mark.parametrize("double_buffer", [True, False])
def test_state_that_overflows_while_values_stay_finite_is_caught(double_buffer):
    """Adam with |g| = 1e20 and no clipping: v = g^2 overflows to inf, the value update m / sqrt(v) is 0, so the
    parameters look fine while the state is spoiled for good: the step is undone (double-buffered) or counted."""
    x = np.linspace(-1.0, 1.0, 10).astype(np.float32)
    p = sopt.Parameter(x)
    opt = Adam([p], lr=0.01, poll_every=0, double_buffer=double_buffer)
    p.set_grad(np.full(10, 1e20))
    opt.step()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        state = opt.state_dict()["state"][0]
    if double_buffer:
        assert (opt.skipped_steps, opt.nonfinite_results) == (1, 0)
        assert np.array_equal(p.numpy(), x) and not state["exp_avg_sq"].any() and not state["exp_avg"].any()
    else:
        assert (opt.skipped_steps, opt.nonfinite_results) == (0, 1)
        assert np.isinf(state["exp_avg_sq"]).all()
