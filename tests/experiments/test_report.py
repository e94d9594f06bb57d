"""sopt report: reading run and sweep directories (written here by hand, following the run and sweep directory
contracts of issue 12), the table (rows, columns, values, best run) in text, Markdown and CSV, the plots' data and
pixels, TensorBoard event files read back, and the one-line errors."""

from __future__ import annotations

import csv
import io
import json
import math
import os
import pathlib
import struct
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

from sopt.experiments import report_plots, report_table
from sopt.experiments.report import report_main
from sopt.experiments.run_records import collect_runs, read_metrics, read_run

LEARNING_RATES = (1e-4, 1e-1)
WARMUPS = (0, 10)
STEPS = 40
LOG_EVERY = 10
SWEEP = "sweep-1a2b3c4d"
FAILED_AT = 20   # trial-003 (lr 0.1, warmup 10) diverges: loss null from this step on


# -- the synthetic runs ----------------------------------------------------------------------------------------------
def loss_at(step: int, lr: float, warmup: int) -> float:
    """The made-up loss curve of a run: decays from 2 at rate 1.5 * lr per step after the warm-up."""
    return 2.0 * math.exp(-1.5 * lr * max(step - warmup, 0))


def rel_error(lr: float, warmup: int) -> float:
    return 0.5 * loss_at(STEPS, lr, warmup) + 1e-3 * warmup


def toml_text(config: dict) -> str:
    """A config as TOML, top-level keys first then one table per section (what config.toml holds)."""
    def literal(value):
        if isinstance(value, bool):
            return "true" if value else "false"
        return json.dumps(value) if isinstance(value, str) else repr(value)

    lines = [f"{k} = {literal(v)}" for k, v in config.items() if not isinstance(v, dict)]
    for section, table in config.items():
        if isinstance(table, dict):
            lines += ["", f"[{section}]"] + [f"{k} = {literal(v)}" for k, v in table.items()]
    return "\n".join(lines) + "\n"


def config_of(lr: float, warmup: int, seed: int = 0) -> dict:
    return {"problem": "fit_projectile", "steps": STEPS, "seed": seed, "log_every": LOG_EVERY,
            "checkpoint_every": 20, "noise_std": 0.0,
            "optimizer": {"otype": "Adam", "learning_rate": lr, "beta1": 0.9, "beta2": 0.99, "epsilon": 1e-8},
            "schedule": {"otype": "WarmupCosine", "warmup_steps": warmup, "final_lr_factor": 0.01}}


def records_of(lr: float, warmup: int, last_step: int = STEPS, fail_at: int | None = None) -> list[dict]:
    records = []
    for step in range(LOG_EVERY, last_step + 1, LOG_EVERY):
        loss = None if fail_at is not None and step >= fail_at else loss_at(step, lr, warmup)
        records.append({"step": step, "loss": loss, "lr": lr, "time_s": 0.01 * step, "steps_per_s": 100.0,
                        "start_loss": [loss, 2 * loss] if loss is not None else [None, None]})
    return records


