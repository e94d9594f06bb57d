"""save / load: one atomic file; a run saved, loaded in a new process and continued follows the same
trajectory as one that never stopped."""

import gc
import json
import os
import pathlib
import re
import subprocess
import sys
import warnings

import numpy as np
import pytest

import sopt
from tests.optim.test_state_dict import _plain

REPO = pathlib.Path(__file__).resolve().parents[2]

SCRIPT = r"""
import sys, json, numpy as np, sopt
from sopt.optim import Adam
mode, path, out = sys.argv[1], sys.argv[2], sys.argv[3]
rng_init = np.random.default_rng(0)
params = [sopt.Parameter(rng_init.standard_normal(s), name=f"p{i}") for i, s in enumerate([(5,), (3, 4)])]
opt = Adam(params, lr=0.05, amsgrad=True, max_grad_norm=2.0)
start, stop = {"full": (0, 20), "first": (0, 10), "second": (10, 20)}[mode]
if mode == "second":
    extra = sopt.load(path, parameters=params, optimizer=opt)
    assert extra["next_step"] == 10, extra
for k in range(start, stop):
    g = np.random.default_rng(100 + k)
    for p in params:
        p.set_grad(g.standard_normal(p.shape) * (50.0 if k % 7 == 3 else 1.0))
    if k == 4:
        params[0].set_grad(np.full(5, np.nan))  # a skipped step inside the trajectory
    opt.step()
if mode == "first":
    sopt.save(path, optimizer=opt, extra={"next_step": 10, "note": "half way"})
np.save(out, np.concatenate([p.numpy().ravel() for p in params]))
"""


def _run(*args):
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    subprocess.run([sys.executable, "-c", SCRIPT, *map(str, args)], check=True, env=env, cwd=REPO)


def test_save_load_in_a_fresh_process_continues_the_same_trajectory(tmp_path):
    ckpt = tmp_path / "run.ckpt"
    _run("full", ckpt, tmp_path / "full.npy")
    _run("first", ckpt, tmp_path / "first.npy")
    _run("second", ckpt, tmp_path / "second.npy")
    full, second = np.load(tmp_path / "full.npy"), np.load(tmp_path / "second.npy")
    assert np.array_equal(full, second)
    assert not np.array_equal(np.load(tmp_path / "first.npy"), full)


def test_save_is_atomic_and_leaves_no_temporary_files(tmp_path, monkeypatch):
    p = sopt.Parameter(np.arange(4.0), name="w")
    opt = sopt.optim.SGD([p], lr=0.1, momentum=0.9)
    path = tmp_path / "ck.npz"
    sopt.save(path, optimizer=opt)
    before = path.read_bytes()

    def boom(*a, **k):
        raise OSError("disk full")
    monkeypatch.setattr(os, "replace", boom)
    p.load(np.zeros(4))
    with pytest.raises(OSError, match="disk full"):
        sopt.save(path, optimizer=opt)
    assert path.read_bytes() == before
    assert sorted(x.name for x in tmp_path.iterdir()) == ["ck.npz"]
    monkeypatch.undo()
    q = sopt.Parameter(np.ones(4), name="w")
    sopt.load(path, parameters=[q])
    np.testing.assert_array_equal(q.numpy(), np.arange(4.0))


def test_load_errors_name_the_problem(tmp_path):
    p = sopt.Parameter(np.zeros(3), name="w")
    sopt.save(tmp_path / "a.npz", parameters=[p])
    with pytest.raises(ValueError, match=r"'w' has shape \(4,\), the checkpoint's 'w' has \(3,\)"):
        sopt.load(tmp_path / "a.npz", parameters=[sopt.Parameter(np.zeros(4), name="w")])
    with pytest.raises(ValueError, match="does not exist"):
        sopt.load(tmp_path / "missing.npz", parameters=[p])
    (tmp_path / "junk.npz").write_text("not a checkpoint")
    with pytest.raises(ValueError, match="is not a sopt checkpoint"):
        sopt.load(tmp_path / "junk.npz", parameters=[p])
    with pytest.raises(ValueError, match="has no optimiser state"):
        sopt.load(tmp_path / "a.npz", optimizer=sopt.optim.Adam([sopt.Parameter(np.zeros(3))]))


# -- loading is all or nothing -----------------------------------------------------------------------------------
def _trained(lr=0.05):
    params = [sopt.Parameter(np.linspace(-1, 1, 6).reshape(2, 3), name="a"), sopt.Parameter(np.ones(4), name="b")]
    opt = sopt.optim.Adam(params, lr=lr, amsgrad=True)
    sched = sopt.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    for k in range(3):
        for p in params:
            p.set_grad(np.random.default_rng(k).standard_normal(p.shape))
        opt.step()
        sched.step()
    return params, opt, sched


