"""A killed sweep leaves no trial running unsupervised, and every other failure of ``sopt sweep`` is one line.

``kill -9`` of the sweep process: its trials get SIGTERM from the kernel (PR_SET_PDEATHSIG), checkpoint and end
"interrupted", and the rerun resumes them. A rerun that finds a trial process still running adopts it (one line
naming its pid), counts it against ``--jobs`` and records it when it ends. Malformed sweep directories, spaces too
large to enumerate and a full disk: exit 2 with one ``error:`` line, within seconds. Trials are fake_trial.py
processes; every wait has a timeout so a regression fails instead of hanging.
"""

from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys

import pytest

from tests.experiments.sweep_harness import (FAKE_TRIAL, ROOT, events, fake_config, loss, read_sweep, starts,
                                             sweep, sweep_process, wait_for)


@pytest.fixture(autouse=True)
def trial_env(monkeypatch, tmp_path):
    """Trial processes import this checkout's sopt and log their starts to tmp_path/trials.log; any fake trial
    still alive at the end (a regression) is killed."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    monkeypatch.setenv("FAKE_TRIAL_LOG", str(tmp_path / "trials.log"))
    monkeypatch.delenv("FAKE_FAIL_X", raising=False)
    yield tmp_path / "trials.log"
    ended = {e["pid"] for e in events(tmp_path / "trials.log") if e["event"] == "end"}
    for pid in {e["pid"] for e in events(tmp_path / "trials.log") if e["event"] == "start"} - ended:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:         # a zombie (exited, not yet reaped by its new parent) has ended too
        return pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def processes_of(folder: pathlib.Path) -> list[int]:
    """The live processes whose command line names a path under ``folder`` (trial processes of a sweep there)."""
    found = []
    for cmdline in pathlib.Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if str(folder).encode() in cmdline.read_bytes() and alive(int(cmdline.parent.name)):
                found.append(int(cmdline.parent.name))
        except (OSError, ValueError):
            continue
    return found


def last_step(run_dir: pathlib.Path) -> int:
    try:
        return json.loads((run_dir / "metrics.jsonl").read_text().splitlines()[-1])["step"]
    except (OSError, ValueError, IndexError):
        return 0


def test_kill_9_of_the_sweep_stops_its_trials_and_the_rerun_resumes_them(tmp_path, trial_env):
    config = fake_config(tmp_path / "c.toml", steps=60, sleep=0.1, log_every=1, checkpoint_every=50)
    out = tmp_path / "sweep"
    argv = [str(config), "x=1,2", "--jobs", "2", "--out", str(out)]
    process = sweep_process(argv, {})
    dirs = [out / "trial-000", out / "trial-001"]
    wait_for(lambda: all(2 <= last_step(d) for d in dirs), 30, "both trials under way")
    pids = [json.loads((d / "summary.json").read_text())["pid"] for d in dirs]
    process.kill()
    process.communicate(timeout=30)
    # at least 3 s of steps were left to each: they stop at once, each with a checkpoint
    wait_for(lambda: not any(alive(pid) for pid in pids), 2.5, f"the trials {pids} to end with their sweep")
    for d in dirs:
        summary = json.loads((d / "summary.json").read_text())
        assert summary["status"] == "interrupted" and 2 <= summary["steps"] < 60

    code, lines = sweep(argv)
    assert code == 0
    trials = read_sweep(out)["trials"]
    assert [t["status"] for t in trials] == ["finished", "finished"]
    assert starts(trial_env) == {"trial-000": ["run", "resume"], "trial-001": ["run", "resume"]}
    for t, d in zip(trials, dirs):
        assert t["metrics"]["loss"] == pytest.approx(loss(t["params"]["x"], 0, 60), rel=1e-12)
        assert [json.loads(r)["step"] for r in (d / "metrics.jsonl").read_text().splitlines()] == list(range(1, 61))


def test_a_rerun_adopts_a_trial_process_still_running_and_says_so(tmp_path, trial_env):
    """trial-000's process outlived its sweep (started here by hand, as a sweep without PR_SET_PDEATHSIG would
    leave it): the rerun does not start it again, names its pid, waits for it within --jobs 1, then runs
    trial-001."""
    config = fake_config(tmp_path / "c.toml", steps=20, sleep=0.05)
    out = tmp_path / "sweep"
    argv = [str(config), "x=1,2", "--jobs", "1", "--out", str(out)]
    assert sweep(argv)[0] == 0
    state = read_sweep(out)
    for t in state["trials"]:          # as a sweep killed while running trial-000 leaves it
        t["status"], t["metrics"] = ("running" if t["id"] == "trial-000" else "pending"), {}
    (out / "sweep.json").write_text(json.dumps(state))
    for name in ("trial-000", "trial-001"):
        (out / name).rename(out / f"{name}.before")
    orphan = subprocess.Popen([sys.executable, str(FAKE_TRIAL), "run", str(config), "x=1", "--out",
                               str(out / "trial-000"), "--no-progress"], start_new_session=True,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for(lambda: last_step(out / "trial-000") >= 1, 30, "the orphan under way")

    code, lines = sweep(argv)
    orphan.wait(timeout=30)
    assert code == 0
    adopted = [line for line in lines if "adopted" in line]
    assert len(adopted) == 1 and adopted[0].startswith("trial-000") and f"process {orphan.pid}" in adopted[0]
    trials = read_sweep(out)["trials"]
    assert [t["status"] for t in trials] == ["finished", "finished"]
    assert trials[0]["metrics"]["loss"] == pytest.approx(loss(1, 0, 20), rel=1e-12)
    assert starts(trial_env) == {"trial-000": ["run", "run"], "trial-001": ["run", "run"]}   # once each here
    log = events(trial_env)
    orphan_end = next(e["time"] for e in log if e["event"] == "end" and e["pid"] == orphan.pid)
    second = [e["time"] for e in log if e["event"] == "start" and e["dir"].endswith("trial-001")][-1]
    assert second >= orphan_end          # --jobs 1: the adopted trial held the only slot


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "Traceback" not in err[0], err
    return err[0]


@pytest.mark.parametrize("saves_before_full", [0, 2])
def test_a_full_disk_is_one_line_and_stops_the_trials(tmp_path, trial_env, monkeypatch, capsys, saves_before_full):
    """sweep.json cannot be written (ENOSPC): at once (0), or once trial-000 runs and trial-001 has started (2):
    exit 2, one line, and no trial process left running."""
    import errno

    from sopt.experiments import sweep_dir
    real, calls = sweep_dir.write_atomic, []

    def write_atomic(path, text):
        calls.append(path)
        if len(calls) > saves_before_full:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        real(path, text)
    monkeypatch.setattr(sweep_dir, "write_atomic", write_atomic)
    config = fake_config(tmp_path / "c.toml", steps=100, sleep=0.05)
    code, _ = sweep([str(config), "x=1,2", "--jobs", "2", "--out", str(tmp_path / "sweep")])
    assert code == 2
    line = one_error_line(capsys)
    assert "No space left on device" in line and "sweep.json" in line
    assert (tmp_path / "sweep" / "logs" / "trial-001.err").exists() == (saves_before_full == 2)   # it started
    assert processes_of(tmp_path / "sweep") == []


class FakeRay:
    """What init_ray uses of the ``ray`` module, recording ray.init's keyword arguments; its node on ``node_ip``."""

    def __init__(self, node_ip: str) -> None:
        self.calls: list[dict] = []
        self.node_ip, self.shut_down = node_ip, False

    def init(self, **kwargs) -> None:
        self.calls.append(kwargs)

    def nodes(self) -> list[dict]:
        return [{"NodeManagerAddress": self.node_ip}]

    def shutdown(self) -> None:
        self.shut_down = True