def write_run(path: pathlib.Path, config: dict, records: list[dict] | None, status: str,
              final: dict | None = None, error: str | None = None) -> None:
    """A run directory as sopt run writes it: config.toml, overrides.txt, metrics.jsonl (with the end event),
    summary.json (final metrics: the last record's numbers plus the problem's), env.json."""
    path.mkdir(parents=True)
    (path / "config.toml").write_text(toml_text(config), encoding="utf-8")
    (path / "overrides.txt").write_text("", encoding="utf-8")
    metrics: dict = {}
    if records is not None:
        lines = [json.dumps(r) for r in records]
        if status == "finished":
            lines.append(json.dumps({"step": records[-1]["step"], "event": "end", "reason": "steps"}))
        (path / "metrics.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
        if records:
            metrics = {k: v for k, v in records[-1].items() if k != "step" and not isinstance(v, list)}
    metrics.update(final or {})
    summary = {"problem": config["problem"], "status": status, "steps": records[-1]["step"] if records else 0,
               "total_steps": config["steps"], "time_s": 0.5, "metrics": metrics, "error": error,
               "pid": os.getppid(),   # a live process: a "running" run's holder
               "updated": "2025-01-01T12:00:00"}
    (path / "summary.json").write_text(json.dumps(summary), encoding="utf-8")
    (path / "env.json").write_text(json.dumps({"sopt": "0.1.0", "python": "3.11"}), encoding="utf-8")


def trial_grid() -> list[tuple[str, float, int]]:
    return [(f"trial-{i:03d}", lr, warmup) for i, (lr, warmup) in
            enumerate((lr, w) for lr in LEARNING_RATES for w in WARMUPS)]


def write_sweep(folder: pathlib.Path) -> pathlib.Path:
    """A finished 2x2 grid sweep over optimizer.learning_rate and schedule.warmup_steps: trial-002 (lr 0.1,
    warmup 0) has the least final loss of the finished trials; trial-003 failed with an even smaller last
    finite loss... in its summary, which must not make it the best."""
    sweep = folder / SWEEP
    sweep.mkdir(parents=True)
    trials = []
    for trial_id, lr, warmup in trial_grid():
        failed = trial_id == "trial-003"
        records = records_of(lr, warmup, fail_at=FAILED_AT if failed else None)
        final = {"rel_error": rel_error(lr, warmup)}
        if failed:
            final = {"loss": 1e-9}   # smaller than any finished trial's: a failed run is still never the best
        write_run(sweep / trial_id, config_of(lr, warmup), records, "failed" if failed else "finished",
                  final=final, error="diverged: loss is nan at step 20" if failed else None)
        summary = json.loads((sweep / trial_id / "summary.json").read_text())
        trials.append({"id": trial_id, "dir": trial_id,
                       "params": {"optimizer.learning_rate": lr, "schedule.warmup_steps": warmup},
                       "overrides": [f"optimizer.learning_rate={lr}", f"schedule.warmup_steps={warmup}"],
                       "status": "failed" if failed else "finished",
                       "error": summary["error"], "metrics": summary["metrics"]})
    (sweep / "sweep.json").write_text(json.dumps({
        "problem": "fit_projectile", "config": "/abs/fit.toml", "overrides": ["steps=40"],
        "space": {"optimizer.learning_rate": "0.0001,0.1", "schedule.warmup_steps": "0,10"},
        "method": "grid", "samples": None, "seed": None, "metric": "loss", "mode": "min", "prune": None,
        "backend": "local", "trials": trials}), encoding="utf-8")
    return sweep


def final_loss(lr: float, warmup: int) -> float:
    return loss_at(STEPS, lr, warmup)


@pytest.fixture
def sweep_dir(tmp_path: pathlib.Path) -> pathlib.Path:
    return write_sweep(tmp_path / "runs" / "fit_projectile")


def run_report(argv: list[str], capsys) -> tuple[int, str, str]:
    code = report_main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# -- reading ---------------------------------------------------------------------------------------------------------
def test_read_metrics_skips_events_and_a_partial_last_line(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 10, "loss": 0.5}\n{"step": 10, "event": "checkpoint"}\n{"step": 20, "loss": 0.25}\n'
                    '{"step": 30, "lo', encoding="utf-8")
    assert read_metrics(path) == [{"step": 10, "loss": 0.5}, {"step": 20, "loss": 0.25}]
    assert read_metrics(tmp_path / "missing.jsonl") == []


def test_a_running_run_without_metrics_and_one_whose_summary_has_none_yet(tmp_path):
    config = config_of(1e-3, 0)
    write_run(tmp_path / "a", config, None, "running")
    a = read_run(tmp_path / "a")
    assert (a.status, a.metrics, a.steps_done, a.total_steps, a.history()) == ("running", {}, 0, STEPS, [])
    assert a.config["optimizer.learning_rate"] == 1e-3 and a.config["problem"] == "fit_projectile"
    # Killed before its first checkpoint: summary.json has no metrics, metrics.jsonl has two records.
    write_run(tmp_path / "b", config, [], "running")
    (tmp_path / "b" / "metrics.jsonl").write_text(
        "\n".join(json.dumps(r) for r in records_of(1e-3, 0, last_step=20)) + "\n", encoding="utf-8")
    b = read_run(tmp_path / "b")
    assert b.metrics == {"loss": loss_at(20, 1e-3, 0), "lr": 1e-3, "time_s": 0.2, "steps_per_s": 100.0}


def test_a_run_whose_summary_says_running_but_whose_process_is_gone_is_interrupted(tmp_path):
    # kill -9, or a disk too full for the failure to be recorded: summary.json keeps "running" and a dead pid
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    write_run(tmp_path / "a", config_of(1e-3, 0), records_of(1e-3, 0, last_step=20), "running")
    summary = json.loads((tmp_path / "a" / "summary.json").read_text(encoding="utf-8"))
    (tmp_path / "a" / "summary.json").write_text(json.dumps({**summary, "pid": gone.pid}), encoding="utf-8")
    a = read_run(tmp_path / "a")
    assert a.status == "interrupted"
    assert a.notes == [f"summary.json says running, but its process {gone.pid} is gone: stopped, sopt resume "
                       "continues it"]


def test_collect_a_sweep_names_its_trials_and_takes_its_statuses(sweep_dir):
    collection = collect_runs([sweep_dir])
    assert [r.name for r in collection.runs] == ["trial-000", "trial-001", "trial-002", "trial-003"]
    assert [r.status for r in collection.runs] == ["finished", "finished", "finished", "failed"]
    assert collection.space_keys == ["optimizer.learning_rate", "schedule.warmup_steps"]
    assert collection.runs[3].error == "diverged: loss is nan at step 20"
    # The failed run's metrics.jsonl has nulls from step 20: its series stops before.
    assert collection.runs[3].series("loss") == ([10], [loss_at(10, 0.1, 10)])