def _snapshot(params, opt, sched):
    return [p.numpy() for p in params], _plain(opt.state_dict()), sched.state_dict()


def _assert_unchanged(before, params, opt, sched):
    values, opt_state, sched_state = before
    for v, p in zip(values, params):
        np.testing.assert_array_equal(p.numpy(), v)
    assert _plain(opt.state_dict()) == opt_state
    assert sched.state_dict() == sched_state


def _rewrite(src, dst, edit_meta=None, edit_arrays=None):
    """Copy checkpoint ``src`` to ``dst`` with its metadata / arrays edited."""
    with np.load(src) as data:
        arrays = {k: data[k] for k in data.files}
    meta = json.loads(bytes(arrays.pop("__meta__")).decode())
    if edit_meta:
        edit_meta(meta)
    if edit_arrays:
        edit_arrays(arrays)
    np.savez(dst, __meta__=np.frombuffer(json.dumps(meta).encode(), np.uint8), **arrays)


def _entry(encoded, key):
    """The [key, value] pair of ``key`` in a dict as save() encodes it."""
    return next(pair for pair in encoded["__dict__"] if pair[0] == key)


def _bad_files(tmp_path, good):
    raw = good.read_bytes()
    middle = len(raw) // 2
    flipped = bytearray(raw)
    flipped[middle:middle + 16] = bytes(b ^ 0xFF for b in flipped[middle:middle + 16])
    files = {"flipped.npz": bytes(flipped), "truncated.npz": raw[:middle], "empty.npz": b"",
             "text.npz": b"not a checkpoint", "no_end.npz": raw[:-10]}
    for name, content in files.items():
        (tmp_path / name).write_bytes(content)
    np.save(tmp_path / "array.npy", np.zeros(3))
    np.savez(tmp_path / "no_meta.npz", x=np.zeros(3))

    def set_lr_nan(meta):
        groups = _entry(meta["optimizer"], "param_groups")[1]["__list__"]
        _entry(groups[0], "lr")[1] = float("nan")
    _rewrite(good, tmp_path / "lr_nan.npz", set_lr_nan)
    _rewrite(good, tmp_path / "format.npz", lambda m: m.update(format="sopt-checkpoint-99"))
    _rewrite(good, tmp_path / "shape.npz", edit_arrays=lambda a: a.update({"param/1": np.zeros(5, np.float32)}))
    _rewrite(good, tmp_path / "nan_value.npz", edit_arrays=lambda a: a.update({"param/1": np.full(4, np.nan, np.float32)}))
    _rewrite(good, tmp_path / "no_state.npz", edit_arrays=lambda a: a.pop(next(k for k in a if k.startswith("optim"))))
    _rewrite(good, tmp_path / "sched_gamma.npz", lambda m: _entry(m["scheduler"], "gamma").__setitem__(1, -1.0))
    return [*files, "array.npy", "no_meta.npz", "lr_nan.npz", "format.npz", "shape.npz", "nan_value.npz",
            "no_state.npz", "sched_gamma.npz"]


def test_bad_files_raise_one_error_naming_the_file_and_change_nothing(tmp_path):
    params, opt, sched = _trained()
    good = tmp_path / "good.npz"
    sopt.save(good, optimizer=opt, scheduler=sched)
    names = _bad_files(tmp_path, good)
    for p in params:   # move on from the saved state, so a partial load would show
        p.set_grad(np.full(p.shape, 0.3))
    opt.step()
    sched.step()
    before = _snapshot(params, opt, sched)
    for name in names:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ResourceWarning)
            with pytest.raises(sopt.CheckpointError, match=re.escape(name)) as info:
                sopt.load(tmp_path / name, optimizer=opt, scheduler=sched)
            gc.collect()
        assert isinstance(info.value, ValueError)
        assert not [w for w in caught if issubclass(w.category, ResourceWarning)], name
        _assert_unchanged(before, params, opt, sched)
    # the good file still loads, and then gives the saved state
    sopt.load(good, optimizer=opt, scheduler=sched)
    assert sched.state_dict()["last_epoch"] == 3 and opt.state_dict()["step"] == 3


def test_load_closes_the_file(tmp_path):
    p = sopt.Parameter(np.arange(3.0), name="w")
    sopt.save(tmp_path / "a.npz", parameters=[p])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        sopt.load(tmp_path / "a.npz", parameters=[p])
        gc.collect()
    assert not [w for w in caught if issubclass(w.category, ResourceWarning)]


