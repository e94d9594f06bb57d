"""Early stopping: metric curves read from growing metrics.jsonl files, the median rule and successive halving on
known curves, and sweeps of fake trials whose worst ones get stopped."""

from __future__ import annotations

import json
import math
import pathlib

import pytest

from sopt.experiments.metric_curve import MetricCurve
from sopt.experiments.prune import MedianStoppingRule, SuccessiveHalving
from tests.experiments.sweep_harness import fake_config, loss, read_sweep, sweep


def write_curve(path: pathlib.Path, points: list[tuple[int, float]], mode: str = "a") -> None:
    with open(path, mode) as f:
        for step, value in points:
            f.write(json.dumps({"step": step, "loss": value, "lr": 0.1}) + "\n")


def curves_of(tmp_path: pathlib.Path, streams: dict[str, list[tuple[int, float]]], mode="min"):
    curves = {}
    for name, points in streams.items():
        write_curve(tmp_path / f"{name}.jsonl", points)
        curves[name] = MetricCurve(tmp_path / f"{name}.jsonl", "loss", mode)
        curves[name].read()
    return curves


def test_metric_curve_reads_what_was_appended_and_keeps_half_lines(tmp_path):
    path = tmp_path / "metrics.jsonl"
    curve = MetricCurve(path, "loss", "min")
    assert curve.read() == [] and curve.last_step is None          # no file yet
    write_curve(path, [(1, 3.0), (2, 2.0)])
    with open(path, "a") as f:
        f.write(json.dumps({"event": "lr_drop", "step": 2}) + "\n")     # an event, not a metric
        f.write(json.dumps({"step": 3, "psnr": 20.0}) + "\n")           # no loss in it
        f.write('{"step": 4, "loss": 1.')                              # still being written
    assert curve.read() == [(1, 3.0), (2, 2.0)]
    with open(path, "a") as f:
        f.write('5}\n{"step": 5, "loss": NaN}\n')
    assert curve.read() == [(4, 1.5), (5, math.inf)]                 # NaN (diverged) counts as the worst
    assert curve.best_until(3) == 2.0 and curve.best_until(5) == 1.5 and curve.value_at(3) == 2.0
    assert curve.first_at_or_after(3) == (4, 1.5) and curve.reached(5) and not curve.reached(6)
    write_curve(path, [(1, 9.0)], mode="w")                           # rewritten shorter (a resume cut it)
    assert curve.read() == [(1, 9.0)] and curve.points == [(1, 9.0)]


def test_median_rule_stops_a_trial_worse_than_the_others_median(tmp_path):
    steps = range(1, 11)
    curves = curves_of(tmp_path, {name: [(s, scale * 0.9 ** s) for s in steps]
                                  for name, scale in (("a", 1.0), ("b", 2.0), ("c", 3.0), ("d", 5.0))})
    rule = MedianStoppingRule("min", min_steps=3)
    assert rule.should_stop("a", curves) is None
    assert rule.should_stop("b", curves) is None            # 2 < median(1, 3, 5) = 3
    assert "median" in rule.should_stop("c", curves)        # 3 > median(1, 2, 5) = 2
    assert "median" in rule.should_stop("d", curves)
    # maximising, the same curves rank the other way round
    rule_max = MedianStoppingRule("max", min_steps=3)
    curves_max = {k: MetricCurve(c.path, "loss", "max") for k, c in curves.items()}
    for c in curves_max.values():
        c.read()
    assert rule_max.should_stop("d", curves_max) is None and rule_max.should_stop("a", curves_max) is not None


def test_median_rule_waits_for_grace_period_and_enough_others(tmp_path):
    curves = curves_of(tmp_path, {"good": [(1, 1.0), (2, 0.9), (3, 0.8)], "bad": [(1, 9.0), (2, 9.0)],
                                  "mid": [(1, 2.0)]})
    assert MedianStoppingRule("min", min_steps=3).should_stop("bad", curves) is None   # step 2 < grace
    assert MedianStoppingRule("min", min_steps=1).should_stop("bad", curves) is not None
    # judged only at a step two others reached: step 2 has one (good), step 1 is within the grace period
    assert MedianStoppingRule("min", min_steps=2).should_stop("bad", curves) is None
    assert MedianStoppingRule("min", 1, min_others=2).should_stop(
        "bad", {"bad": curves["bad"], "good": curves["good"]}) is None                 # one other only
    assert MedianStoppingRule("min", 1, min_others=1).should_stop(
        "bad", {"bad": curves["bad"], "good": curves["good"]}) is not None


