"""A batch split over processes: each part is its rows of the batch one process draws (same seed and step), so the
parts put together are that batch; a batch that does not split evenly, or a config without one, is refused."""

from __future__ import annotations

import os
import pathlib
import types

import numpy as np
import pytest

from sopt.distributed.splittable import check_splittable
from sopt.train import BatchSampler
from sopt.train.batch_sampler import reference_indices


def _dataset(n_rows: int) -> tuple[np.ndarray, np.ndarray]:
    rows = np.arange(n_rows, dtype=np.float32)[:, None]
    return np.hstack([rows, rows * 0.5]), -rows


@pytest.mark.parametrize("world_size", [2, 3])
def test_the_parts_of_a_split_batch_put_together_are_the_whole_batch(world_size: int) -> None:
    x, y = _dataset(101)
    whole = BatchSampler(x, y, batch_size=48, seed=9)
    parts = []
    for rank in range(world_size):
        sampler = BatchSampler(x, y, batch_size=48, seed=9)
        sampler.split(rank, world_size)
        assert sampler.batch_size == 48 // world_size and sampler.first_row == rank * (48 // world_size)
        parts.append(sampler)
    for step in (0, 7):
        batch = whole.sample(step)
        drawn = [p.sample(step) for p in parts]
        np.testing.assert_array_equal(np.concatenate([d.inputs.to_numpy() for d in drawn]), batch.inputs.to_numpy())
        np.testing.assert_array_equal(np.concatenate([d.targets.to_numpy() for d in drawn]), batch.targets.to_numpy())
        np.testing.assert_array_equal(parts[-1].indices.to_numpy(),
                                      reference_indices(9, step, 48 // world_size, 101, first_row=48 - 48 // world_size))


def test_a_batch_that_does_not_split_evenly_is_refused_and_nothing_changes() -> None:
    sampler = BatchSampler(*_dataset(10), batch_size=10, seed=0)
    with pytest.raises(ValueError, match="batch_size 10 does not split evenly over 3 processes"):
        sampler.split(0, 3)
    with pytest.raises(ValueError, match=r"rank must be in \[0, 2\)"):
        sampler.split(2, 2)
    assert sampler.batch_size == 10 and sampler.first_row == 0 and sampler.batch.inputs.shape == (10, 2)
    sampler.split(1, 2)
    with pytest.raises(ValueError, match="split already"):
        sampler.split(0, 2)


def test_check_splittable_names_the_problem_or_the_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util
    from problems.fit_projectile.problem import FitProjectile
    from problems.neural_field_image.problem import NeuralFieldImage
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)   # torch not installed
    with pytest.raises(ValueError, match=r"^--nproc 4 needs PyTorch \(torch.distributed carries the gradients\): "
                                         r"pip install 'sopt\[distributed\]'$"):
        check_splittable(NeuralFieldImage, types.SimpleNamespace(batch_size=2048), 4)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object())   # installed (not imported here)
    check_splittable(FitProjectile, types.SimpleNamespace(), 1)   # one process: anything goes
    check_splittable(NeuralFieldImage, types.SimpleNamespace(batch_size=2048), 4)
    with pytest.raises(ValueError, match="problem 'fit_projectile' cannot be trained on 2 processes"):
        check_splittable(FitProjectile, types.SimpleNamespace(steps=3), 2)
    with pytest.raises(ValueError, match=r"batch_size=1001 does not split evenly over 2 processes: give a multiple "
                                         r"of 2 \(e.g. 1000 or 1002\)"):
        check_splittable(NeuralFieldImage, types.SimpleNamespace(batch_size=1001), 2)


def _refused_up_front(argv: list[str], tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """``sopt ARGV --root TMP/runs`` from TMP: its one error line, after checking that it exited 2 having printed
    nothing else, touched no GPU and left nothing behind (no run folder, no .lock)."""
    import sopt
    from tests.experiments.test_cli import sopt_main

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("GPU work started")

    monkeypatch.setattr(sopt, "get_device", refuse)
    monkeypatch.chdir(tmp_path)
    code, out, err = sopt_main([*argv, "--root", str(tmp_path / "runs"), "--no-progress"])
    assert (code, out) == (2, ""), err
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert list(tmp_path.rglob("*")) == []   # no run folder, no .lock
    return err.splitlines()[0]


def test_a_problem_whose_batch_cannot_be_split_is_refused_before_anything_is_made(tmp_path, monkeypatch) -> None:
    # neural_sdf has a batch_size, but its sampler redraws a pool: it was refused only once every rank had built
    # it (21 s), with a run folder holding .lock left behind
    line = _refused_up_front(["run", "--problem", "neural_sdf", "--nproc", "2"], tmp_path, monkeypatch)
    assert line == ("error: problem 'neural_sdf' cannot be trained on 2 processes: data-parallel training splits each "
                    "step's batch over them, and its batches are not drawn by a sopt.train.BatchSampler that can be "
                    "split (its Problem class does not set splits_batch = True); run it with --nproc 1")
    line = _refused_up_front(["run", "--problem", "fit_cloth", "--nproc", "2"], tmp_path, monkeypatch)
    assert line == ("error: problem 'fit_cloth' cannot be trained on 2 processes: data-parallel training splits each "
                    "step's batch (batch_size) over them, and its step has no batch; run it with --nproc 1")


def test_more_processes_than_the_machine_runs_are_refused_before_anything_is_made(tmp_path, monkeypatch) -> None:
    torch = pytest.importorskip("torch", reason="--nproc needs torch (pip install 'sopt[distributed]')")
    monkeypatch.setenv("SOPT_DEVICE", "vulkan")
    monkeypatch.setattr(os, "cpu_count", lambda: 6)
    # the bound comes before the batch's split (4096 rows do not split over 1000 either: not the point here)
    line = _refused_up_front(["run", "--problem", "neural_field_image", "--nproc", "1000"], tmp_path, monkeypatch)
    assert line == ("error: --nproc 1000 is more processes than this machine runs: on Vulkan the processes share the "
                    "device and pass gradients through host memory (gloo), one per CPU core, and it has 6; allowed 1 "
                    "to 6")
    monkeypatch.delenv("SOPT_DEVICE")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    line = _refused_up_front(["run", "--problem", "neural_field_image", "batch_size=3000", "--nproc", "3"], tmp_path,
                             monkeypatch)
    assert line == ("error: --nproc 3 is more processes than this machine runs: one process per CUDA GPU, and 2 are "
                    "visible; allowed 1 to 2")
    line = _refused_up_front(["run", "--problem", "neural_field_image", "--nproc", "4097"], tmp_path, monkeypatch)
    assert line == "error: --nproc 4097 is out of range: allowed 1 to 4096 (processes, one per GPU)"
    # sopt resume checks the same, before it locks the run
    from sopt.config.files import dumps_toml
    from sopt.experiments.cli import load_run_config
    from tests.experiments.test_cli import listing, sopt_main
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.toml").write_text(dumps_toml(load_run_config(None, "neural_field_image", [])[1].model_dump(
        mode="json")), encoding="utf-8")
    before = listing(tmp_path)
    code, out, err = sopt_main(["resume", str(run), "--nproc", "3", "--no-progress"])
    assert (code, out, err) == (2, "", "error: --nproc 3 is more processes than this machine runs: one process per "
                                       "CUDA GPU, and 2 are visible; allowed 1 to 2\n")
    assert listing(tmp_path) == before   # no .lock, nothing else
