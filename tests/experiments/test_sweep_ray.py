"""sopt sweep --backend ray on a local Ray instance (started once for the module: it takes seconds): the same 2x2
grid gives the same sweep.json and table as the local backend, and ASHA stops the trials outside the top third."""

from __future__ import annotations

import json
import os

import pytest

from tests.experiments.sweep_harness import ROOT, fake_config, loss, read_sweep, sweep, table

ray = pytest.importorskip("ray")
from sopt.experiments.ray_backend import LOCALHOST, init_ray  # noqa: E402  (after the skip: imports Ray's names)


@pytest.fixture(scope="module")
def ray_instance():
    """A local Ray instance with 2 CPUs whose workers import this checkout's sopt."""
    saved = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), saved]))
    init_ray(None, num_cpus=2)          # as sopt sweep --backend ray starts one
    yield
    ray.shutdown()
    if saved is None:
        os.environ.pop("PYTHONPATH", None)
    else:
        os.environ["PYTHONPATH"] = saved


def test_ray_grid_gives_the_local_table(tmp_path, ray_instance):
    config = fake_config(tmp_path / "c.toml", steps=10, sleep=0.02, log_every=2)
    args = [str(config), "x=1,2", "y=10,20"]
    code_local, local_lines = sweep([*args, "--jobs", "2", "--out", str(tmp_path / "local")])
    code_ray, ray_lines = sweep([*args, "--backend", "ray", "--out", str(tmp_path / "ray")])
    assert code_local == 0 and code_ray == 0
    assert table(ray_lines) == table(local_lines)
    local, on_ray = read_sweep(tmp_path / "local"), read_sweep(tmp_path / "ray")
    assert on_ray["backend"] == "ray" and local["backend"] == "local"
    assert on_ray["trials"] == local["trials"]          # ids, params, overrides, statuses and final metrics
    for t in on_ray["trials"]:
        assert t["metrics"]["loss"] == pytest.approx(loss(t["params"]["x"], t["params"]["y"], 10), rel=1e-12)
        summary = json.loads((tmp_path / "ray" / t["dir"] / "summary.json").read_text())
        assert summary["status"] == "finished"
    # the same command again: nothing left to run, Ray not needed
    code, lines = sweep([*args, "--backend", "ray", "--out", str(tmp_path / "ray")])
    assert code == 0 and table(lines) == table(local_lines)


def test_ray_asha_stops_trials_outside_the_top_third(tmp_path, ray_instance):
    """One trial at a time, best first (losses x * 0.97^step): x = 1 finishes; x = 2 and 6 are worse than the
    trials before them at the first rung (step 4) and ASHA stops them; each checkpoints and is "pruned"."""
    config = fake_config(tmp_path / "c.toml", steps=60, sleep=0.05, log_every=1, checkpoint_every=20)
    out = tmp_path / "ray"
    code, lines = sweep([str(config), "x=1,2,6", "--backend", "ray", "--jobs", "1", "--prune", "asha",
                         "--min-steps", "4", "--out", str(out)])
    assert code == 0
    trials = read_sweep(out)["trials"]
    assert read_sweep(out)["prune"] == "halving"
    assert [t["status"] for t in trials] == ["finished", "pruned", "pruned"]
    for t in trials[1:]:
        summary = json.loads((out / t["dir"] / "summary.json").read_text())
        assert summary["status"] == "interrupted" and 4 <= summary["steps"] < 60


def test_a_local_ray_instance_listens_on_localhost_only(ray_instance):
    """Its node (and so its GCS, raylet and workers) on 127.0.0.1, not the machine's routable address."""
    assert [node["NodeManagerAddress"] for node in ray.nodes()] == [LOCALHOST]
    assert ray.get_runtime_context().gcs_address.startswith(f"{LOCALHOST}:")
