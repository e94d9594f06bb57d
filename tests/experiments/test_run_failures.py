"""Every way ``sopt run`` / ``sopt resume`` can fail is one ``error:`` line with exit status 2, recorded in the run
when the run had begun, and resume is safe: a checkpoint that does not load changes nothing, a second process on the
same run directory is turned away by its lock, a full disk or a crash marks summary.json ``failed``, a read-only
folder is refused before any GPU work, a ``config.toml`` edited since the run started is refused (or accepted and
recorded), and a run stopped at any step -- one that is not a checkpoint or metrics step, or one in the final
write-out -- resumes to the uninterrupted run's metrics.jsonl, summary.json and result.json.

All runs are the small fit_projectile of test_cli (``RUN``: 30 steps, metrics every 5, checkpoints every 10), in
this process; a stop "by SIGTERM at step 13" raises the real signal in this process after that step.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import tomllib
from typing import Any

import pytest
import tomli_w

import sopt
from sopt.utils import atomic_write
from sopt.config import files
from sopt.experiments import run_dir as rd
from problems import problem_class
from sopt.train import JSONLLogger, Trainer
from tests.experiments.test_cli import RUN, ROOT, TIMING, records, sopt_main, summary

STOP_AT = 13   # neither a metrics step (every 5) nor a checkpoint step (every 10)
VARYING = ("time_s", "pid", "updated")   # what differs between two summaries of the same run


def listing(folder: pathlib.Path) -> dict[str, tuple[int, int]]:
    """Every path under ``folder`` (the lock file aside: taking the lock records the taker's pid in it) with its
    size and modification time."""
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in sorted(folder.rglob("*")) if p.name != rd.LOCK_FILE}


def same_summary(done: dict[str, Any], reference: dict[str, Any]) -> dict[str, Any]:
    """A summary without what differs between two runs of one config (timings, pid, time of writing)."""
    return {**{k: v for k, v in done.items() if k not in VARYING},
            "metrics": {k: v for k, v in done["metrics"].items() if k not in TIMING}}


def one_error_line(code: int, stderr: str) -> str:
    assert code == 2, stderr
    lines = stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in stderr, stderr
    return lines[0]


def no_gpu(monkeypatch) -> None:
    """Makes any GPU work (getting the device) fail the test: what must be refused first."""
    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("GPU work started")
    monkeypatch.setattr(sopt, "get_device", refuse)


@pytest.fixture(scope="module")
def whole(tmp_path_factory) -> pathlib.Path:
    """The run that never stopped."""
    out = tmp_path_factory.mktemp("whole") / "run"
    code, _, stderr = sopt_main(["run", "--problem", "fit_projectile", *RUN, "--out", str(out), "--no-progress"])
    assert code == 0, stderr
    return out


def train_step_then_sigterm(at: int) -> Any:
    """Trainer.train_step that raises SIGTERM in this process after step ``at``, as a user's kill would."""
    original = Trainer.train_step

    def train_step(self: Trainer) -> Any:
        loss = original(self)
        if self.step == at:
            signal.raise_signal(signal.SIGTERM)
        return loss
    return train_step


@pytest.fixture(scope="module")
def stopped(tmp_path_factory, own_sigterm_module) -> pathlib.Path:
    """The same run stopped by SIGTERM after step 13 (checkpointed there, status interrupted); copy before use."""
    out = tmp_path_factory.mktemp("stopped") / "run"
    train_step = train_step_then_sigterm(STOP_AT)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Trainer, "train_step", train_step)
        code, stdout, stderr = sopt_main(["run", "--problem", "fit_projectile", *RUN, "--out", str(out),
                                          "--no-progress"])
    assert code == 0 and f"interrupted after step {STOP_AT}" in stdout, stderr
    assert sopt.load(out / "checkpoint.npz")["step"] == STOP_AT
    return out


@pytest.fixture
def run(stopped, tmp_path) -> pathlib.Path:
    """A copy of the stopped run for a test to resume or damage."""
    return pathlib.Path(shutil.copytree(stopped, tmp_path / "run"))