def test_sweep_verdicts_pending_trials_and_a_folder_of_runs_and_sweeps(sweep_dir, capsys):
    sweep = json.loads((sweep_dir / "sweep.json").read_text())
    sweep["trials"][1]["status"] = "pruned"        # the run itself says finished; the sweep stopped it
    sweep["trials"].append({"id": "trial-004", "dir": "trial-004", "params": {"optimizer.learning_rate": 0.5,
                            "schedule.warmup_steps": 0}, "overrides": [], "status": "pending", "error": None,
                            "metrics": {}})
    (sweep_dir / "sweep.json").write_text(json.dumps(sweep))
    folder = sweep_dir.parent
    write_run(folder / "20250101-120000-abcdef", config_of(1e-3, 0, seed=7), records_of(1e-3, 0), "finished")
    write_run(folder / "20250101-130000-fedcba", config_of(1e-3, 0), None, "running")
    (folder / "notes").mkdir()                     # a folder without runs is passed over
    collection = collect_runs([folder])
    names = [r.name for r in collection.runs]
    assert names == ["20250101-120000-abcdef", "20250101-130000-fedcba", *(f"{SWEEP}/trial-00{i}" for i in range(5))]
    status = {r.name: r.status for r in collection.runs}
    assert status[f"{SWEEP}/trial-001"] == "pruned" and status[f"{SWEEP}/trial-004"] == "pending"
    pending = collection.runs[-1]
    assert pending.config is None and pending.value("optimizer.learning_rate") == 0.5
    # Swept keys first; `seed` differs too (7 in one loose run); a run given twice is counted once.
    assert report_table.differing_keys(collection.runs, collection.space_keys) == [
        "optimizer.learning_rate", "schedule.warmup_steps", "seed"]
    again = collect_runs([folder, sweep_dir / "trial-000"])
    assert [r.name for r in again.runs] == names

    # The whole report of that folder: every state in the table, the pending trial never best nor plotted.
    code, out, err = run_report([folder], capsys)
    assert code == 0 and err == ""
    rows = {r["run"]: r for r in csv.DictReader(io.StringIO((folder / "report" / "report.csv").read_text()))}
    assert list(rows) == names
    assert rows[f"{SWEEP}/trial-004"]["status"] == "pending" and rows[f"{SWEEP}/trial-004"]["loss"] == ""
    assert rows["20250101-130000-fedcba"]["status"] == "running" and rows["20250101-130000-fedcba"]["loss"] == ""
    assert rows["20250101-120000-abcdef"]["seed"] == "7"
    assert float(rows["20250101-120000-abcdef"]["loss"]) == final_loss(1e-3, 0)
    assert [name for name, row in rows.items() if row["best"] == "1"] == [f"{SWEEP}/trial-002"]
    assert sorted(p.name for p in (folder / "report").glob("*.png")) == [
        "curves.png", "metric_vs_optimizer.learning_rate.png", "metric_vs_schedule.warmup_steps.png",
        "metric_vs_seed.png"]


# -- the table -------------------------------------------------------------------------------------------------------
def test_table_columns_values_and_best_run(sweep_dir):
    collection = collect_runs([sweep_dir])
    table = report_table.build_table(collection, "loss", "min", metric_given=False)
    assert [(c.name, c.kind) for c in table.columns] == [
        ("run", "run"), ("status", "status"), ("optimizer.learning_rate", "key"), ("schedule.warmup_steps", "key"),
        ("loss", "metric"), ("rel_error", "metric"), ("steps_done", "summary"), ("run_time_s", "summary"),
        ("error", "summary")]
    rows = table.rows()
    for row, (trial_id, lr, warmup) in zip(rows, trial_grid()):
        assert row[0] == trial_id and row[2:4] == [lr, warmup]
    assert rows[0][4:7] == [final_loss(1e-4, 0), rel_error(1e-4, 0), STEPS]
    assert rows[3][1] == "failed" and rows[3][4] == 1e-9 and rows[3][5] is None and rows[3][8].startswith("diverged")
    assert table.best is collection.runs[2]       # least loss among the finished; failed trial-003 is lower
    by_max = report_table.build_table(collection, "rel_error", "max")
    assert by_max.best.name == "trial-001"         # warm-up 10 at lr 1e-4: the slowest
    assert max(range(3), key=lambda i: rows[i][5]) == 1


