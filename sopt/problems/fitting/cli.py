"""Command line of every fitting problem: ``python -m sopt.problems.<name> [--config FILE] [--steps N] [--out DIR]
[--resume DIR] [--no-progress]`` (a problem's ``__main__.py`` is ``sys.exit(main(Problem))``).

Exit status 0 when the fit completed, 2 for a usage, config or output-folder error (each problem one line
``error: ...`` on stderr, no traceback; config errors are found before any GPU work or file is written), 1 when
the fit diverged (NaN/Inf; the last good checkpoint is kept).
"""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn

import sopt
from sopt.config.schema import ConfigError
from sopt.problems.fitting.config import load_config
from sopt.problems.fitting.problem import FittingProblem
from sopt.problems.fitting.runner import RESULT_FILE, RunResult, resume, run
from sopt.train import NonFiniteError


class _Parser(argparse.ArgumentParser):
    """argparse whose usage errors are one ``error: ...`` line (exit 2), like the config errors."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"error: {message} (see --help)\n")


def _print_errors(exc: Exception) -> None:
    lines = exc.lines if isinstance(exc, ConfigError) else [" ".join(str(exc).split())]
    for line in lines:
        print(f"error: {line}", file=sys.stderr)


def _report(result: RunResult) -> None:
    r = result.result
    units = result.problem.units()
    print(f"{'parameter':<14}{'true':>14}{'fitted':>14}{'rel. error':>12}")
    for name, true in r["true"].items():
        fitted = r["fitted"].get(name)
        if isinstance(true, (int, float)) and isinstance(fitted, (int, float)):
            cells = f"{true:>14.6g}{fitted:>14.6g}"
        else:
            cells = f"{'(array)':>14}{'(array)':>14}"
        unit = f" {units[name]}" if units.get(name) else ""
        print(f"{name:<14}{cells}{r['rel_error'].get(name, float('nan')):>12.3e}{unit}")
    for line in result.problem.summary():
        print(line)
    print(f"final loss {r['loss']:.6g} after {r['steps']} steps ({result.seconds:.1f} s of training here)")
    print(f"wrote {', '.join(str(f) for f in result.files)}")


def main(problem_cls: type[FittingProblem], argv: list[str] | None = None) -> int:
    """Run ``problem_cls`` from the command line ``argv`` (default sys.argv[1:]); returns the exit status."""
    name = problem_cls.name
    parser = _Parser(prog=f"python -m sopt.problems.{name}", description=problem_cls.description or None)
    parser.add_argument("--config", metavar="FILE", help="JSON config merged over the defaults (every key checked)")
    parser.add_argument("--steps", type=int, metavar="N", help="optimiser steps (overrides the config)")
    parser.add_argument("--out", metavar="DIR", help=f"new or empty output folder (default: runs/{name})")
    parser.add_argument("--resume", metavar="DIR", help="continue the interrupted run in DIR to its end")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)
    if args.resume is not None:
        given = [flag for flag, v in (("--out", args.out), ("--config", args.config), ("--steps", args.steps))
                 if v is not None]
        if given:
            parser.error(f"--resume continues a run with its own config and folder; drop {', '.join(given)}")
    try:
        config = None
        if args.resume is None:   # config errors before any GPU work
            config = load_config(problem_cls.schema, args.config,
                                 {"steps": args.steps} if args.steps is not None else None)
        device = sopt.get_device()
        print(f"device: {sopt.device_kind()} ({device.info.adapter_name})")
        if config is None:
            print(f"resuming the run in {args.resume}")
            result = resume(problem_cls, args.resume, progress=not args.no_progress)
        else:
            out = args.out if args.out is not None else f"runs/{name}"
            print(f"{name}: {config.steps} steps into {out}")
            result = run(problem_cls, config, out, progress=not args.no_progress)
    except NonFiniteError as exc:
        _print_errors(exc)
        return 1
    except (ValueError, sopt.device.DeviceUnavailableError) as exc:
        _print_errors(exc)
        return 2
    _report(result)
    print(f"result: {result.out_dir / RESULT_FILE}")
    return 0


def entry_point(problem_cls: type[FittingProblem]) -> None:
    """``sys.exit(main(problem_cls))``: the body of a problem's ``__main__.py``."""
    sys.exit(main(problem_cls))
