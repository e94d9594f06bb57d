"""The suite stops within seconds of SIGTERM (tests/conftest.py), also while a test is inside a native call."""

from __future__ import annotations

import os
import pathlib
import shutil
import signal
import subprocess
import sys
import time

import pytest

TESTS = pathlib.Path(__file__).resolve().parent

SLOW_TESTS = '''
import ctypes, pathlib, time

def test_python_sleep():
    pathlib.Path("started").touch()
    time.sleep(300)

def test_native_sleep():
    pathlib.Path("started").touch()
    ctypes.CDLL(None).sleep(300)   # no Python handler runs until it returns
'''


@pytest.mark.parametrize("which", ["test_python_sleep", "test_native_sleep"])
def test_sigterm_stops_the_suite_within_seconds(tmp_path, which):
    shutil.copy(TESTS / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_slow.py").write_text(SLOW_TESTS, encoding="utf-8")
    proc = subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", which,
                             str(tmp_path)], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    deadline = time.monotonic() + 120
    while not (tmp_path / "started").exists():     # inside the test, the suite's handler installed
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[0]
        time.sleep(0.1)
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    try:
        out, _ = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail(f"pytest still ran 30 s after SIGTERM ({which})")
    took = time.monotonic() - sent
    assert proc.returncode != 0, out
    assert took < 20, (took, out)


OWN_THEN_LATER = '''
import signal, time

def test_sends_itself_sigterm(own_sigterm):
    got = []
    previous = signal.signal(signal.SIGTERM, lambda s, f: got.append(s))
    signal.raise_signal(signal.SIGTERM)
    signal.signal(signal.SIGTERM, previous)
    assert got == [signal.SIGTERM]

def test_runs_past_the_grace_period():
    time.sleep(GRACE)
'''


def test_a_tests_own_sigterm_does_not_end_the_suite_later(tmp_path):
    # the watchdog reads the wakeup fd on its own thread: a test's own signal must be read as its own even when the
    # watchdog gets to it after the test ended
    from conftest import GRACE_S
    shutil.copy(TESTS / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_own.py").write_text(OWN_THEN_LATER.replace("GRACE", str(GRACE_S + 2)), encoding="utf-8")
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)], cwd=tmp_path,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "2 passed" in r.stdout, r.stdout + r.stderr