def test_ray_init_binds_a_local_instance_to_localhost(monkeypatch):
    from sopt.experiments.ray_backend import RayBindError, init_ray
    fake = FakeRay("127.0.0.1")
    monkeypatch.setitem(sys.modules, "ray", fake)
    init_ray(None, 3)
    init_ray("ray://head:10001")
    local, cluster = fake.calls
    assert local["_node_ip_address"] == "127.0.0.1" and local["include_dashboard"] is False
    assert local["num_cpus"] == 3 and "address" not in local
    assert cluster["address"] == "ray://head:10001" and "_node_ip_address" not in cluster
    exposed = FakeRay("192.0.2.2")          # a Ray that ignores the request is shut down and refused
    monkeypatch.setitem(sys.modules, "ray", exposed)
    with pytest.raises(RayBindError, match="listens on 192.0.2.2, not only on 127.0.0.1"):
        init_ray(None)
    assert exposed.shut_down


def _fifo(path: pathlib.Path) -> None:
    path.unlink()
    os.mkfifo(path)


def _edit(change):
    def edit(path: pathlib.Path) -> None:
        data = json.loads(path.read_text())
        change(data)
        path.write_text(json.dumps(data))
    return edit


def _set_trial(key, value):
    return _edit(lambda data: data["trials"][0].__setitem__(key, value))


