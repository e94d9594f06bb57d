"""Start-up of ``sopt run``: the time from launching the process to its first training step, caches warm.

What is measured (wall clock, from just before ``subprocess.Popen`` in this script):

* ``python``            -- ``python -c pass``: the interpreter alone;
* ``import``            -- ``python -m sopt --version``: the interpreter and the imports of the ``sopt`` command
  (sopt, slangpy and whatever slangpy imports);
* ``first step starts`` -- ``python -m sopt run ... log_every=1``: until ``Trainer.fit`` starts its first step
  (config, device, the problem's data, run directory, env.json and the trainer built): the modification time of
  ``metrics.jsonl``'s first record minus that record's ``time_s`` (seconds from the start of ``fit`` to step 1's
  metrics);
* ``first step done``   -- until that first record is written (step 1 done, its loss read back from the GPU).

The run is then stopped with SIGTERM (it checkpoints and exits 0). A first run, not counted, warms the shader cache
(``~/.cache/sopt``), the file cache and Python's bytecode cache: every child writes and reads its ``.pyc`` files in a
folder of its own (``PYTHONPYCACHEPREFIX``, with ``PYTHONDONTWRITEBYTECODE`` unset), as an installed package has
them, so a checkout run with ``PYTHONDONTWRITEBYTECODE=1`` does not compile sopt's ~80 modules from source at every
launch (0.2 s on a 2-core machine) while the floor's slangpy loads its compiled ones. ``--phases`` adds where the
time goes: the same command with timestamps (from the same launch) taken inside the child when the interpreter
starts, the command's own imports are done (sopt and its cli; what a later phase imports counts in that phase), the
config is validated, the device is open, the problem is built and its run folder made, env.json is written,
``Trainer.fit`` starts and the first ``train_step`` returns. Each variant runs ``--runs`` times; the median and the
minimum are printed. With ``--without-torch`` the same is measured with ``import torch`` made to fail in the child
(``sys.modules["torch"] = None`` before sopt is imported): slangpy imports torch when it is installed, which costs
1.5-2.5 s on a 2-core machine without a GPU, and which sopt's problems do not need.

Run from the repository root (sopt need not be installed)::

    python benchmarks/startup.py                       # fit_projectile's default config
    python benchmarks/startup.py --without-torch --runs 5
    python benchmarks/startup.py --problem nbody_masses --phases --json startup.json
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
NO_TORCH = "import sys; sys.modules['torch'] = None; from sopt.experiments.cli import main; sys.exit(main())"
# The sopt command with a timestamp (seconds since SOPT_STARTUP_LAUNCHED_NS) on stderr after each phase.
PHASES = r"""
import importlib.abc, os, sys, time
launched = int(os.environ["SOPT_STARTUP_LAUNCHED_NS"])
def mark(name):
    print(f"PHASE {name}={(time.time_ns() - launched) / 1e9}", file=sys.stderr, flush=True)
mark("interpreter")
if os.environ.get("SOPT_STARTUP_NO_TORCH"):
    sys.modules["torch"] = None
def after(owner, attr, name, once=True):
    original = getattr(owner, attr)
    done = []
    def wrapped(*args, **kwargs):
        result = original(*args, **kwargs)
        if not (once and done):
            done.append(1)
            mark(name)
        return result
    setattr(owner, attr, wrapped)
def before(owner, attr, name):
    original = getattr(owner, attr)
    def wrapped(*args, **kwargs):
        mark(name)
        return original(*args, **kwargs)
    setattr(owner, attr, wrapped)
# the runner and the Trainer are patched when the command imports them, so each import stays in the phase that
# needs it ("imports" is the command's own: sopt and its cli)
PATCHES = {"sopt.experiments.runner": lambda m: (before(m, "start", "problem built, run folder made"),
                                                 after(m, "environment", "env.json")),
           "sopt.train.trainer": lambda m: (before(m.Trainer, "fit", "first step starts"),
                                            after(m.Trainer, "train_step", "first step done"))}
