"""Gradient sources (sopt.autodiff.grad_source): HashGridEncoding's float16 sums left pending after a backward and
folded into Adam's update, against the same sums flushed (hashgrid_half_to_grad_kernel) before a plain update.

One sample per backward: each table entry then gets its terms from one thread in program order, so the float16 sums
are the same bits in both twins (several samples' atomics would add in a run-dependent order)."""

from __future__ import annotations

import numpy as np
import pytest

from sopt import Parameter
from sopt.nn import HashGridEncoding
from sopt.nn.hashgrid import half_shift_base
from sopt.optim import SGD, Adam
from tests.nn.reference import hashgrid as ref_hashgrid

CONFIG = dict(in_dims=2, n_levels=3, n_features=2, log2_table_size=6, base_resolution=3, per_level_scale=2.0)


def _twin(seed: int = 1, **options):
    """An encoding with a parameter before and after its table in the arena (the table starts at vector 2) and an
    Adam over the three; ``deterministic=True``: its int64 fixed-point sums instead of float16 ones."""
    deterministic = options.pop("deterministic", False)
    enc = HashGridEncoding(**CONFIG, seed=seed, **({"deterministic": True} if deterministic
                                                    else {"gradient_precision": "float16"}))
    enc.table.load(np.random.default_rng(7).normal(size=enc.table.shape))
    before, after = Parameter(np.linspace(-1, 1, 6), name="before"), Parameter(np.ones(5), name="after")
    lazy = options.pop("lazy", False)
    groups = [{"params": [before, enc.table], "lazy": lazy}, {"params": [after]}]
    return enc, before, after, Adam(groups, lr=1e-2, **options)


def _backward(enc: HashGridEncoding, x: np.ndarray, dy: np.ndarray) -> None:
    y = enc(x)
    y.grad.copy_from_numpy(dy)
    enc.backward(x, y)


def _data(steps: int, calls: int = 1, rows: int = 1):
    rng = np.random.default_rng(5)
    return [[(rng.uniform(0, 1, (rows, 2)).astype(np.float32),
              (rng.normal(size=(rows, 6)) * 10.0**rng.uniform(-4, 1)).astype(np.float32))
             for _ in range(calls)] for _ in range(steps)]


def _states(enc, before, after, opt):
    return [enc.table.numpy(), before.numpy(), after.numpy(),
            *[opt.arena.slot(s).to_numpy().copy() for s in sorted(opt._slots.values())]]


def _run(steps, fold: bool, options=None, between=None):
    enc, before, after, opt = _twin(**(options or {}))
    for k, calls in enumerate(steps):
        for x, dy in calls:
            _backward(enc, x, dy)
            assert enc.table.pending_grad is not None   # the sums were left pending
        before.set_grad(np.full(6, 0.1 * (k + 1)))
        after.set_grad(np.arange(5.0) - k)
        if between is not None:
            between(enc, opt)
        if not fold:
            enc.table.flush_grad()   # pass 3, then the plain update
        opt.step()
        assert enc.table.pending_grad is None and not opt.arena.pending
    roles = {key[0] for key in opt._bound}
    return _states(enc, before, after, opt), roles, (enc, before, after, opt)


@pytest.mark.parametrize("options", [{}, {"skip_nonfinite": False}, {"lazy": True}, {"amsgrad": True},
                                     {"double_buffer": False}, {"max_grad_norm": 0.5}])
def test_folded_steps_match_flushed_bit_for_bit(options):
    data = _data(4)
    folded, roles, _ = _run(data, True, dict(options))
    flushed, plain_roles, _ = _run(data, False, dict(options))
    for a, b in zip(folded, flushed):
        np.testing.assert_array_equal(a, b)
    assert not any(r.endswith("_fold") for r in plain_roles)
    # the update folds where nothing reads the gradients before it; the scan and the clipping statistics flush
    folds = "double_buffer" not in options and "max_grad_norm" not in options
    assert any(r.endswith("_fold") for r in roles) == folds, roles
    # the steps changed the table (a fold that lost the sums would leave rows where a flush moved them)
    assert np.abs(folded[0] - np.random.default_rng(7).normal(size=folded[0].shape).astype(np.float32)).max() > 1e-3