# how sweep.json of a finished 2-trial sweep is spoiled, and a fragment of the one line that says so
SPOILED_SWEEP_FILES = {
    "fifo": (_fifo, "not a regular file"),
    "dev_zero": (lambda p: (p.unlink(), p.symlink_to("/dev/zero")), "not a regular file"),
    "over_64_mib": (lambda p: os.truncate(p, 65 * 2**20), "over 64 MiB"),
    "nested_100000_deep": (lambda p: p.write_text("[" * 100_000 + "]" * 100_000), "nested too deep"),
    "trial_dir_outside": (_set_trial("dir", "../../elsewhere"), "is not this sweep's trial trial-000"),
    "trial_overrides_changed": (_set_trial("overrides", ["x=1", "+steps=1000000"]), "is not this sweep's trial"),
    "trials_missing": (_edit(lambda data: data.pop("trials")), "does not list this sweep's 2 trials"),
    "trial_not_an_object": (_edit(lambda data: data["trials"].__setitem__(0, 7)), "is not this sweep's trial"),
    "params_not_a_table": (_set_trial("params", "x"), "is not this sweep's trial"),
    "metrics_not_a_table": (_set_trial("metrics", [1, 2]), "metrics of numbers"),
    "metrics_nested_deep": (_set_trial("metrics", {"loss": json.loads("[" * 900 + "]" * 900)}), "nested too deep"),
    "status_unknown": (_set_trial("status", "exploded"), "a status of pending, running"),
}


def limited_sweep(argv: list[str]) -> subprocess.CompletedProcess:
    """``sopt sweep ARGV`` with fake trials in a process of its own with 1 GiB of address space and 20 s: a
    regression (a read of /dev/zero, an enumeration of 10^9 trials) fails the test, and spares the machine."""
    return subprocess.run(
        [sys.executable, "-c", "import resource, runpy, sys; resource.setrlimit(resource.RLIMIT_AS, (2**30, 2**30)); "
                               "sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')",
         str(pathlib.Path(__file__).with_name("sweep_harness.py")), *argv],
        capture_output=True, text=True, timeout=20, env={**os.environ})


def assert_one_line(process: subprocess.CompletedProcess, fragment: str) -> None:
    err = process.stderr.splitlines()
    assert process.returncode == 2 and len(err) == 1 and err[0].startswith("error: ") and fragment in err[0], \
        process.stderr[-2000:]


@pytest.mark.parametrize("case", SPOILED_SWEEP_FILES)
def test_a_spoiled_sweep_json_is_one_line(tmp_path, case):
    spoil, fragment = SPOILED_SWEEP_FILES[case]
    config = fake_config(tmp_path / "c.toml", steps=2)
    argv = [str(config), "x=1,2", "--out", str(tmp_path / "sweep")]
    assert sweep(argv)[0] == 0
    spoil(tmp_path / "sweep" / "sweep.json")
    assert_one_line(limited_sweep(argv), fragment)
    assert not (tmp_path / "elsewhere").exists()


# command lines whose space is too large to enumerate (each took minutes and memory, or never ended)
HUGE_SPACES = {
    "range_1e9": (["x=range(0,1000000000)"], "1000000000 values; a sweep has at most 10000 trials"),
    "range_past_maxsize": (["x=range(100000000000000000000000)"], "values; a sweep has at most 10000"),
    "grid_1e9": ([f"{k}=range(0,1000)" for k in ("x", "y", "z")], "has 1000000000 trials; a sweep has at most"),
    "samples_1e9": (["x=uniform(0,1)", "--samples", "1000000000"], "--samples 1000000000: must be in [1, 10000]"),
    "list_of_20001": (["x=" + ",".join(map(str, range(20001)))], "20001 values; a sweep has at most 10000"),
    "choice_of_20001": (["x=choice(" + ",".join(map(str, range(20001))) + ")"], "20001 values"),
}


@pytest.mark.parametrize("case", HUGE_SPACES)
def test_a_space_too_large_is_refused_before_it_is_enumerated(tmp_path, case):
    tokens, fragment = HUGE_SPACES[case]
    config = fake_config(tmp_path / "c.toml", steps=2)
    assert_one_line(limited_sweep([str(config), *tokens, "--out", str(tmp_path / "sweep")]), fragment)
    assert not (tmp_path / "sweep").exists()