# -- 7: metrics.jsonl, summary.json and result.json after a stop and resume are the uninterrupted run's -------------
def test_a_run_stopped_between_metrics_steps_resumes_to_the_uninterrupted_records(run, whole):
    code, _, stderr = sopt_main(["resume", str(run), "--no-progress"])
    assert code == 0, stderr
    assert records(run) == records(whole)   # no record of step 13: the uninterrupted run never logged it
    assert (run / "result.json").read_text(encoding="utf-8") == (whole / "result.json").read_text(encoding="utf-8")
    assert same_summary(summary(run), summary(whole)) == same_summary(summary(whole), summary(whole))


def test_a_signal_while_a_step_is_logged_stops_at_a_checkpointed_step(tmp_path, whole, monkeypatch, own_sigterm):
    # SIGTERM lands while the record of step 15 is written, after that step's turn for a checkpoint (not due)
    out = tmp_path / "run"
    original = JSONLLogger.on_metrics

    def on_metrics(self: JSONLLogger, trainer: Trainer, metrics: dict[str, Any]) -> None:
        original(self, trainer, metrics)
        if trainer.step == 15:
            signal.raise_signal(signal.SIGTERM)

    with monkeypatch.context() as mp:
        mp.setattr(JSONLLogger, "on_metrics", on_metrics)
        code, stdout, stderr = sopt_main(["run", "--problem", "fit_projectile", *RUN, "--out", str(out),
                                          "--no-progress"])
    assert code == 0, stderr
    at = summary(out)["steps"]
    assert f"interrupted after step {at}; checkpoint written" in stdout
    assert sopt.load(out / "checkpoint.npz")["step"] == at   # the step it says it stopped at
    code, _, stderr = sopt_main(["resume", str(out), "--no-progress"])
    assert code == 0, stderr
    assert records(out) == records(whole)


# -- 5: a kill during the final write-out -------------------------------------------------------------------------
class Killed(BaseException):
    """What a kill -9 leaves: nothing after it runs in the process (no except Exception sees it)."""


def test_a_run_killed_in_its_final_write_out_resumes_to_the_complete_summary(tmp_path, whole, monkeypatch):
    out = tmp_path / "killed"
    cls = problem_class("fit_projectile")

    def finish(self: Any, run_dir: pathlib.Path, history: list[dict[str, Any]]) -> dict[str, float]:
        fd = os.open(run_dir / rd.LOCK_FILE, os.O_RDONLY)   # the run holds its lock all along
        try:
            with pytest.raises(BlockingIOError):
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(fd)
        raise Killed

    with monkeypatch.context() as mp:
        mp.setattr(cls, "finish", finish)
        with pytest.raises(Killed):
            sopt_main(["run", "--problem", "fit_projectile", *RUN, "--out", str(out), "--no-progress"])
    assert (summary(out)["status"], summary(out)["steps"]) == ("running", 30)
    code, stdout, stderr = sopt_main(["resume", str(out), "--no-progress"])
    assert code == 0 and "finished 30 steps" in stdout, stderr
    assert same_summary(summary(out), summary(whole)) == same_summary(summary(whole), summary(whole))
    assert records(out) == records(whole)
    assert (out / "result.json").read_text(encoding="utf-8") == (whole / "result.json").read_text(encoding="utf-8")