@pytest.mark.parametrize("options", [{}, {"lazy": True}, {"skip_nonfinite": False}])
def test_deterministic_sums_fold_bit_for_bit(options):
    """The int64 fixed-point sums of deterministic mode (many samples a call: integer sums are order-free) folded
    by FixedSumsFold give the bits hashgrid_fixed_to_grad_kernel's pass then the plain update give."""
    data = _data(3, rows=200)
    folded, roles, _ = _run(data, True, {"deterministic": True, **options})
    flushed, plain_roles, _ = _run(data, False, {"deterministic": True, **options})
    assert any(r.endswith("_fold_fixed") for r in roles), roles
    assert not any("_fold" in r for r in plain_roles)
    for a, b in zip(folded, flushed):
        np.testing.assert_array_equal(a, b)
    assert np.abs(folded[0] - np.random.default_rng(7).normal(size=folded[0].shape).astype(np.float32)).max() > 1e-3


def test_two_backward_calls_then_one_step_match_flushed():
    data = _data(3, calls=2)   # a second backward flushes the first's sums (another S) before its own pass 1
    folded, roles, _ = _run(data, True)
    flushed, _, _ = _run(data, False)
    assert "update_fold" in roles
    for a, b in zip(folded, flushed):
        np.testing.assert_array_equal(a, b)


def test_reading_the_gradient_flushes_then_the_step_uses_it():
    enc, before, after, opt = _twin()
    rng = np.random.default_rng(11)
    x = rng.uniform(0, 1, size=(3000, 2)).astype(np.float32)
    dy = (rng.normal(size=(3000, 6)) * 1e-3).astype(np.float32)
    _backward(enc, x, dy)
    assert enc.table.pending_grad is not None
    _, _, rtable = ref_hashgrid(x, enc.table.numpy(), enc.levels, dy.astype(np.float64))
    _, _, abs_terms = ref_hashgrid(x, enc.table.numpy(), enc.levels, np.abs(dy).astype(np.float64))
    g = enc.table.grad_numpy()   # flushes: the converted gradient
    assert enc.table.pending_grad is None
    err = np.abs(g - rtable)
    assert (err <= 16 * 2.0**-11 * abs_terms + 1e-12).all()
    assert np.abs(rtable).max() > 1e-3
    # the step then uses exactly that gradient: a twin given it with set_grad steps to the same values
    twin, tb, ta, topt = _twin()
    twin.table.set_grad(g)
    opt.step()
    topt.step()
    np.testing.assert_array_equal(enc.table.numpy(), twin.table.numpy())
    assert not np.array_equal(enc.table.numpy(), np.random.default_rng(7).normal(size=g.shape).astype(np.float32))
    assert not enc.table.grad_numpy().any()


@pytest.mark.parametrize("how", ["parameter", "optimizer", "set_grad"])
def test_zero_grad_discards_the_sums(how):
    enc, before, after, opt = _twin()
    (x, dy), = _data(1)[0]
    _backward(enc, x, dy)
    start = enc.table.numpy()
    if how == "parameter":
        enc.table.zero_grad()
    elif how == "optimizer":
        opt.zero_grad()
    else:
        enc.table.set_grad(np.zeros(enc.table.shape))
    assert enc.table.pending_grad is None
    opt.step()
    np.testing.assert_array_equal(enc.table.numpy(), start)   # a zero gradient: Adam's first step moves nothing
    # nothing left behind: the next backward's gradient is that backward's alone, as on a fresh encoding
    (x2, dy2), = _data(2)[1]
    _backward(enc, x2, dy2)
    fresh, *_ = _twin()
    fresh.table.load(enc.table.numpy())
    _backward(fresh, x2, dy2)
    np.testing.assert_array_equal(enc.table.grad_numpy(), fresh.table.grad_numpy())
    assert enc.table.grad_numpy().any()


@pytest.mark.parametrize("options", [{}, {"double_buffer": False}])
def test_nan_in_dy_skips_the_step_and_clears_the_sums(options):
    data = _data(3)
    x, dy = data[1][0]
    dy = dy.copy()
    dy[0, 3] = np.nan
    data[1] = [(x, dy)]
    with pytest.warns(RuntimeWarning, match="skipped"):
        folded, _, (enc, _, _, opt) = _run(data, True, dict(options, poll_every=1))
        flushed, _, (_, _, _, fopt) = _run(data, False, dict(options, poll_every=1))
    assert opt.skipped_steps == 1 and fopt.skipped_steps == 1
    for a, b in zip(folded, flushed):
        np.testing.assert_array_equal(a, b)
    assert np.isfinite(folded[0]).all()
    # a step skipped as a NaN gradient is: the table as after the two clean steps only (the other parameters' set
    # gradients depend on the step's index)
    clean, _, _ = _run([data[0], data[2]], False)
    np.testing.assert_array_equal(folded[0], clean[0])


