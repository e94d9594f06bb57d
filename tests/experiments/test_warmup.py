"""Compiles are visible and avoidable: numbered compile notices with their time, a training bar whose rate and ETA
leave compile time out, and ``sopt warmup`` filling the disk cache ahead of a first run."""

from __future__ import annotations

import io
import os
import pathlib
import re
import subprocess
import sys

from sopt.train.progress import TrainingBar, TrainingRate

from tests.experiments.test_cli import SMALL, sopt_main

ROOT = pathlib.Path(__file__).resolve().parents[2]


class FakeClocks:
    """A wall clock and a compile clock that the test moves by hand."""

    def __init__(self) -> None:
        self.now, self.compiled = 0.0, 0.0

    def step(self, seconds: float, compiling: float = 0.0) -> None:
        self.now += seconds
        self.compiled += compiling


def test_the_rate_leaves_out_steps_that_compiled_until_the_gpu_ran_them() -> None:
    clocks = FakeClocks()
    rate = TrainingRate(lambda: clocks.now, lambda: clocks.compiled)
    clocks.step(20.0, compiling=19.0)      # the first step: compiling on the host
    rate.tick()
    clocks.step(0.1)                       # recorded but not run: the driver has not compiled its kernels yet
    rate.tick()
    clocks.step(100.0)                     # the first wait for the GPU, which compiled the kernels as they ran
    rate.tick(synced=True)
    assert rate.rate() is None and rate.eta(99) is None and rate.excluded == 3
    for _ in range(4):                     # then 0.5 s a step
        clocks.step(0.5)
        rate.tick(synced=True)
    clocks.step(30.0, compiling=29.9)      # an evaluation compiling (and waiting) on a metrics step
    rate.tick(synced=True)
    clocks.step(0.5)
    rate.tick(synced=True)                 # the compile may have come after that wait: this wait is left out too
    clocks.step(1.0)                       # two steps at once, 0.5 s each
    rate.tick(2)
    assert rate.excluded == 5 and rate.steps == 6
    assert rate.rate() == 2.0 and rate.eta(100) == 50.0


def test_the_bar_shows_the_eta_of_steps_without_compiles() -> None:
    clocks = FakeClocks()
    rate = TrainingRate(lambda: clocks.now, lambda: clocks.compiled)
    bar = TrainingBar(total=101, file=io.StringIO(), ascii=True, mininterval=0)
    bar.training_rate = rate
    clocks.step(300.0, compiling=299.0)
    rate.tick()
    bar.update(1)
    assert "<?, ?it/s]" in str(bar)            # not "2:12:12": no step without a compile was timed yet
    clocks.step(50.0)                           # the first wait for the GPU: the driver compiled as the kernels ran
    rate.tick(synced=True)
    bar.update(1)
    assert "<?, ?it/s]" in str(bar)
    clocks.step(1.0)
    rate.tick()
    bar.update(1)
    assert "<01:38,  1.00it/s]" in str(bar)     # 98 steps left at 1 step/s
    bar.close()


def _python(args: list[str], cache: pathlib.Path, cwd: pathlib.Path) -> subprocess.CompletedProcess:
    """``python ARGS`` with this checkout's sopt and the shader cache ``cache`` (fresh: its kernels compile)."""
    env = {**os.environ, "SOPT_CACHE_DIR": str(cache),
           "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, *args], env=env, cwd=cwd, capture_output=True, text=True)


def test_a_compile_is_numbered_and_timed_and_counted_out_of_the_training_rate(tmp_path) -> None:
    code = ("import numpy as np, sopt\nfrom sopt.nn import Linear\nfrom sopt.train.progress import TrainingRate\n"
            "rate = TrainingRate()\nx = sopt.Parameter(np.ones((4, 3))).values\nlayer = Linear(3, 5)\n"
            "for _ in range(4):\n    layer.forward(x); sopt.synchronize(); rate.tick(synced=True)\n"
            "print('excluded', rate.excluded, 'counted', rate.steps, 'compiles', len(sopt.runtime.device.compiles()))\n")
    r = _python(["-c", code], tmp_path, ROOT)
    assert r.returncode == 0, r.stderr
    assert "excluded 2 counted 2 compiles 1" in r.stdout, r.stdout
    assert re.search(r"^sopt: compiling kernels on \w+ at their first use \(cached in .* afterwards; the progress bar's "
                     r"rate and ETA leave compiling out\)", r.stderr, re.M), r.stderr
    assert re.search(r"^sopt: compile 1: nn/linear\.slang:linear_forward<3,5,\w+> in \d+\.\d s \((the driver's \d+\.\d s "
                     r"of it; )?\d+\.\d s compiling in this process\)$", r.stderr, re.M), r.stderr


def test_warmup_compiles_once_then_finds_everything_cached_and_leaves_nothing(tmp_path) -> None:
    cache, work = tmp_path / "cache", tmp_path / "work"
    work.mkdir()
    first = _python(["-m", "sopt", "warmup", "fit_projectile", *SMALL], cache, work)
    assert first.returncode == 0, first.stderr
    compiled = re.search(r"^fit_projectile: compiled (\d+) kernel\(s\) into (.*) in \d+\.\d s \(", first.stdout, re.M)
    assert compiled and int(compiled.group(1)) > 0, first.stdout
    assert pathlib.Path(compiled.group(2)).parent == cache
    assert first.stdout.count("\n  ") == int(compiled.group(1))   # one line per kernel, with its time
    # the same kernels and times as the compile notices printed while they compiled, one numbered line each
    noticed = re.findall(r"^sopt: compile (\d+): (.*) in (\d+\.\d) s \(", first.stderr, re.M)
    listed = re.findall(r"^  (\d+): (.*)  (\d+\.\d) s$", first.stdout, re.M)
    assert noticed == listed and len(listed) == int(compiled.group(1)), (first.stdout, first.stderr)
    # the driver's compile is part of each compile, not a wait at the first metrics step
    assert "waiting for the GPU" not in first.stderr
    second = _python(["-m", "sopt", "warmup", "fit_projectile", *SMALL], cache, work)
    assert second.returncode == 0, second.stderr
    assert re.search(r"^fit_projectile: nothing to compile; the [1-9]\d* kernel\(s\) it uses were already compiled",
                     second.stdout, re.M), second.stdout
    assert "compiling" not in second.stderr
    assert list(work.iterdir()) == []


def test_warmup_refuses_a_bad_command_in_one_line_before_gpu_work() -> None:
    for argv, message in ((["warmup"], "give a problem (sopt problems lists them) or a config file"),
                          (["warmup", "--all", "steps=2"],
                           "--all takes no problem, config or override (got 'steps=2')"),
                          (["warmup", "fit_projectile", "oops"], "'oops' is not an override"),
                          (["warmup", "fit_projectil"], "did you mean 'fit_projectile'")):
        code, out, err = sopt_main(argv)
        assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and message in err, (argv, err)