# -- parameters are matched by name --------------------------------------------------------------------------------
def test_parameters_are_matched_by_name_in_any_order(tmp_path):
    a, b = sopt.Parameter(np.full(3, 1.0), name="a"), sopt.Parameter(np.full(3, 2.0), name="b")
    sopt.save(tmp_path / "ck.npz", parameters=[a, b])
    b2, a2 = sopt.Parameter(np.zeros(3), name="b"), sopt.Parameter(np.zeros(3), name="a")
    sopt.load(tmp_path / "ck.npz", parameters=[b2, a2])
    np.testing.assert_array_equal(a2.numpy(), np.full(3, 1.0))
    np.testing.assert_array_equal(b2.numpy(), np.full(3, 2.0))
    x, y = sopt.Parameter(np.zeros(3), name="x"), sopt.Parameter(np.zeros(3), name="b")
    with pytest.raises(sopt.CheckpointError, match=r"not in the checkpoint: \['x'\].*not given: \['a'\]"):
        sopt.load(tmp_path / "ck.npz", parameters=[x, y])
    assert not x.numpy().any() and not y.numpy().any()


def test_modules_and_dicts_match_by_qualified_name_and_repeated_names_by_position(tmp_path):
    # two layers' "weight": the names repeat, the qualified keys don't
    w0, w1 = sopt.Parameter(np.full(2, 1.0), name="weight"), sopt.Parameter(np.full(2, 2.0), name="weight")
    sopt.save(tmp_path / "ck.npz", parameters={"0.weight": w0, "1.weight": w1})
    v0, v1 = sopt.Parameter(np.zeros(2), name="weight"), sopt.Parameter(np.zeros(2), name="weight")
    sopt.load(tmp_path / "ck.npz", parameters={"1.weight": v1, "0.weight": v0})
    assert v0.numpy().tolist() == [1.0, 1.0] and v1.numpy().tolist() == [2.0, 2.0]
    u0, u1 = sopt.Parameter(np.zeros(2), name="weight"), sopt.Parameter(np.zeros(2), name="weight")
    sopt.load(tmp_path / "ck.npz", parameters=[u0, u1])   # p.name on one side: by position
    assert u0.numpy().tolist() == [1.0, 1.0] and u1.numpy().tolist() == [2.0, 2.0]
    t0, t1 = sopt.Parameter(np.zeros(2), name="weight"), sopt.Parameter(np.zeros(2), name="bias")
    with pytest.raises(sopt.CheckpointError, match=r"matched by position.*1: 'bias' here, 'weight' saved"):
        sopt.load(tmp_path / "ck.npz", parameters=[t0, t1])
    assert not t0.numpy().any()


def test_an_optimizer_holding_its_parameters_in_another_order_is_refused(tmp_path):
    a, b = sopt.Parameter(np.full(3, 1.0), name="a"), sopt.Parameter(np.full(3, 2.0), name="b")
    opt = sopt.optim.SGD([a, b], lr=0.1, momentum=0.9)
    sopt.save(tmp_path / "ck.npz", optimizer=opt)
    b2, a2 = sopt.Parameter(np.zeros(3), name="b"), sopt.Parameter(np.zeros(3), name="a")
    opt2 = sopt.optim.SGD([b2, a2], lr=0.1, momentum=0.9)
    with pytest.raises(sopt.CheckpointError, match=r"another order.*0: 'b' here, 'a' saved"):
        sopt.load(tmp_path / "ck.npz", optimizer=opt2)
    assert not a2.numpy().any() and not b2.numpy().any()


# -- leftovers of interrupted saves --------------------------------------------------------------------------------
def test_save_removes_leftover_temporary_files_of_that_path_only(tmp_path):
    p = sopt.Parameter(np.zeros(2), name="w")
    leftovers = [".ck.npz.k2x_9ab0.tmp", ".ck.npz.abcdefgh.tmp"]
    kept = [".ck.npz.ABCDEFGH.tmp", ".ck.npz.abc.tmp", ".ck.npz.abcdefgh.txt", ".other.npz.abcdefgh.tmp",
            "ck.npz.abcdefgh.tmp", ".ck.npz.abcdefghij.tmp", "notes.txt"]
    for name in leftovers + kept:
        (tmp_path / name).write_bytes(b"x" * 100)
    sopt.save(tmp_path / "ck.npz", parameters=[p])
    assert sorted(x.name for x in tmp_path.iterdir()) == sorted(kept + ["ck.npz"])