def test_median_rule_uses_the_trials_best_value_so_far(tmp_path):
    # "noisy" was as good as the best and is only worse at its latest record: its best counts
    curves = curves_of(tmp_path, {"noisy": [(1, 1.0), (2, 5.0)], "a": [(1, 2.0), (2, 2.0)],
                                  "b": [(1, 3.0), (2, 3.0)]})
    assert MedianStoppingRule("min", 1).should_stop("noisy", curves) is None


def test_successive_halving_keeps_the_top_third_at_each_rung(tmp_path):
    rule = SuccessiveHalving("min", min_steps=2, eta=3)
    assert [rule.rung(k) for k in range(3)] == [2, 6, 18]
    # trials arrive at rung 2 one after the other: values 1.0, 4.0, 2.0, 0.5, 3.0
    arrivals = [("t1", 1.0), ("t2", 4.0), ("t3", 2.0), ("t4", 0.5), ("t5", 3.0)]
    curves: dict[str, MetricCurve] = {}
    stopped = {}
    for name, value in arrivals:
        write_curve(tmp_path / f"{name}.jsonl", [(1, value + 1), (2, value)])
        curves[name] = MetricCurve(tmp_path / f"{name}.jsonl", "loss", "min")
        curves[name].read()
        stopped[name] = rule.should_stop(name, curves)
        assert rule.should_stop(name, curves) is None            # decided once per rung
    # t1 alone: kept; t2 (4.0 vs 1.0): keep 1 of 2, stopped; t3 (2.0; 1.0, 4.0): 1 of 3, stopped;
    # t4 (0.5 best of 4): keep 2, kept; t5 (3.0; 1.0, 4.0, 2.0, 0.5): keep 2 of 5, 3 better: stopped
    assert {n: s is not None for n, s in stopped.items()} == {"t1": False, "t2": True, "t3": True, "t4": False,
                                                              "t5": True}
    assert "rung 2" in stopped["t2"] and "best 1 of 2" in stopped["t2"]
    # t1 goes on to rung 6 first and passes it alone
    write_curve(tmp_path / "t1.jsonl", [(4, 0.8), (6, 0.7)])
    curves["t1"].read()
    assert rule.should_stop("t1", curves) is None
    # a resumed trial is not judged again at the rungs it passed before
    fresh = SuccessiveHalving("min", min_steps=2, eta=3)
    fresh.mark_decided("t2", curves["t2"])
    assert fresh.should_stop("t2", curves) is None


def test_median_sweep_stops_the_worst_trials(tmp_path):
    """Four fake trials at once, losses x * 0.97^step: x = 5 and 6 are above the others' median and get
    stopped early; x = 1 and 2 finish."""
    config = fake_config(tmp_path / "c.toml", steps=60, sleep=0.05, log_every=1, checkpoint_every=10)
    out = tmp_path / "sweep"
    code, lines = sweep([str(config), "x=1,2,5,6", "--jobs", "4", "--prune", "median", "--min-steps", "3",
                         "--out", str(out)])
    assert code == 0
    trials = read_sweep(out)["trials"]
    assert [t["status"] for t in trials] == ["finished", "finished", "pruned", "pruned"]
    for t in trials[:2]:
        assert t["metrics"]["loss"] == pytest.approx(loss(t["params"]["x"], 0, 60), rel=1e-12)
    for t in trials[2:]:
        summary = json.loads((out / t["dir"] / "summary.json").read_text())
        assert summary["status"] == "interrupted" and 3 <= summary["steps"] < 60   # checkpointed when stopped
        assert t["metrics"]["loss"] == pytest.approx(loss(t["params"]["x"], 0, summary["steps"]), rel=1e-12)
    assert any("pruned" in line and "median stopping rule" in line for line in lines)


def test_halving_sweep_stops_trials_outside_the_top_third_at_the_first_rung(tmp_path):
    """One trial at a time, best first: x = 1 passes every rung alone; x = 2, 5, 6 are not in the best
    ceil(n/3) = 1 at rung 5 and are stopped there (before step 15, the next rung)."""
    config = fake_config(tmp_path / "c.toml", steps=40, sleep=0.02, log_every=1, checkpoint_every=10)
    out = tmp_path / "sweep"
    code, lines = sweep([str(config), "x=1,2,5,6", "--prune", "halving", "--min-steps", "5", "--eta", "3",
                         "--out", str(out)])
    assert code == 0
    trials = read_sweep(out)["trials"]
    assert read_sweep(out)["prune"] == "halving"
    assert [t["status"] for t in trials] == ["finished", "pruned", "pruned", "pruned"]
    for t in trials[1:]:
        summary = json.loads((out / t["dir"] / "summary.json").read_text())
        assert 5 <= summary["steps"] < 40
    assert sum("successive halving" in line for line in lines) == 3