def test_the_fold_handles_a_clipped_sum_as_pass_3():
    # every sample at one point: the finest level's float16 sums overflow and are clipped to +-65504 * 2^-S
    x = np.full((4000, 2), 0.3, np.float32)
    dy = np.ones((4000, 6), np.float32)
    enc, _, _, opt = _twin()
    twin, _, _, topt = _twin()
    _backward(enc, x, dy)
    _backward(twin, x, dy)
    twin.table.flush_grad()
    g = twin.table.grad_numpy()
    q = half_shift_base(enc.levels, enc.coarse_levels, 4000, 2)
    top = enc.levels[-1]
    assert np.isclose(g[top.offset:top.offset + top.size].max(), 65504.0 * 2.0**-q, rtol=1e-6)
    # the same sums (all terms equal: any order gives the same float16 sum) folded or flushed
    opt.step()
    twin.table.set_grad(g)   # (already there: set_grad overwrites with the same)
    topt.step()
    np.testing.assert_array_equal(enc.table.numpy(), twin.table.numpy())


def test_optimisers_without_fold_kernels_get_flushed_gradients():
    enc = HashGridEncoding(**CONFIG, seed=1, gradient_precision="float16")
    opt = SGD([enc.table], lr=0.5)
    (x, dy), = _data(1)[0]
    _backward(enc, x, dy)
    assert enc.table.pending_grad is None   # nobody folds: pass 3 recorded by the backward
    g = enc.table.grad_numpy()
    start = enc.table.numpy()
    opt.step()
    np.testing.assert_allclose(enc.table.numpy(), start - 0.5 * g, rtol=1e-6, atol=1e-7)
    assert g.any()


def test_a_second_source_in_one_optimiser_is_flushed():
    a = HashGridEncoding(**CONFIG, seed=1, gradient_precision="float16")
    b = HashGridEncoding(**CONFIG, seed=2, gradient_precision="float16")
    fa = HashGridEncoding(**CONFIG, seed=1, gradient_precision="float16")
    fb = HashGridEncoding(**CONFIG, seed=2, gradient_precision="float16")
    opt, fopt = Adam([a.table, b.table], lr=1e-2), Adam([fa.table, fb.table], lr=1e-2)
    for (x, dy), in _data(3):
        for enc in (a, b, fa, fb):
            _backward(enc, x, dy)
        assert len(opt.arena.pending) == 2
        fopt.flush_pending()
        opt.step()
        fopt.step()
    np.testing.assert_array_equal(a.table.numpy(), fa.table.numpy())
    np.testing.assert_array_equal(b.table.numpy(), fb.table.numpy())
    assert "update_fold" in {key[0] for key in opt._bound}


def test_a_gradient_set_before_the_backward_is_read_by_the_fold():
    # the fold skips the float32 gradient where it is known to be +0 (Parameter.grad_zero_from: after a step only
    # the coarse rows were added to); a gradient set before the backward makes it read all of it, as a flush does
    data = _data(3)
    rng = np.random.default_rng(19)
    extra = [rng.normal(size=(len(_twin()[0].table.numpy()), 2)) for _ in data]

    def run(fold: bool):
        enc, before, after, opt = _twin()
        for k, calls in enumerate(data):
            if k == 1:   # one step with the whole float32 gradient set first, the others with none
                enc.table.set_grad(extra[k])
                assert enc.table.grad_zero_from == enc.table.size
            for x, dy in calls:
                _backward(enc, x, dy)
            if k == 2:   # after a step at most the coarse levels' rows were written (one sample: none)
                assert enc.table.grad_zero_from == 0
            if not fold:
                enc.table.flush_grad()
            opt.step()
            assert enc.table.grad_zero_from == 0
        return _states(enc, before, after, opt)

    for a, b in zip(run(True), run(False)):
        np.testing.assert_array_equal(a, b)