def test_text_markdown_and_csv(sweep_dir, capsys):
    code, out, err = run_report([sweep_dir], capsys)
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[0].split() == ["run", "status", "optimizer.learning_rate", "schedule.warmup_steps", "loss",
                                "rel_error", "steps_done", "run_time_s", "error"]
    assert lines[4].startswith("* trial-002") and lines[2].startswith("  trial-000")
    assert lines[4].split()[1:6] == ["trial-002", "finished", "0.1", "0", f"{final_loss(0.1, 0):.5g}"]
    # Columns aligned: every value of the loss column ends where its header ends (numbers right-aligned).
    end = lines[0].index("loss") + len("loss")
    assert all(line[:end].endswith(cell) for line, cell in zip(lines[2:6], [
        f"{final_loss(lr, w):.5g}" if (lr, w) != (0.1, 10) else "1e-09" for _, lr, w in trial_grid()]))
    assert f"best by loss (min): trial-002, loss = {final_loss(0.1, 0):.6g}" in out
    report = sweep_dir / "report"
    assert f"wrote {report / 'report.md'}, report.csv, curves.png" in out

    with open(report / "report.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert [r["run"] for r in rows] == ["trial-000", "trial-001", "trial-002", "trial-003"]
    assert [r["best"] for r in rows] == ["0", "0", "1", "0"]
    for row, (_, lr, warmup) in zip(rows[:3], trial_grid()):
        assert float(row["loss"]) == final_loss(lr, warmup)          # in full: reads back exactly
        assert float(row["rel_error"]) == rel_error(lr, warmup)
        assert float(row["optimizer.learning_rate"]) == lr and int(row["schedule.warmup_steps"]) == warmup
        assert row["error"] == "" and row["steps_done"] == str(STEPS)
    assert rows[3]["rel_error"] == "" and rows[3]["error"] == "diverged: loss is nan at step 20"

    md = (report / "report.md").read_text(encoding="utf-8")
    table_lines = [line for line in md.splitlines() if line.startswith("|")]
    assert table_lines[0] == ("| run | status | optimizer.learning_rate | schedule.warmup_steps | loss | rel_error "
                              "| steps_done | run_time_s | error |")
    assert table_lines[1] == "|---|---|---:|---:|---:|---:|---:|---:|---|"
    cells = [line.strip("|").split(" | ") for line in table_lines[2:]]
    assert [c[0].strip() for c in cells] == ["trial-000", "trial-001", "**trial-002**", "trial-003"]
    assert cells[0][4] == f"{final_loss(1e-4, 0):.5g}" and cells[3][5] == "-"
    assert f"best by loss (min): trial-002, loss = {final_loss(0.1, 0):.6g}." in md
    assert "![curves](curves.png)" in md
    assert "![metric_vs_optimizer.learning_rate](metric_vs_optimizer.learning_rate.png)" in md


def test_columns_option_and_mode_max(sweep_dir, capsys):
    code, out, _ = run_report([sweep_dir, "--columns", "rel_error, seed,steps_done", "--metric", "rel_error",
                               "--mode", "max", "--no-plots", "--out", sweep_dir.parent / "r"], capsys)
    assert code == 0
    assert out.splitlines()[0].split() == ["run", "status", "rel_error", "seed", "steps_done"]
    assert "best by rel_error (max): trial-001" in out
    assert sorted(p.name for p in (sweep_dir.parent / "r").iterdir()) == ["report.csv", "report.md"]


# -- one metric: fit_projectile's logged loss and final loss disagree ------------------------------------------------
PARAMETERS = ("drag", "restitution", "speed", "angle")
# (logged loss at the last step, final loss): the logged loss ranks the trials the other way round from the final
# one (evaluated anew by the problem's finish), so a table or best line reading the other value shows here.
PROJECTILE_TRIALS = {"trial-000": (40.0, 5.0), "trial-001": (10.0, 15.0), "trial-002": (25.0, 20.0)}


def projectile_records(end: float, last_step: int = STEPS) -> list[dict]:
    """fit_projectile's metrics records: the loss grows with the horizon up to ``end`` at step STEPS; lists per
    start; every parameter's relative error; the Trainer's bookkeeping (skipped_steps among it)."""
    records = []
    for step in range(LOG_EVERY, last_step + 1, LOG_EVERY):
        loss = end * step / STEPS
        records.append({"step": step, "loss": loss, "lr": 0.05, "time_s": 0.01 * step, "steps_per_s": 100.0,
                        "skipped_steps": 0, "start_loss": [loss / 2, loss / 2],
                        **{f"value/{name}": [1.0, 2.0] for name in PARAMETERS},
                        **{f"rel_error/{name}": 0.01 * (i + 1) for i, name in enumerate(PARAMETERS)}})
    return records


def write_projectile_sweep(folder: pathlib.Path) -> pathlib.Path:
    """A fit_projectile sweep over the learning rate: three finished trials (PROJECTILE_TRIALS) whose summary
    holds fit_projectile's final loss and relative errors, and a trial pruned at step 20 (its summary: its last
    record's numbers)."""
    sweep = folder / SWEEP
    sweep.mkdir(parents=True)
    trials = []
    rates = {"trial-000": 0.01, "trial-001": 0.02, "trial-002": 0.05, "trial-003": 0.1}
    for trial_id, lr in rates.items():
        pruned = trial_id == "trial-003"
        end, final = PROJECTILE_TRIALS.get(trial_id, (60.0, None))
        records = projectile_records(end, last_step=20 if pruned else STEPS)
        finish = None if pruned else {"loss": final, **{f"rel_error/{n}": 1e-3 for n in PARAMETERS}}
        write_run(sweep / trial_id, config_of(lr, 0), records, "interrupted" if pruned else "finished",
                  final=finish)
        summary = json.loads((sweep / trial_id / "summary.json").read_text())
        trials.append({"id": trial_id, "dir": trial_id, "params": {"optimizer.learning_rate": lr},
                       "overrides": [f"optimizer.learning_rate={lr}"], "status": "pruned" if pruned else "finished",
                       "error": None, "metrics": summary["metrics"]})
    (sweep / "sweep.json").write_text(json.dumps({
        "problem": "fit_projectile", "space": {"optimizer.learning_rate": "0.01,0.02,0.05,0.1"}, "method": "grid",
        "metric": "loss", "mode": "min", "prune": "median", "backend": "local", "trials": trials}), encoding="utf-8")
    return sweep


def test_best_is_the_trial_whose_curve_ends_lowest_and_every_rel_error_is_shown(tmp_path, capsys):
    sweep = write_projectile_sweep(tmp_path / "runs" / "fit_projectile")
    collection = collect_runs([sweep])
    table = report_table.build_table(collection, "loss", "min", metric_given=False)
    # the curves' (and the pruner's) metric picks the best: trial-001's curve ends lowest (the old report took
    # trial-000, whose final loss is lowest and whose curve ends highest)
    assert table.best.name == "trial-001"
    figure = report_plots.curves_figure(table.runs, "loss", table.keys, table.best)
    ends = {line.get_label(): line.get_ydata()[-1] for line in figure.axes[0].lines}
    assert min(ends, key=ends.get) == "learning_rate=0.02 (best)"
    names = [c.name for c in table.columns]
    assert names[:5] == ["run", "status", "optimizer.learning_rate", "loss (last logged)", "loss (final)"]
    assert [n for n in names if n.startswith("rel_error/")] == [f"rel_error/{n}" for n in PARAMETERS]
    rows = {row[0]: row for row in table.rows()}
    assert rows["trial-001"][3:5] == [10.0, 15.0]
    assert rows["trial-003"][1] == "pruned" and rows["trial-003"][3:5] == [30.0, 30.0]   # as the pruner saw it
    # the star of the metric-vs-key plot is the lowest point of the same metric
    by_lr = report_plots.metric_vs_key_figure(table.runs, "optimizer.learning_rate", "loss", [], table.best,
                                              value=table.value, label=table.metric_label).axes[0]
    points = {line.get_label(): list(line.get_ydata()) for line in by_lr.lines}
    assert points == {"loss": [40.0, 10.0, 25.0, 30.0], "best: trial-001": [10.0]}
    assert by_lr.get_ylabel() == "loss (last logged)"

    code, out, err = run_report([sweep], capsys)
    assert code == 0 and err == ""
    assert "best by loss (last logged) (min): trial-001, loss (last logged) = 10" in out
    assert [line for line in out.splitlines() if line.startswith("*")][0].split()[1] == "trial-001"
    csv_rows = list(csv.DictReader(io.StringIO((sweep / "report" / "report.csv").read_text())))
    assert [r["run"] for r in csv_rows if r["best"] == "1"] == ["trial-001"]
    assert all(r["rel_error/angle"] for r in csv_rows)


def sweep_trials(sweep: pathlib.Path) -> list:
    """sweep.json's trials as sopt sweep holds them (sopt.experiments.sweep_dir.Trial)."""
    from sopt.experiments.sweep_dir import Trial
    return [Trial(id=t["id"], dir=t["dir"], params=t["params"], overrides=t["overrides"], status=t["status"],
                  metrics=t["metrics"]) for t in json.loads((sweep / "sweep.json").read_text())["trials"]]


def test_the_sweep_line_and_table_name_the_reports_best_with_its_number(tmp_path, capsys):
    """sopt sweep's table and best line, and sopt report's best, on one sweep whose logged and final losses rank the
    trials in opposite orders: the same trial (trial-001), the same number (10), under the same header, and the
    sweep table's ranking column is lowest at the trial its best line names (before, the sweep's table showed
    only the final losses, lowest at trial-000, under its best line naming trial-001)."""
    from sopt.experiments.sweep import trial_table
    sweep = write_projectile_sweep(tmp_path / "runs" / "fit_projectile")
    lines = trial_table(sweep_trials(sweep), ["optimizer.learning_rate"], "loss", "min",
                        lambda t: sweep / t.dir).splitlines()
    assert lines[0].split("  ")[-2:] == ["loss (last logged)", "loss (final)"]
    rows = {line.split()[0]: line.split() for line in lines[1:-1]}
    assert {name: row[-2:] for name, row in rows.items()} == {
        "trial-000": ["40", "5"], "trial-001": ["10", "15"], "trial-002": ["25", "20"], "trial-003": ["30", "30"]}
    ranking = {name: float(row[-2]) for name, row in rows.items()}
    assert min(ranking, key=ranking.get) == "trial-001"
    assert lines[-1] == "best: trial-001 (loss (last logged) 10) optimizer.learning_rate=0.02"
    code, out, err = run_report([sweep], capsys)
    assert code == 0 and err == ""
    assert "best by loss (last logged) (min): trial-001, loss (last logged) = 10\n" in out


def test_a_real_fit_projectile_sweep_ranks_by_the_best_starts_loss_everywhere(tmp_path, capsys):
    """Two trials of a small fit_projectile with 3 starts through sopt sweep (real `sopt run` trials), then sopt
    report: every metrics record's loss is its best start's (min of start_loss; the optimised sum is loss_sum),
    summary.json's final loss is the best start's too, and the sweep's best line names the trial the report marks
    best, with the same number, which is the lowest of the sweep table's ranking column."""
    from sopt.experiments.sweep import sweep_main
    config = tmp_path / "fit.toml"
    config.write_text('problem = "fit_projectile"\nsteps = 8\nlog_every = 4\nmulti_start = 3\nobservations = 10\n'
                      'duration = 2.0\ndt = 0.01\n')
    out = tmp_path / "sweep"
    lines: list[str] = []
    assert sweep_main([str(config), "seed=0,1", "--out", str(out)], log=lines.append) == 0
    table = next(line for line in lines if line.startswith("id ")).splitlines()
    for trial in ("trial-000", "trial-001"):
        records = read_metrics(out / trial / "metrics.jsonl")
        assert [r["step"] for r in records] == [4, 8]
        for r in records:
            assert r["loss"] == min(r["start_loss"]) and r["loss_sum"] == pytest.approx(sum(r["start_loss"]))
        final = json.loads((out / trial / "summary.json").read_text())["metrics"]
        result = json.loads((out / trial / "result.json").read_text())
        assert final["loss"] == result["loss"] < final["loss_sum"]
    best = table[-1]
    assert best.startswith("best: trial-00") and " (loss (last logged) " in best, table
    name, number = best.split()[1], float(best.split("(last logged) ")[1].split(")")[0])
    assert table[0].split()[:3] == ["id", "seed", "status"] and "loss (last logged)  loss (final)" in table[0], table
    shown = {row.split()[0]: float(row.split()[3]) for row in table[1:-1]}
    assert min(shown, key=shown.get) == name and shown[name] == pytest.approx(number, rel=1e-5)
    code, report, err = run_report([out, "--no-plots"], capsys)
    assert code == 0, err
    assert f"best by loss (last logged) (min): {name}, loss (last logged) = {number:.6g}\n" in report
    assert [line for line in report.splitlines() if line.startswith("*")][0].split()[1] == name


def test_curves_legend_is_beside_the_axes(sweep_dir):
    collection = collect_runs([sweep_dir])
    table = report_table.build_table(collection, "loss", "min")
    figure = report_plots.curves_figure(table.runs, "loss", table.keys, table.best)
    figure.canvas.draw()
    axes = figure.axes[0]
    legend, box = axes.get_legend().get_window_extent(), axes.get_window_extent()
    assert legend.x0 >= box.x1 and legend.x1 <= figure.bbox.x1      # right of the data, inside the picture
    assert [t.get_text() for t in axes.get_legend().get_texts()] == [line.get_label() for line in axes.lines]


# -- plots -----------------------------------------------------------------------------------------------------------
def test_curves_figure_holds_every_runs_series(sweep_dir):
    collection = collect_runs([sweep_dir])
    table = report_table.build_table(collection, "loss", "min")
    figure = report_plots.curves_figure(table.runs, "loss", table.keys, table.best)
    axes = figure.axes[0]
    assert [line.get_label() for line in axes.lines] == [
        "learning_rate=0.0001, warmup_steps=0", "learning_rate=0.0001, warmup_steps=10",
        "learning_rate=0.1, warmup_steps=0 (best)", "learning_rate=0.1, warmup_steps=10 [failed]"]
    for line, (_, lr, warmup) in zip(axes.lines, trial_grid()):
        steps = list(range(LOG_EVERY, STEPS + 1, LOG_EVERY)) if (lr, warmup) != (0.1, 10) else [10]
        np.testing.assert_array_equal(line.get_xdata(), steps)
        np.testing.assert_array_equal(line.get_ydata(), [loss_at(s, lr, warmup) for s in steps])
    assert axes.lines[2].get_linewidth() > axes.lines[0].get_linewidth()
    assert axes.lines[3].get_marker() == "o" and axes.lines[0].get_marker() == "None"
    assert axes.get_yscale() == "log"               # 2 down to 2 exp(-6): 2.6 decades
    assert axes.get_xlabel() == "step" and axes.get_ylabel() == "loss"


def test_metric_vs_key_figures(sweep_dir):
    collection = collect_runs([sweep_dir])
    table = report_table.build_table(collection, "loss", "min")
    figure = report_plots.metric_vs_key_figure(table.runs, "optimizer.learning_rate", "loss",
                                               ["schedule.warmup_steps"], table.best)
    axes = figure.axes[0]
    lines = {line.get_label(): (list(line.get_xdata()), list(line.get_ydata())) for line in axes.lines}
    assert lines == {   # the failed trial (lr 0.1, warm-up 10) is left out
        "warmup_steps=0": ([1e-4, 0.1], [final_loss(1e-4, 0), final_loss(0.1, 0)]),
        "warmup_steps=10": ([1e-4], [final_loss(1e-4, 10)]),
        "best: trial-002": ([0.1], [final_loss(0.1, 0)])}
    assert axes.get_xscale() == "log" and axes.get_yscale() == "log"   # 3 decades of lr, 2.6 of loss
    warm = report_plots.metric_vs_key_figure(table.runs, "schedule.warmup_steps", "loss",
                                             ["optimizer.learning_rate"], table.best).axes[0]
    assert warm.get_xscale() == "linear"           # 0 and 10: not positive
    assert [(l.get_label(), list(l.get_xdata())) for l in warm.lines] == [
        ("learning_rate=0.0001", [0, 10]), ("learning_rate=0.1", [0]), ("best: trial-002", [0])]


def png_pixels(path: pathlib.Path) -> np.ndarray:
    with Image.open(path) as image:
        assert image.format == "PNG" and image.size == (700, 450)
        return np.asarray(image.convert("RGB"))


def test_report_pngs_are_drawn(sweep_dir, capsys):
    assert run_report([sweep_dir], capsys)[0] == 0
    report = sweep_dir / "report"
    assert sorted(p.name for p in report.iterdir()) == [
        "curves.png", "metric_vs_optimizer.learning_rate.png", "metric_vs_schedule.warmup_steps.png",
        "report.csv", "report.md"]
    curves = png_pixels(report / "curves.png")
    by_loss = png_pixels(report / "metric_vs_optimizer.learning_rate.png")
    for pixels in (curves, by_loss):
        assert len({tuple(p) for p in pixels.reshape(-1, 3)[::7]}) > 20   # lines, text, legend: not blank
    # The best run's curve (matplotlib's third colour, C2 #2ca02c, drawn thick) falls 2 decades from the top of
    # the axes nearly to their bottom: its pixels span most of the height (the legend's sample is 3 rows).
    rows, _ = np.nonzero(near_colour(curves, (0x2C, 0xA0, 0x2C)))
    assert rows.size > 500 and rows.max() - rows.min() > 250
    # Final loss against the learning rate: the warm-up-0 line (C0) and the best run's gold star at the bottom
    # right (lr 0.1, least loss), besides the star in the legend at the top.
    assert near_colour(by_loss, (0x1F, 0x77, 0xB4)).sum() > 300
    rows, cols = np.nonzero(near_colour(by_loss, (255, 215, 0)))
    assert np.any((cols > 600) & (rows > 330)) and np.any(rows < 150)


def near_colour(pixels: np.ndarray, colour: tuple[int, int, int], tolerance: int = 8) -> np.ndarray:
    """Where an RGB image has (about) this colour: a boolean (height, width) mask."""
    return np.all(np.abs(pixels.astype(int) - colour) < tolerance, axis=-1)


# -- TensorBoard -----------------------------------------------------------------------------------------------------
def read_event_file(path: pathlib.Path) -> list:
    """The events of a TFRecord event file, each record's length and data checked against their masked CRC32C."""
    from tensorboardX.crc32c import crc32c
    from tensorboardX.proto.event_pb2 import Event

    def masked(data: bytes) -> int:
        crc = crc32c(data)
        return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF

    data, pos, events = path.read_bytes(), 0, []
    while pos < len(data):
        header = data[pos:pos + 8]
        (length,), (header_crc,) = struct.unpack("<Q", header), struct.unpack("<I", data[pos + 8:pos + 12])
        body = data[pos + 12:pos + 12 + length]
        (body_crc,) = struct.unpack("<I", data[pos + 12 + length:pos + 16 + length])
        assert header_crc == masked(header) and body_crc == masked(body)
        events.append(Event.FromString(body))
        pos += 16 + length
    return events


def test_tensorboard_events_hold_every_scalar(sweep_dir, capsys):
    pytest.importorskip("tensorboardX")
    code, out, _ = run_report([sweep_dir, "--tensorboard", "--no-plots"], capsys)
    assert code == 0 and "TensorBoard events of 4 runs" in out
    logdir = sweep_dir / "report" / "tensorboard"
    for trial_id, lr, warmup in trial_grid():
        files = list((logdir / trial_id).glob("events.out.tfevents.*"))
        assert len(files) == 1
        scalars = {}
        for event in read_event_file(files[0]):
            for value in event.summary.value:
                scalars.setdefault(value.tag, []).append((event.step, value.simple_value))
        failed = trial_id == "trial-003"
        steps = [10] if failed else list(range(LOG_EVERY, STEPS + 1, LOG_EVERY))
        assert sorted(scalars) == ["loss", "lr", "start_loss/0", "start_loss/1", "steps_per_s", "time_s"]
        np.testing.assert_allclose([v for _, v in scalars["loss"]], [loss_at(s, lr, warmup) for s in steps],
                                   rtol=1e-6)       # simple_value is a float32
        assert [s for s, _ in scalars["loss"]] == steps
        np.testing.assert_allclose([v for _, v in scalars["start_loss/1"]],
                                   [2 * loss_at(s, lr, warmup) for s in steps], rtol=1e-6)
        assert [s for s, _ in scalars["time_s"]] == list(range(LOG_EVERY, STEPS + 1, LOG_EVERY))


def test_tensorboard_missing_is_one_line(sweep_dir, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorboardX", None)   # import tensorboardX now raises ImportError
    code, out, err = run_report([sweep_dir, "--tensorboard"], capsys)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("error: --tensorboard needs tensorboardX") and "pip install" in err
    assert not (sweep_dir / "report").exists()


# -- output folder and errors ----------------------------------------------------------------------------------------
def test_an_earlier_report_is_replaced_only_with_force(sweep_dir, capsys):
    report = sweep_dir / "report"
    assert run_report([sweep_dir, "--no-plots"], capsys)[0] == 0
    before = (report / "report.csv").read_text()
    (report / "metric_vs_old_key.png").write_bytes(b"an earlier report's plot")
    code, out, err = run_report([sweep_dir], capsys)
    assert code == 2 and out == ""
    assert err.strip() == (f"error: --out {str(report)!r}: holds an earlier report (metric_vs_old_key.png, "
                           f"report.csv, report.md); give --force to replace it, or another --out")
    assert (report / "report.csv").read_text() == before
    code, _, _ = run_report([sweep_dir, "--force", "--metric", "rel_error", "--mode", "max"], capsys)
    assert code == 0 and not (report / "metric_vs_old_key.png").exists()
    assert "best by rel_error (max): trial-001" in (report / "report.md").read_text()


@pytest.mark.parametrize("case, expected", [
    ("missing", "error: '{tmp}/nowhere': no such folder"),
    ("empty", "error: '{tmp}/empty': no run directory (summary.json or config.toml) or sweep directory "
              "(sweep.json) in it"),
    ("file", "error: '{tmp}/file.txt': not a folder (give a run directory, a sweep directory or a folder "
             "holding them)"),
    ("metric", "error: --metric 'los': no run has this final metric; did you mean 'loss'? metrics: loss, lr, "
               "time_s, steps_per_s, rel_error"),
    ("column", "error: --columns 'optimizer.learning_rat': no run has this metric or config key; did you mean "
               "'optimizer.learning_rate'? metrics: loss, lr, time_s, steps_per_s, rel_error; summary: "
               "steps_done, run_time_s, error"),
    ("mode", "error: argument --mode: invalid choice: 'best' (choose from {choices}) (see sopt report --help)"),
    ("others", "error: --out '{tmp}/runs/fit_projectile': holds files that are not an earlier report's "
               "(sweep-1a2b3c4d); choose an empty or new folder"),
    ("under_file", "error: --out '{tmp}/file.txt/report': '{tmp}/file.txt' is a file, not a folder"),
])
def test_errors_are_one_line_and_write_nothing(sweep_dir, tmp_path, capsys, case, expected):
    (tmp_path / "empty").mkdir()
    (tmp_path / "file.txt").write_text("x")
    argv = {"missing": [tmp_path / "nowhere"], "empty": [tmp_path / "empty"], "file": [tmp_path / "file.txt"],
            "metric": [sweep_dir, "--metric", "los"], "column": [sweep_dir, "--columns", "optimizer.learning_rat"],
            "mode": [sweep_dir, "--mode", "best"], "others": [sweep_dir, "--out", sweep_dir.parent],
            "under_file": [sweep_dir, "--out", tmp_path / "file.txt" / "report"]}[case]
    code, out, err = run_report(argv, capsys)
    assert code == 2 and out == ""
    if case == "mode":   # argparse quotes the choices before Python 3.12.8 and 3.13.1, not after
        assert err.replace("'min', 'max'", "min, max") == expected.format(choices="min, max") + "\n"
    else:
        assert err == expected.format(tmp=tmp_path) + "\n"
    assert not (sweep_dir / "report").exists()


def test_default_output_folders(sweep_dir, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    # One run directory (or several DIRs): ./report; one folder of runs: DIR/report. Runs are named relative to
    # their common parent: the sweep's trials alone in the folder are named as in the sweep.
    assert run_report([sweep_dir / "trial-000", "--no-plots"], capsys)[0] == 0
    assert (tmp_path / "report" / "report.csv").read_text().splitlines()[1].startswith("trial-000,finished,")
    assert run_report([sweep_dir.parent, "--no-plots"], capsys)[0] == 0
    rows = list(csv.DictReader(io.StringIO((sweep_dir.parent / "report" / "report.csv").read_text())))
    assert [r["run"] for r in rows] == [f"trial-00{i}" for i in range(4)]
    assert run_report([sweep_dir / "trial-000", sweep_dir / "trial-001", "--no-plots", "--force"], capsys)[0] == 0
    assert (tmp_path / "report" / "report.csv").read_text().splitlines()[2].startswith("trial-001,finished,")


def test_help(capsys):
    assert report_main(["--help"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("usage: sopt report [-h]") and "--tensorboard" in text and "--force" in text
