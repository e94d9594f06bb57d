"""save / load: one atomic file; a run saved, loaded in a new process and continued follows the same
trajectory as one that never stopped."""

import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

import sopt

REPO = pathlib.Path(__file__).resolve().parents[1]

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
