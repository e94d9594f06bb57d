"""neural_radiance end to end at a small size through ``sopt run``: the held-out PSNR beats a threshold, every metrics
record carries psnr and ssim, and the run directory holds the pictures."""

from __future__ import annotations

import json
import pathlib

from sopt.experiments.cli import main as sopt_main

SMALL = ["image_size=24", "train_views=40", "test_views=2", "rays_per_batch=512", "steps=160", "log_every=80",
         "occupancy.warmup_steps=32", "occupancy.update_every=8"]


def test_a_short_run_learns_the_scene(tmp_path: pathlib.Path):
    out = tmp_path / "run"
    assert sopt_main(["run", "--problem", "neural_radiance", *SMALL, "--out", str(out)]) == 0
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    logged = [r for r in records if "loss" in r]
    assert [r["step"] for r in logged] == [80, 160]
    assert all(0.0 < r["ssim"] <= 1.0 and r["psnr"] > 10.0 for r in logged)
    assert logged[1]["psnr"] > logged[0]["psnr"]
    summary = json.loads((out / "summary.json").read_text())
    # untrained, the views show about 12 dB (the background); 160 steps of 512 rays give about 19 dB
    assert summary["status"] == "finished" and summary["metrics"]["psnr"] > 17.0, summary
    for name in ("views.png", "curves.png", "test_000.png", "test_001.png", "checkpoint.npz"):
        assert (out / name).is_file(), name
