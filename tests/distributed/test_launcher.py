"""The launcher and the ranks' environment, with plain Python processes standing in for sopt's ranks (no GPU):
each rank gets torch.distributed's env:// variables and NVLink multicast off; a failing rank stops the others
(SIGTERM, then SIGKILL for one that cannot act on it) and its one-line error is printed; signals are passed on."""

from __future__ import annotations

import io
import os
import pathlib
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from sopt.distributed import launcher
from sopt.distributed.environment import MULTICAST_OFF, rank_environment


def _script(tmp_path: pathlib.Path, body: str) -> list[str]:
    path = tmp_path / "rank.py"
    path.write_text(textwrap.dedent(body), encoding="utf-8")
    return [sys.executable, str(path)]


def test_every_rank_gets_the_env_variables_and_multicast_off(tmp_path: pathlib.Path) -> None:
    command = _script(tmp_path, f"""
        import json, os, pathlib
        keys = ["RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                *{sorted(MULTICAST_OFF)!r}]
        pathlib.Path({str(tmp_path)!r}, "rank" + os.environ["RANK"]).write_text(json.dumps({{k: os.environ[k] for k in keys}}))
    """)
    assert launcher.launch(3, command) == 0
    import json
    seen = [json.loads((tmp_path / f"rank{r}").read_text()) for r in range(3)]
    assert [s["RANK"] for s in seen] == ["0", "1", "2"] and [s["LOCAL_RANK"] for s in seen] == ["0", "1", "2"]
    assert {s["WORLD_SIZE"] for s in seen} == {"3"} and {s["MASTER_ADDR"] for s in seen} == {"127.0.0.1"}
    assert len({s["MASTER_PORT"] for s in seen}) == 1
    for s in seen:
        assert {k: s[k] for k in MULTICAST_OFF} == MULTICAST_OFF
        env = rank_environment(s)
        assert env is not None and env.world_size == 3 and env.rank == int(s["RANK"])


def test_a_failing_rank_stops_the_others_and_its_error_is_printed(tmp_path: pathlib.Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    # rank 0 ignores SIGTERM and waits forever, as a rank blocked in a collective would; rank 1 fails
    monkeypatch.setattr(launcher, "GRACE_SECONDS", 0.5)
    command = _script(tmp_path, """
        import os, signal, sys, time
        if os.environ["RANK"] == "0":
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            time.sleep(600)
        print("some output first")
        print("error: the sampler broke at step 3", file=sys.stderr)
        sys.exit(2)
    """)
    out = io.StringIO()
    began = time.monotonic()
    assert launcher.launch(2, command, out=out) == 2
    assert time.monotonic() - began < 30.0
    assert out.getvalue().strip() == "error: rank 1 of 2 failed (exit status 2): the sampler broke at step 3"


def test_a_rank_that_dies_without_an_error_line_is_reported_by_its_last_line() -> None:
    assert launcher.last_error_line("a\nTraceback ...\nRuntimeError: boom\n") == "RuntimeError: boom"
    assert launcher.last_error_line("x\nerror: one line\nlater\n") == "one line"
    assert launcher.last_error_line("") == "it printed nothing"


def test_sigterm_to_the_launcher_reaches_every_rank_once(tmp_path: pathlib.Path) -> None:
    ready = tmp_path / "ready"
    command = _script(tmp_path, f"""
        import os, pathlib, signal, sys, time
        got = []
        signal.signal(signal.SIGTERM, lambda s, f: got.append(s))
        pathlib.Path({str(ready)!r} + os.environ["RANK"]).touch()
        deadline = time.time() + 60
        while not got and time.time() < deadline:
            time.sleep(0.01)
        time.sleep(0.3)   # a second forwarded signal would land here
        pathlib.Path({str(tmp_path)!r}, "got" + os.environ["RANK"]).write_text(str(len(got)))
    """)
    runner = subprocess.Popen([sys.executable, "-c", "import sys; from sopt.distributed.launcher import launch; "
                               f"sys.exit(launch(2, {command!r}))"],
                              env={**os.environ, "PYTHONPATH": str(pathlib.Path(__file__).resolve().parents[2])})
    deadline = time.monotonic() + 60
    while not all((tmp_path / f"ready{r}").exists() for r in range(2)) and time.monotonic() < deadline:
        time.sleep(0.02)
    runner.send_signal(signal.SIGTERM)
    assert runner.wait(60) == 0
    assert [(tmp_path / f"got{r}").read_text() for r in range(2)] == ["1", "1"]


def test_rank_environment_is_none_alone_and_refuses_malformed_variables() -> None:
    assert rank_environment({}) is None and rank_environment({"WORLD_SIZE": "1"}) is None
    with pytest.raises(ValueError, match="RANK, MASTER_ADDR"):
        rank_environment({"WORLD_SIZE": "2", "LOCAL_RANK": "0", "MASTER_PORT": "1"})
    with pytest.raises(ValueError, match=r"RANK=2 is out of range: allowed \[0, 1\]"):
        rank_environment({"WORLD_SIZE": "2", "RANK": "2", "LOCAL_RANK": "0", "MASTER_ADDR": "h", "MASTER_PORT": "1"})
    with pytest.raises(ValueError, match="WORLD_SIZE='two' is not an integer"):
        rank_environment({"WORLD_SIZE": "two"})