# -- 1: a checkpoint that does not load ---------------------------------------------------------------------------
@pytest.mark.parametrize("damage", ["empty", "truncated", "garbage"])
def test_resume_with_a_damaged_checkpoint_is_one_line_and_changes_nothing(run, damage):
    path = run / "checkpoint.npz"
    data = path.read_bytes()
    path.write_bytes({"empty": b"", "truncated": data[: len(data) // 2],
                      "garbage": data[:40] + bytes(range(256)) * 4}[damage])
    before = listing(run)
    code, _, stderr = sopt_main(["resume", str(run), "--no-progress"])
    line = one_error_line(code, stderr)
    assert "checkpoint" in line and str(path) in line, line
    assert listing(run) == before and summary(run)["status"] == "interrupted"


# -- 2: two processes on one run ----------------------------------------------------------------------------------
HOLD = """
import sys, time
from sopt.experiments.run_dir import RunLock
with RunLock(sys.argv[1]):
    print("held", flush=True)
    time.sleep(120)
"""


def test_a_resume_that_loses_the_race_names_the_holder_and_touches_nothing(run, monkeypatch):
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(run)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        before = {**listing(run), "lock": (run / rd.LOCK_FILE).read_bytes()}
        no_gpu(monkeypatch)
        code, stdout, stderr = sopt_main(["resume", str(run), "--no-progress"])
        assert one_error_line(code, stderr) == (
            f"error: the run in {str(run)!r} is in use by process {holder.pid} (a sopt run or sopt resume of it); "
            "wait for it to end or stop it (Ctrl-C or kill, which checkpoints) first")
        assert stdout == "" and {**listing(run), "lock": (run / rd.LOCK_FILE).read_bytes()} == before
    finally:
        holder.kill()
        holder.wait()


# -- 3: a full disk, a crash ----------------------------------------------------------------------------------------
def full_disk(monkeypatch, at: int, lasting: bool) -> None:
    """The run directory's JSON writes (summary.json, env.json, result.json) fail with ENOSPC from the ``at``-th on
    (``lasting``) or at the ``at``-th only."""
    calls = []
    real = rd.write_atomic

    def write_atomic(path: Any, text: str) -> None:
        calls.append(path)
        if len(calls) == at or (lasting and len(calls) > at):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        real(path, text)

    monkeypatch.setattr(rd, "write_atomic", write_atomic)


@pytest.mark.parametrize("at, step, lasting", [(6, 20, False), (6, 20, True), (8, 30, False)],
                         ids=["in_training", "in_training_lasting", "in_the_final_write_out"])
def test_a_full_disk_is_one_line_exit_2_and_marks_the_run_failed(tmp_path, monkeypatch, at, step, lasting):
    # the JSON writes of a run: .config.json, env.json, inputs.json, summary (start), summaries at steps 10, 20,
    # 30, result.json
    out = tmp_path / "run"
    full_disk(monkeypatch, at, lasting)
    code, _, stderr = sopt_main(["run", "--problem", "fit_projectile", *RUN, "--out", str(out), "--no-progress"])
    line = one_error_line(code, stderr)
    assert line.startswith(f"error: the run failed at step {step}: OSError: [Errno 28] No space left on device"), line
    assert "Traceback" in (out / "error.txt").read_text(encoding="utf-8")
    # a disk that stays full refuses the summary's replacement too: it is rewritten in place, over its own bytes
    s = summary(out)
    assert (s["status"], s["steps"]) == ("failed", step)
    assert s["error"].startswith("OSError: [Errno 28] No space left on device"), s


def test_a_summary_that_cannot_be_marked_failed_reads_as_stopped_and_resumes(tmp_path, monkeypatch, whole):
    # not even in place: summary.json keeps "running" with this process's pid, gone once the command ends
    out = tmp_path / "run"
    with monkeypatch.context() as mp:
        full_disk(mp, 6, lasting=True)

        def no_room(path: Any, data: bytes) -> None:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

        mp.setattr(atomic_write, "overwrite_in_place", no_room)
        code, _, stderr = sopt_main(["run", "--problem", "fit_projectile", *RUN, "--out", str(out), "--no-progress"])
    assert one_error_line(code, stderr).startswith("error: the run failed at step 20: OSError: [Errno 28]")
    assert (summary(out)["status"], summary(out)["steps"], summary(out)["pid"]) == ("running", 10, os.getpid())
    from sopt.experiments.run_records import read_run
    assert read_run(out).status == "interrupted"   # run_alive: the run's own pid is not a live holder here
    code, stdout, stderr = sopt_main(["resume", str(out), "--no-progress"])
    assert code == 0 and "finished 30 steps" in stdout, stderr
    assert same_summary(summary(out), summary(whole)) == same_summary(summary(whole), summary(whole))


def test_overwrite_in_place_replaces_the_bytes_of_one_regular_file_only(tmp_path):
    target = tmp_path / "summary.json"
    target.write_text('{"status": "running", "metrics": {"loss": 0.5}}\n', encoding="utf-8")
    atomic_write.overwrite_in_place(target, b'{"status": "failed"}\n')
    assert target.read_bytes() == b'{"status": "failed"}\n'
    (tmp_path / "other").write_text("someone else's", encoding="utf-8")
    os.symlink(tmp_path / "other", tmp_path / "link")
    with pytest.raises(OSError) as info:
        atomic_write.overwrite_in_place(tmp_path / "link", b"x")
    assert info.value.errno == errno.ELOOP
    os.link(tmp_path / "other", tmp_path / "hard")
    with pytest.raises(OSError, match="not overwritten in place: not a regular file with one name"):
        atomic_write.overwrite_in_place(tmp_path / "hard", b"x")
    with pytest.raises(FileNotFoundError):
        atomic_write.overwrite_in_place(tmp_path / "missing", b"x")
    assert (tmp_path / "other").read_text(encoding="utf-8") == "someone else's"
    assert not (tmp_path / "missing").exists()


def test_an_exception_in_training_is_one_line_exit_2_and_recorded(tmp_path, monkeypatch):
    out = tmp_path / "run"
    original = Trainer.train_step

    def train_step(self: Trainer) -> Any:
        if self.step == 7:
            raise RuntimeError("the device was lost\nin the middle of a step")
        return original(self)

    monkeypatch.setattr(Trainer, "train_step", train_step)
    code, _, stderr = sopt_main(["run", "--problem", "fit_projectile", *RUN, "--out", str(out), "--no-progress"])
    assert one_error_line(code, stderr) == (f"error: the run failed at step 7: RuntimeError: the device was lost in the "
                                            f"middle of a step (recorded in {out})")
    s = summary(out)
    assert (s["status"], s["steps"], s["error"]) == ("failed", 7, "RuntimeError: the device was lost in the middle "
                                                                  "of a step")
    assert "RuntimeError: the device was lost" in (out / "error.txt").read_text(encoding="utf-8")


# -- 4: a read-only folder ----------------------------------------------------------------------------------------
def read_only(monkeypatch, folder: pathlib.Path) -> None:
    """``folder`` reads as not writable (we run as root, whom chmod does not stop)."""
    real = os.access

    def access(path: Any, mode: int, *args: Any, **kwargs: Any) -> bool:
        if pathlib.Path(path) == folder and mode & os.W_OK:
            return False
        return real(path, mode, *args, **kwargs)

    monkeypatch.setattr(os, "access", access)


def test_resume_of_a_read_only_run_is_refused_before_gpu_work(run, monkeypatch):
    read_only(monkeypatch, run)
    no_gpu(monkeypatch)
    before = listing(run)
    code, stdout, stderr = sopt_main(["resume", str(run)])
    assert one_error_line(code, stderr) == (f"error: sopt resume: {str(run)!r} is read-only for this process; make "
                                            "it writable (chmod u+w) or use another folder")
    assert stdout == "" and listing(run) == before


def test_run_into_a_read_only_empty_folder_is_refused_before_gpu_work(tmp_path, monkeypatch):
    out = tmp_path / "ro"
    out.mkdir()
    read_only(monkeypatch, out)
    no_gpu(monkeypatch)
    code, stdout, stderr = sopt_main(["run", "--problem", "fit_projectile", *RUN, "--out", str(out)])
    assert one_error_line(code, stderr) == (f"error: --out {str(out)!r}: {str(out)!r} is read-only for this process; "
                                            "make it writable (chmod u+w) or use another folder")
    assert stdout == "" and list(out.iterdir()) == []


# -- 6: config.toml edited after the run stopped --------------------------------------------------------------------
def test_resume_with_an_edited_config_is_refused_unless_accepted_and_then_recorded(run, monkeypatch):
    config = tomllib.loads((run / "config.toml").read_text(encoding="utf-8"))
    old = config["optimizer"]["learning_rate"]
    config["optimizer"]["learning_rate"] = old * 2
    files.write_atomic(run / "config.toml", tomli_w.dumps(config))
    before = listing(run)
    with monkeypatch.context() as mp:
        no_gpu(mp)
        code, stdout, stderr = sopt_main(["resume", str(run)])
    change = f"optimizer.learning_rate: {json.dumps(old)} -> {json.dumps(old * 2)}"
    assert one_error_line(code, stderr) == (
        f"error: config.toml in {str(run)!r} was edited after the run started ({change}); restore it, or resume "
        "with --accept-config-change to continue with the new values (the change is recorded in the run)")
    assert stdout == "" and listing(run) == before

    code, stdout, stderr = sopt_main(["resume", str(run), "--accept-config-change", "--no-progress"])
    assert code == 0 and "finished 30 steps" in stdout, stderr
    assert (run / "overrides.txt").read_text(encoding="utf-8").endswith(
        f"# resumed at step {STOP_AT} with an edited config.toml: {change}\n")
    assert {"step": STOP_AT, "event": "config_change", "changes": [change]} in records(run)


# -- an input file changed after the run stopped --------------------------------------------------------------------
def test_resume_with_a_changed_input_file_is_refused_unless_accepted_and_then_recorded(tmp_path, monkeypatch,
                                                                                     own_sigterm):
    data = tmp_path / "speed.txt"
    data.write_text("8.0\n", encoding="utf-8")
    run = tmp_path / "run"
    train_step = train_step_then_sigterm(STOP_AT)

    argv = ["run", "--problem", "tests.experiments.input_problem:DataBall", *RUN, f"data={data}", "--out", str(run),
            "--no-progress"]
    with monkeypatch.context() as mp:
        mp.setattr(Trainer, "train_step", train_step)
        code, stdout, stderr = sopt_main(argv)
    assert code == 0 and f"interrupted after step {STOP_AT}" in stdout, stderr
    import hashlib
    first = {"path": str(data), "size": 4, "sha256": hashlib.sha256(b"8.0\n").hexdigest()}
    assert json.loads((run / "inputs.json").read_text(encoding="utf-8")) == {"files": [first]}

    data.write_text("8.25\n", encoding="utf-8")   # the data replaced between the interrupt and the resume
    second = hashlib.sha256(b"8.25\n").hexdigest()
    change = f"{data}: 4 bytes, sha256 {first['sha256'][:12]} -> 5 bytes, sha256 {second[:12]}"
    before = listing(run)
    with monkeypatch.context() as mp:
        no_gpu(mp)
        code, stdout, stderr = sopt_main(["resume", str(run)])
    assert one_error_line(code, stderr) == (
        f"error: the input files of the run in {str(run)!r} changed after it started ({change}); restore them, or "
        "resume with --accept-input-change to continue with the new files (the change is recorded in the run)")
    assert stdout == "" and listing(run) == before
    data.unlink()
    with monkeypatch.context() as mp:
        no_gpu(mp)
        code, stdout, stderr = sopt_main(["resume", str(run)])
    assert one_error_line(code, stderr) == (
        f"error: the input files of the run in {str(run)!r} changed after it started ({data}: 4 bytes, sha256 "
        f"{first['sha256'][:12]} -> missing); restore them, or resume with --accept-input-change to continue with "
        "the new files (the change is recorded in the run)")
    assert listing(run) == before

    data.write_text("8.25\n", encoding="utf-8")
    code, stdout, stderr = sopt_main(["resume", str(run), "--accept-input-change", "--no-progress"])
    assert code == 0 and "finished 30 steps" in stdout, stderr
    assert (run / "overrides.txt").read_text(encoding="utf-8").endswith(
        f"# resumed at step {STOP_AT} with a changed input file: {change}\n")
    assert {"step": STOP_AT, "event": "input_change", "changes": [change]} in records(run)
    assert json.loads((run / "inputs.json").read_text(encoding="utf-8")) == {
        "files": [{"path": str(data), "size": 5, "sha256": second}]}   # what the next resume compares with


# -- a run whose checkpoint was removed, and files in a run replaced by what must not be read ----------------------
def test_resume_of_a_stopped_run_without_its_checkpoint_is_refused(run):
    (run / "checkpoint.npz").unlink()
    before = listing(run)
    code, _, stderr = sopt_main(["resume", str(run), "--no-progress"])
    line = one_error_line(code, stderr)
    assert f"stopped after {STOP_AT} steps but its checkpoint.npz is missing" in line, line
    assert listing(run) == before


@pytest.fixture
def alarm():
    """Fails a test that would hang (a FIFO read waits for a writer) instead of hanging the suite."""
    def timed_out(signum: int, frame: Any) -> None:
        raise AssertionError("timed out: a file in the run was waited on or read without end")
    previous = signal.signal(signal.SIGALRM, timed_out)
    signal.alarm(120)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


def test_a_fifo_for_summary_json_is_replaced_not_waited_on(run, alarm):
    (run / "summary.json").unlink()
    os.mkfifo(run / "summary.json")
    code, stdout, stderr = sopt_main(["resume", str(run), "--no-progress"])
    assert code == 0 and "finished 30 steps" in stdout, stderr
    assert (run / "summary.json").is_file() and summary(run)["status"] == "finished"


@pytest.mark.parametrize("name", ["metrics.jsonl", "env.json", ".config.json"])
def test_a_fifo_or_device_among_a_runs_files_is_one_line_not_a_hang(run, alarm, name):
    (run / name).unlink()
    if name == "env.json":   # read to tell whether the run's process still lives
        (run / name).symlink_to("/dev/zero")
        with open(run / "summary.json", "r+", encoding="utf-8") as f:   # a run killed while running
            data = json.load(f)
            f.seek(0), f.truncate(), json.dump({**data, "status": "running", "pid": os.getppid()}, f)
    else:
        os.mkfifo(run / name)
    code, _, stderr = sopt_main(["resume", str(run), "--no-progress"])
    line = one_error_line(code, stderr)
    assert "a character device" in line or "a FIFO (named pipe)" in line or "still running" in line, line


def test_run_files_nested_thousands_deep_are_one_line(run, alarm):
    (run / ".config.json").write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8")
    code, _, stderr = sopt_main(["resume", str(run), "--no-progress"])
    assert "nested 100000 levels deep" in one_error_line(code, stderr)
    assert rd.read_metrics(pathlib.Path(os.devnull).parent / "nonexistent.jsonl") == []
    deep = run / "metrics.jsonl"
    deep.write_text('{"step": 1, "loss": 1.0}\n' + "[" * 50_000 + "]" * 50_000 + "\n", encoding="utf-8")
    assert rd.read_metrics(deep) == [{"step": 1, "loss": 1.0}]   # the deep line is no record; no RecursionError


def test_sopt_report_does_not_wait_on_a_fifo_config(run, alarm, tmp_path):
    (run / "config.toml").unlink()
    os.mkfifo(run / "config.toml")
    code, stdout, stderr = sopt_main(["report", str(run), "--out", str(tmp_path / "report")])
    assert code == 0, stderr
    assert "config.toml: unreadable" in stdout + stderr + (tmp_path / "report" / "report.md").read_text()


def test_ctrl_c_outside_training_is_one_line_and_status_130(monkeypatch, capsys):
    from sopt.experiments import cli

    def interrupted(argv: Any = None) -> int:
        raise KeyboardInterrupt
    monkeypatch.setattr(cli, "main", interrupted)
    with pytest.raises(SystemExit) as exit_info:
        cli.entry_point()
    assert exit_info.value.code == 130
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("error: interrupted (Ctrl-C)"), err


LONG = "x" * 300   # one name longer than any filesystem's 255 bytes


@pytest.mark.parametrize("argv, start", [
    (["run", "--problem", "fit_projectile", "--out", LONG], "error: --out 'xxx"),
    (["resume", LONG], "error: sopt resume 'xxx"),
    (["report", LONG], "error: 'xxx"),
    (["report", "{run}", "--out", LONG], "error: --out 'xxx"),
    (["sweep", "{config}", "steps=2,3", "--out", LONG], "error: --out 'xxx"),
], ids=["run_out", "resume", "report_dir", "report_out", "sweep_out"])
def test_a_folder_name_too_long_for_the_filesystem_is_one_line(argv, start, run, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = tmp_path / "c.toml"
    config.write_text('problem = "fit_projectile"\n', encoding="utf-8")
    no_gpu(monkeypatch)
    code, _, stderr = sopt_main([a.replace("{run}", str(run)).replace("{config}", str(config)) for a in argv])
    line = one_error_line(code, stderr)
    assert line.startswith(start) and "has a name too long for the filesystem (300 bytes in one name" in line, line
