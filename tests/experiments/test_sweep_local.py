"""sopt sweep on this machine: an interrupted 2x2 grid resumed without redoing finished trials, failed trials
recorded while the sweep goes on, GPUs handed out per trial, the sweep directory found again by its hash, and a
small sweep of real ``sopt run`` trials."""

from __future__ import annotations

import json
import os
import pathlib
import signal

import pytest

from sopt.experiments.local_executor import GpuSlots
from tests.experiments.sweep_harness import (ROOT, events, fake_config, loss, read_sweep, starts, sweep,
                                             sweep_process, table, wait_for)


@pytest.fixture(autouse=True)
def trial_env(monkeypatch, tmp_path):
    """Trial processes import this checkout's sopt and log their starts to tmp_path/trials.log."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    monkeypatch.setenv("FAKE_TRIAL_LOG", str(tmp_path / "trials.log"))
    monkeypatch.delenv("FAKE_FAIL_X", raising=False)
    return tmp_path / "trials.log"


def statuses(out: pathlib.Path) -> list[str]:
    try:
        return [t["status"] for t in read_sweep(out)["trials"]]
    except (OSError, ValueError):
        return []


def test_interrupted_grid_resumes_without_redoing_finished_trials(tmp_path, trial_env):
    config = fake_config(tmp_path / "c.toml", steps=30, sleep=0.05, log_every=1, checkpoint_every=5)
    out = tmp_path / "sweep"
    argv = [str(config), "x=1,2", "y=10,20", "--jobs", "2", "--out", str(out)]
    process = sweep_process(argv, {})
    # SIGTERM once a trial has finished and the running ones are part way (steps 2 to 20 of 30: none can
    # finish, and so none start, in the moment before the signal)

    def part_way() -> bool:
        try:
            trials = read_sweep(out)["trials"]
            running = [t for t in trials if t["status"] == "running"]
            last = [json.loads((out / t["dir"] / "metrics.jsonl").read_text().splitlines()[-1])["step"]
                    for t in running]
        except (OSError, ValueError, IndexError):
            return False
        return any(t["status"] == "finished" for t in trials) and running and all(2 <= s <= 20 for s in last)

    wait_for(part_way, 60, "a finished trial and others part way")
    process.send_signal(signal.SIGTERM)
    stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == 0, stderr
    assert "resume with: sopt sweep" in stdout and f"--out {out}" in stdout
    first = read_sweep(out)["trials"]
    done_before = {t["dir"] for t in first if t["status"] == "finished"}
    interrupted = {t["dir"] for t in first if t["status"] == "interrupted"}
    assert done_before and interrupted and {t["status"] for t in first} <= {"finished", "interrupted", "pending"}
    stopped_part_way = set()
    for name in interrupted:
        if (out / name / "summary.json").exists():   # stopped part way, with its checkpoint: resumed next
            summary = json.loads((out / name / "summary.json").read_text())
            assert summary["status"] == "interrupted" and 0 < summary["steps"] < 30
            stopped_part_way.add(name)
        else:   # launched as a trial finished, just before the signal, and stopped while its process was starting
            assert not (out / name / "metrics.jsonl").exists() and name not in starts(trial_env)
    assert stopped_part_way      # the trials running at steps 2 to 20 when the signal came
    finished_metrics = {name: (out / name / "metrics.jsonl").read_bytes() for name in done_before}

    code, lines = sweep(argv)                                  # the same command again
    assert code == 0
    trials = read_sweep(out)["trials"]
    assert [t["status"] for t in trials] == ["finished"] * 4
    launched = starts(trial_env)
    for t in trials:
        name = t["dir"]
        expected = ["run", "resume"] if name in stopped_part_way else ["run"]   # nothing to resume: run anew
        assert launched[name] == expected, (name, launched)
        x, y = t["params"]["x"], t["params"]["y"]
        assert t["metrics"]["loss"] == pytest.approx(loss(x, y, 30), rel=1e-12)
        records = [json.loads(r) for r in (out / name / "metrics.jsonl").read_text().splitlines()]
        assert [r["step"] for r in records] == list(range(1, 31))       # resumed where it stopped, no repeats
    for name, before in finished_metrics.items():
        assert (out / name / "metrics.jsonl").read_bytes() == before
    assert table(lines)[0].split() == ["id", "x", "y", "status", "loss"]
    assert table(lines)[-1].startswith("best: trial-000 (loss ")

    code, lines = sweep(argv)                                  # a finished sweep: nothing runs again
    assert code == 0 and starts(trial_env) == launched
    assert any("4 finished" in line for line in lines)


def test_trials_left_running_by_a_killed_sweep_are_not_started_twice(tmp_path, trial_env):
    config = fake_config(tmp_path / "c.toml", steps=40, sleep=0.05, log_every=1)
    out = tmp_path / "sweep"
    argv = [str(config), "x=1,2", "--jobs", "2", "--out", str(out)]
    process = sweep_process(argv, {})
    wait_for(lambda: all((out / f"trial-00{i}" / "metrics.jsonl").exists() for i in range(2)), 60, "metrics")
    process.kill()                                             # kill -9: its trials get SIGTERM from the kernel
    process.communicate()
    code, lines = sweep(argv)         # adopts a trial still writing its checkpoint, resumes the interrupted ones
    assert code == 0 and statuses(out) == ["finished", "finished"]
    assert starts(trial_env) == {"trial-000": ["run", "resume"], "trial-001": ["run", "resume"]}
    assert [t["metrics"]["loss"] for t in read_sweep(out)["trials"]] == pytest.approx([loss(1, 0, 40),
                                                                                       loss(2, 0, 40)], rel=1e-12)


def test_failed_trials_are_recorded_and_the_sweep_goes_on(tmp_path, trial_env, monkeypatch):
    config = fake_config(tmp_path / "c.toml", steps=6, log_every=1, fail_step=3)
    out = tmp_path / "sweep"
    monkeypatch.setenv("FAKE_FAIL_X", "2")
    argv = [str(config), "x=1,2,3", "--jobs", "2", "--out", str(out)]
    code, lines = sweep(argv)
    assert code == 0
    trials = read_sweep(out)["trials"]
    assert [t["status"] for t in trials] == ["finished", "failed", "finished"]
    assert trials[1]["error"] == "diverged at step 3 (x = 2)"       # summary.json's error
    assert trials[2]["metrics"]["loss"] == pytest.approx(loss(3, 0, 6), rel=1e-12)
    rows = {line.split()[0]: line.split() for line in table(lines)[1:-1]}
    assert rows["trial-001"][2] == "failed" and rows["trial-002"][2] == "finished"

    monkeypatch.delenv("FAKE_FAIL_X")
    assert sweep(argv)[0] == 0 and read_sweep(out)["trials"][1]["status"] == "failed"   # kept
    assert starts(trial_env)["trial-001"] == ["run"]
    assert sweep([*argv, "--retry-failed"])[0] == 0
    assert [t["status"] for t in read_sweep(out)["trials"]] == ["finished"] * 3
    assert starts(trial_env) == {"trial-000": ["run"], "trial-001": ["run", "run"], "trial-002": ["run"]}
    assert (out / "trial-001.old-1" / "summary.json").exists()        # the failed run is kept aside


def test_a_trial_failing_without_a_summary_records_its_last_stderr_line(tmp_path):
    config = fake_config(tmp_path / "c.toml", steps=3)
    out = tmp_path / "sweep"
    code, _ = sweep([str(config), "x=1,2", "nokey=1,2", "--out", str(out)])   # fake_trial refuses nokey
    assert code == 0
    trials = read_sweep(out)["trials"]
    assert [t["status"] for t in trials] == ["failed"] * 4
    assert all(t["error"] == "error: override nokey: unknown key" for t in trials)


def test_gpus_are_handed_out_round_robin_with_k_trials_each(tmp_path, trial_env):
    slots = GpuSlots(["0", "1"], per_gpu=2)
    assert [slots.take() for _ in range(5)] == ["0", "1", "0", "1", None]
    slots.give_back("1")
    assert slots.take() == "1" and slots.take() is None

    config = fake_config(tmp_path / "c.toml", steps=8, sleep=0.05)
    out = tmp_path / "sweep"
    code, _ = sweep([str(config), "x=range(6)", "--gpus", "0,1", "--trials-per-gpu", "2", "--out", str(out)])
    assert code == 0 and statuses(out) == ["finished"] * 6
    log = events(trial_env)
    cuda = {e["pid"]: e["cuda"] for e in log if e["event"] == "start"}
    assert set(cuda.values()) == {"0", "1"}
    # never more than 2 trials at once on a GPU (4 in all)
    timeline = sorted((e["time"], 1 if e["event"] == "start" else -1, cuda[e["pid"]]) for e in log)
    busy = {"0": 0, "1": 0}
    most = {"0": 0, "1": 0}
    for _, change, gpu in timeline:
        busy[gpu] += change
        most[gpu] = max(most[gpu], busy[gpu])
    assert 1 <= most["0"] <= 2 and 1 <= most["1"] <= 2


def test_the_same_command_finds_its_sweep_directory_by_hash(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = fake_config(tmp_path / "c.toml", steps=2)
    code, lines = sweep([str(config), "x=1,2"])
    assert code == 0
    first = pathlib.Path(lines[0].removeprefix("sweep directory: "))
    assert first.parent == tmp_path / "runs" / "fake" and first.name.startswith("sweep-")
    assert read_sweep(first)["hash"] == first.name.removeprefix("sweep-")
    again = sweep([str(config), "x=1,2", "--jobs", "2"])[1]       # --jobs does not change the trials
    other = sweep([str(config), "x=1,3"])[1]
    assert again[0] == lines[0] and other[0] != lines[0]
    header = read_sweep(first)
    assert {k: header[k] for k in ("problem", "config", "overrides", "space", "method", "samples", "seed",
                                   "metric", "mode", "prune", "backend")} == {
        "problem": "fake", "config": str(config), "overrides": [], "space": {"x": "1,2"}, "method": "grid",
        "samples": None, "seed": None, "metric": "loss", "mode": "min", "prune": None, "backend": "local"}
    assert [t["overrides"] for t in header["trials"]] == [["x=1"], ["x=2"]]
    config.write_text(config.read_text() + "sleep = 0.0\n")                # another config text: another sweep
    assert sweep([str(config), "x=1,2"])[1][0] != lines[0]


def test_a_folder_holding_something_else_is_refused(tmp_path, capsys):
    config = fake_config(tmp_path / "c.toml", steps=2)
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    assert sweep([str(config), "x=1,2", "--out", str(tmp_path / "busy")])[0] == 2
    assert sweep([str(config), "x=1,2", "--out", str(tmp_path / "s")])[0] == 0
    assert sweep([str(config), "x=1,3", "--out", str(tmp_path / "s")])[0] == 2     # another sweep's folder
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and "not empty" in err[0] and "another sweep" in err[1]


def test_real_sopt_run_trials(tmp_path, monkeypatch, capsys):
    """Two fit_projectile trials through `python -m sopt run` (the real trial command and config check)."""
    from sopt.experiments.sweep import sweep_main
    config = tmp_path / "fit.toml"
    config.write_text('problem = "fit_projectile"\nsteps = 6\nlog_every = 3\nmulti_start = 2\n')
    out = tmp_path / "sweep"
    typo = sweep_main([str(config), "optimizer.learnig_rate=0.05,0.1", "--out", str(out)], log=lambda _: None)
    err = capsys.readouterr().err
    assert typo == 2 and "did you mean 'learning_rate'" in err and len(err.splitlines()) == 1 and not out.exists()
    lines: list[str] = []
    code = sweep_main([str(config), "optimizer.learning_rate=0.05,0.1", "--jobs", "2", "--out", str(out)],
                      log=lines.append)
    assert code == 0
    trials = read_sweep(out)["trials"]
    assert [t["status"] for t in trials] == ["finished", "finished"]
    for t in trials:
        summary = json.loads((out / t["dir"] / "summary.json").read_text())
        assert summary["status"] == "finished" and summary["steps"] == 6
        assert t["metrics"] == summary["metrics"]
        assert (out / t["dir"] / "overrides.txt").read_text().split() == t["overrides"]
        resolved = (out / t["dir"] / "config.toml").read_text()
        assert f"learning_rate = {t['params']['optimizer.learning_rate']}" in resolved
    assert trials[0]["metrics"]["loss"] != trials[1]["metrics"]["loss"]


def test_the_best_line_ranks_as_sopt_report_by_where_each_curve_ends(tmp_path):
    # fake trials as fit_projectile leaves them: summary.json's final loss (the best start's, evaluated anew)
    # ranks them the other way round from their logged curves, which sopt report and the pruner rank by
    from sopt.experiments.sweep import trial_table
    from sopt.experiments.sweep_dir import Trial
    curves = {"trial-000": ([40.0, 30.0], 15.8), "trial-001": ([25.0, 10.0], 33.9), "trial-002": ([5.0], 1.0)}
    trials = []
    for (name, (curve, final)), status in zip(curves.items(), ["finished", "finished", "failed"]):
        run_dir = tmp_path / name
        run_dir.mkdir()
        (run_dir / "metrics.jsonl").write_text("".join(json.dumps({"step": 10 * (i + 1), "loss": v}) + "\n"
                                                       for i, v in enumerate(curve)))
        (run_dir / "summary.json").write_text(json.dumps({"status": status, "metrics": {"loss": final}}))
        trials.append(Trial(id=name, dir=name, params={"x": len(trials)}, overrides=[f"x={len(trials)}"],
                            status=status, metrics={"loss": final}))
    lines = trial_table(trials, ["x"], "loss", "min", lambda t: tmp_path / t.dir).splitlines()
    assert lines[-1] == "best: trial-001 (loss (last logged) 10) x=1"     # trial-002 failed: never the best
    lines = trial_table(trials, ["x"], "loss", "max", lambda t: tmp_path / t.dir).splitlines()
    assert lines[-1] == "best: trial-000 (loss (last logged) 30) x=0"