class PatchOnImport(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name not in PATCHES:
            return None
        sys.meta_path.remove(self)
        try:
            import importlib.util
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        load = spec.loader.exec_module
        def exec_module(module):
            load(module)
            PATCHES[name](module)
        spec.loader.exec_module = exec_module
        return spec
sys.meta_path.insert(0, PatchOnImport())
import sopt
from sopt.experiments import cli
mark("imports")
after(cli, "load_run_config", "config validated")
after(sopt, "get_device", "device open")
sys.exit(cli.main())
"""


def _python(without_torch: bool) -> list[str]:
    """The command prefix that runs the ``sopt`` command (optionally with torch's import blocked)."""
    return [sys.executable, "-c", NO_TORCH] if without_torch else [sys.executable, "-m", "sopt"]


def _child_environment(folder: pathlib.Path) -> dict[str, str]:
    """This process's environment with Python's bytecode cache in ``folder / "pycache"`` (written by the first
    child, read by the others): every timed process starts as an installed package does, from compiled modules."""
    env = {**os.environ, "PYTHONPYCACHEPREFIX": str(folder / "pycache")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def _time_command(argv: list[str], env: dict[str, str]) -> float:
    """Seconds from launch to exit of ``argv`` (which must succeed)."""
    start = time.perf_counter()
    subprocess.run(argv, cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def _time_run(prefix: list[str], problem: str, overrides: list[str], folder: pathlib.Path,
              timeout: float) -> tuple[float, float]:
    """(launch -> first step starts, launch -> first step done), seconds, of one ``sopt run`` stopped by SIGTERM
    after its first metrics record."""
    out = folder / f"run-{time.time_ns()}"
    metrics = out / "metrics.jsonl"
    launched = time.time_ns()
    proc = subprocess.Popen([*prefix, "run", "--problem", problem, *overrides, "log_every=1", "--out", str(out),
                             "--no-progress"], cwd=ROOT, env=_child_environment(folder), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + timeout
    record = None
    while record is None:
        if proc.poll() is not None:
            raise RuntimeError(f"sopt run ended before its first step: {proc.stderr.read()}")
        if time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"no first step within {timeout} s")
        if metrics.exists():
            text = metrics.read_text(encoding="utf-8")
            if "\n" in text:   # the first line is whole
                record = json.loads(text.split("\n", 1)[0])
                written = metrics.stat().st_mtime_ns
        time.sleep(0.001)
    proc.send_signal(signal.SIGTERM)   # checkpoint, status interrupted, exit 0
    proc.communicate(timeout=timeout)
    done = (written - launched) / 1e9
    return done - float(record["time_s"]), done


def _time_phases(without_torch: bool, problem: str, overrides: list[str], folder: pathlib.Path,
                 timeout: float) -> dict[str, float]:
    """Seconds from launch to the end of each phase of one ``sopt run`` (PHASES), stopped by SIGTERM after its
    first step."""
    out = folder / f"phases-{time.time_ns()}"
    env = _child_environment(folder)
    if without_torch:
        env["SOPT_STARTUP_NO_TORCH"] = "1"
    argv = [sys.executable, "-c", PHASES, "run", "--problem", problem, *overrides, "--out", str(out), "--no-progress"]
    env["SOPT_STARTUP_LAUNCHED_NS"] = str(time.time_ns())
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    watchdog = threading.Timer(timeout, proc.kill)
    watchdog.start()
    phases: dict[str, float] = {}
    try:
        for line in proc.stderr:   # one line per phase, as it happens
            if line.startswith("PHASE "):
                name, value = line[len("PHASE "):].rsplit("=", 1)
                phases[name] = float(value)
                if name == "first step done":
                    proc.send_signal(signal.SIGTERM)   # checkpoint, status interrupted, exit 0
        proc.wait()
    finally:
        watchdog.cancel()
    if "first step done" not in phases:
        raise RuntimeError(f"sopt run ended before its first step (phases seen: {phases})")
    return phases


# The floor below sopt: SlangPy alone, from launch to an open device (torch marked unavailable, as sopt run does).
_FLOOR = """
import sys, time
t0 = time.perf_counter()
sys.modules["torch"] = None
import slangpy as spy
kind = {"cuda": spy.DeviceType.cuda, "vulkan": spy.DeviceType.vulkan}.get(sys.argv[1], spy.DeviceType.automatic)
spy.Device(type=kind, enable_hot_reload=False)
"""


def _stats(values: list[float]) -> dict[str, float]:
    return {"median_s": statistics.median(values), "min_s": min(values), "all_s": values}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--problem", default="fit_projectile", help="the problem run (its default config)")
    parser.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                        help="an override for the run (repeatable), e.g. --override multi_start=1")
    parser.add_argument("--runs", type=int, default=3, help="timed runs per variant (default 3)")
    parser.add_argument("--without-torch", action="store_true",
                        help="also measure with torch's import blocked in the child")
    parser.add_argument("--phases", action="store_true", help="also time each phase of the start-up")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds allowed for one run's first step")
    parser.add_argument("--json", metavar="FILE", help="also write the numbers as JSON")
    parser.add_argument("--floor", action="store_true", help="also time SlangPy alone: launch, import slangpy, "
                        "open the device (the floor no sopt code can go below)")
    args = parser.parse_args(argv)
    overrides = [*args.override, "steps=100000", "checkpoint_every=100000"]   # never ends on its own

    variants = [False, True] if args.without_torch else [False]
    results: dict[str, dict[str, object]] = {}
    with tempfile.TemporaryDirectory(prefix="sopt-startup-") as tmp:
        folder = pathlib.Path(tmp)
        env = _child_environment(folder)
        _time_run(_python(False), args.problem, overrides, folder, args.timeout)   # warm the caches
        for without_torch in variants:
            name = "without torch" if without_torch else "as installed"
            prefix = _python(without_torch)
            python = [_time_command([sys.executable, "-c", "pass"], env) for _ in range(args.runs)]
            imports = [_time_command([*prefix, "--version"], env) for _ in range(args.runs)]
            runs = [_time_run(prefix, args.problem, overrides, folder, args.timeout) for _ in range(args.runs)]
            results[name] = {"python": _stats(python), "import": _stats(imports),
                             "first step starts": _stats([r[0] for r in runs]),
                             "first step done": _stats([r[1] for r in runs])}
            if args.floor and not without_torch:
                kind = os.environ.get("SOPT_DEVICE", "auto")
                floor = [_time_command([sys.executable, "-c", _FLOOR, kind], env) for _ in range(args.runs)]
                results[name]["slangpy alone to an open device"] = _stats(floor)
            if args.phases:
                timed = [_time_phases(without_torch, args.problem, overrides, folder, args.timeout)
                         for _ in range(args.runs)]
                results[name]["phases"] = {k: _stats([t[k] for t in timed]) for k in timed[0]}
    device = os.environ.get("SOPT_DEVICE", "auto")
    print(f"sopt run --problem {args.problem} {' '.join(args.override)} (SOPT_DEVICE={device}), "
          f"seconds from launch, median (min) of {args.runs}, shader and bytecode caches warm:")
    for name, phases in results.items():
        cells = ", ".join(f"{phase} {s['median_s']:.2f} ({s['min_s']:.2f})" for phase, s in phases.items()
                          if phase != "phases")
        print(f"  {name}: {cells}")
        if "phases" in phases:
            print("    phases (seconds from launch when each ends): " + ", ".join(
                f"{phase} {s['median_s']:.2f}" for phase, s in phases["phases"].items()))
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps({"problem": args.problem, "overrides": args.override,
                                                       "device": device, "runs": args.runs, "results": results},
                                                      indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
