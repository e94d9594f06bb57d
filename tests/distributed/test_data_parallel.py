"""Data-parallel training end to end (``sopt run --nproc 2``, two real processes; gloo on lavapipe here, NCCL in
the CUDA variant, which runs where 2 CUDA GPUs are visible): the parameters after K steps equal one process's with
the same global batch, bit for bit in deterministic mode and to 1e-6 relative otherwise; a run stopped by SIGTERM
and resumed ends where an uninterrupted one ends; a failing rank stops the run with its one-line error; configs
that cannot be split are refused before anything starts.

Why bit for bit: with 2 processes each rank's gradient, the mean over its half of the batch, is exactly twice the
sum of its rows' contributions to the whole batch's mean (a power-of-two scale), and at batch 1024 each rank's
half is one 512-row chunk of sopt.nn.Linear's deterministic weight-gradient sum, so (g_0 + g_1) / 2 is the sum one
process makes (chunk 0 + chunk 1). At batch 2048 (two chunks per rank) the sums associate differently: close, not
equal.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="data-parallel training needs torch (pip install 'sopt[distributed]')")

import sopt  # noqa: E402
from tests.experiments.test_cli import sopt_main  # noqa: E402  (sopt ARGV in this process)

ROOT = pathlib.Path(__file__).resolve().parents[2]
TIMING = ("time_s", "steps_per_s")
PROBLEMS = "tests.distributed.field_problems"
# the first run of neural_field_image's defaults, smaller: 60 steps of batch 1024 on a 16x16 image
CONFIG = ["steps=60", "image_size=16", "batch_size=1024", "log_every=10", "checkpoint_every=10", "eval_every=30"]


def _cuda_gpus() -> int:
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


DEVICES = [
    pytest.param("vulkan", marks=pytest.mark.skipif(
        _cuda_gpus() > 0, reason="sopt runs on CUDA on this machine; the cuda variant covers it")),
    pytest.param("cuda", marks=pytest.mark.skipif(_cuda_gpus() < 2, reason="needs 2 CUDA GPUs (NCCL)")),
]


def sopt_process(argv: list[str], device: str, **env: str) -> subprocess.CompletedProcess:
    """``python -m sopt ARGV`` as a real process of this checkout on ``device``, output captured."""
    full = {**os.environ, "PYTHONPATH": str(ROOT), "SOPT_DEVICE": device, **env}
    return subprocess.run([sys.executable, "-m", "sopt", *argv], cwd=ROOT, env=full, capture_output=True,
                          text=True, timeout=600)


def parameters(run_dir: pathlib.Path) -> dict[str, np.ndarray]:
    with np.load(run_dir / "checkpoint.npz") as data:
        return {k: data[k] for k in data.files if k.startswith("param/")}


def records(run_dir: pathlib.Path) -> list[dict[str, Any]]:
    return [{k: v for k, v in json.loads(line).items() if k not in TIMING}
            for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def summary(run_dir: pathlib.Path) -> dict[str, Any]:
    return json.loads((run_dir / "summary.json").read_text())


def _two_processes(tmp: pathlib.Path, device: str, overrides: list[str], name: str) -> pathlib.Path:
    out = tmp / name
    done = sopt_process(["run", "--problem", "neural_field_image", *overrides, "--out", str(out), "--no-progress",
                         "--nproc", "2"], device)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"run directory: {out}" in done.stdout and "finished 60 steps" in done.stdout
    return out


def _one_process(tmp: pathlib.Path, device: str, overrides: list[str], name: str) -> pathlib.Path:
    if sopt.device_kind() != device:
        pytest.skip(f"the one-process reference runs in this process, on {sopt.device_kind()}")
    out = tmp / name
    code, _, err = sopt_main(["run", "--problem", "neural_field_image", *overrides, "--out", str(out),
                              "--no-progress"])
    assert code == 0, err[-3000:]
    return out


@pytest.fixture(scope="module", params=DEVICES)
def deterministic_runs(request, tmp_path_factory) -> tuple[str, pathlib.Path, pathlib.Path]:
    """(device, two processes' run, one process's run) of CONFIG with deterministic=true."""
    device, tmp = request.param, tmp_path_factory.mktemp("deterministic")
    overrides = [*CONFIG, "deterministic=true"]
    return device, _two_processes(tmp, device, overrides, "two"), _one_process(tmp, device, overrides, "one")


def test_deterministic_two_processes_equal_one_bit_for_bit(deterministic_runs) -> None:
    device, two, one = deterministic_runs
    p2, p1 = parameters(two), parameters(one)
    assert p2.keys() == p1.keys() and len(p2) == 6   # 3 Linear layers' weights and biases
    for key in p1:
        np.testing.assert_array_equal(p2[key], p1[key], err_msg=key)
    s2, s1 = summary(two), summary(one)
    assert s2["status"] == s1["status"] == "finished" and s2["steps"] == 60
    assert s2["metrics"]["psnr"] == s1["metrics"]["psnr"]   # the same parameters evaluated
    # the logged loss is the whole batch's: the mean of the two halves' means
    assert s2["metrics"]["loss"] == pytest.approx(s1["metrics"]["loss"], rel=1e-6)
    assert [r["step"] for r in records(two)] == [r["step"] for r in records(one)]
    # rank 0 alone wrote the run directory: one of each file
    assert sorted(p.name for p in two.iterdir()) == sorted(p.name for p in one.iterdir())


@pytest.mark.parametrize("device", DEVICES)
def test_two_processes_equal_one_to_1e6_relative(device, tmp_path) -> None:
    # batch 2048: two 512-row chunks per rank, added by float atomics in no fixed order (deterministic=false)
    overrides = [*CONFIG, "batch_size=2048", "steps=30", "eval_every=30"]
    two = tmp_path / "two"
    done = sopt_process(["run", "--problem", "neural_field_image", *overrides, "--out", str(two), "--no-progress",
                         "--nproc", "2"], device)
    assert done.returncode == 0, done.stderr[-3000:]
    one = _one_process(tmp_path, device, overrides, "one")
    p2, p1 = parameters(two), parameters(one)
    for key in p1:
        scale = np.abs(p1[key]).max()
        assert np.abs(p2[key] - p1[key]).max() <= 1e-6 * scale, key
    assert summary(two)["metrics"]["loss"] == pytest.approx(summary(one)["metrics"]["loss"], rel=1e-5)


def test_sigterm_stops_every_rank_and_resume_ends_where_an_uninterrupted_run_ends(deterministic_runs,
                                                                                 tmp_path) -> None:
    device, uninterrupted, _ = deterministic_runs
    out = tmp_path / "stopped"
    problem = f"{PROBLEMS}:SignallingField"
    # rank 0 sends SIGTERM to the launcher on metrics step 20; the launcher passes it to both ranks
    done = sopt_process(["run", "--problem", problem, *CONFIG, "deterministic=true", "--out", str(out),
                         "--no-progress", "--nproc", "2"], device, FIELD_STOP_AT="20")
    assert done.returncode == 0, done.stderr[-3000:]
    stopped = summary(out)
    assert stopped["status"] == "interrupted" and 20 < stopped["steps"] < 60, stopped
    assert f"sopt resume {out} --nproc 2" in done.stdout
    resumed = sopt_process(["resume", str(out), "--no-progress", "--nproc", "2"], device)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert summary(out)["status"] == "finished" and summary(out)["steps"] == 60
    p_resumed, p_whole = parameters(out), parameters(uninterrupted)
    for key in p_whole:
        np.testing.assert_array_equal(p_resumed[key], p_whole[key], err_msg=key)
    assert records(out) == records(uninterrupted)


@pytest.mark.parametrize("device", DEVICES)
def test_a_failing_rank_stops_the_run_with_its_one_line_error(device, tmp_path) -> None:
    out = tmp_path / "failing"
    done = sopt_process(["run", "--problem", f"{PROBLEMS}:FailingField", *CONFIG, "--out", str(out),
                         "--no-progress", "--nproc", "2"], device, FIELD_FAIL_AT="10")
    assert done.returncode == 2
    assert ("error: rank 1 of 2 failed (exit status 2): RuntimeError: rank 1 broke on purpose"
            in done.stderr.splitlines()), done.stderr[-3000:]
    assert summary(out)["steps"] <= 10   # rank 0 went no further than its partner


def test_configs_that_cannot_be_split_are_refused_before_anything_starts(tmp_path, monkeypatch) -> None:
    from sopt.distributed import splittable   # a machine of one GPU runs no 2 processes: not what is tested here
    monkeypatch.setattr(splittable, "process_limit", lambda: (8, "8 stand-in GPUs"))
    code, out, err = sopt_main(["run", "--problem", "neural_field_image", "batch_size=1001", "--root",
                                str(tmp_path), "--nproc", "2"])
    assert (code, out) == (2, "")
    assert err.splitlines() == ["error: batch_size=1001 does not split evenly over 2 processes: give a multiple of "
                                "2 (e.g. 1000 or 1002); batch_size is the global batch, each process draws "
                                "batch_size / 2 of it"]
    code, out, err = sopt_main(["run", "--problem", "fit_projectile", "--root", str(tmp_path), "--nproc", "2"])
    assert (code, out) == (2, "")
    assert err.startswith("error: problem 'fit_projectile' cannot be trained on 2 processes")
    code, _, err = sopt_main(["run", "--problem", "neural_field_image", "--nproc", "0"])
    assert code == 2 and "--nproc 0 is out of range" in err
    assert list(tmp_path.iterdir()) == []
