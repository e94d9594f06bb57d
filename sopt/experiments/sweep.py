"""``sopt sweep``: grid and seeded random search over a config's keys, one ``sopt run`` per trial, resumable.

:func:`sweep_main` is the command (``sopt sweep --help``); the pieces live next to it: the space grammar and the
trials in :mod:`~sopt.experiments.search_space`, the sweep directory and sweep.json in
:mod:`~sopt.experiments.sweep_dir`, the processes in :mod:`~sopt.experiments.local_executor`, early stopping in
:mod:`~sopt.experiments.prune`, and Ray Tune in :mod:`~sopt.experiments.ray_backend` (imported only for
``--backend ray``).

Exit status: 0 when the sweep completed (failed trials included: each is recorded with its error) or was
interrupted (SIGINT/SIGTERM: the running trials checkpoint and stop; the resume command is printed); 2 for a usage,
space or config-file error (one ``error: ...`` line on stderr, before any trial runs).
"""

from __future__ import annotations

import argparse
import os
import pathlib
import re
import shlex
import sys
from typing import Any, Callable, Sequence

from sopt.config.files import read_config_file
from sopt.config.schema import ConfigError
from sopt.experiments.local_executor import LocalExecutor, TrialCommand
from sopt.experiments.problem import SPEC
from sopt.experiments.prune import make_pruner
from sopt.experiments.report_table import (LAST_LOGGED, NEVER_BEST, best_run, metric_columns, ranking_value,
                                             ranks_by_curve)
from sopt.experiments.run_dir import check_name
from sopt.experiments.run_records import read_run
from sopt.experiments.cli import CommandParser
from sopt.experiments.search_space import SearchSpace, SpaceError, format_value, parse_space, parse_value
from sopt.experiments.sweep_dir import SweepDir, Trial, sweep_hash

DESCRIPTION = """\
Runs one `sopt run` per trial of a search space, each into its own run directory under the sweep directory
(runs/<problem>/sweep-<hash>/ or --out), and prints a table of the trials. Tokens KEY=VALUE whose value has a
top-level comma or is a space function are sweep axes; every other token (steps=50, +a.new=1, ~a.b) is an
override given to every trial.

space:
  KEY=a,b,c                TOML literals (0.1, true, "x", [1,2]); a bare word (Adam) is a string
  KEY=range(a,b[,step])    integers, the end exclusive as in Python
  KEY=choice(a,b,c)        like a list
  KEY=uniform(a,b)         random search: a float in [a, b)     (needs --samples)
  KEY=loguniform(a,b)      random search: log-uniform, 0 < a < b (needs --samples)
Lists, ranges and choices alone make a grid (their cartesian product); with --samples N the sweep is a seeded
random search of N trials (list keys drawn uniformly). The same command again resumes the sweep: finished,
failed and pruned trials are kept, interrupted ones resumed, pending ones started.

examples (quote the specs with parentheses for the shell):
  sopt sweep fit.toml steps=200 optimizer.learning_rate=0.01,0.03,0.1 'seed=range(3)' --jobs 3
  sopt sweep fit.toml 'optimizer.learning_rate=loguniform(1e-4,1e-1)' --samples 20 --seed 1 --prune median
  sopt sweep fit.toml optimizer.otype=Adam,SGD --gpus 0,1 --trials-per-gpu 2
  sopt sweep fit.toml optimizer.otype=Adam,SGD --backend ray --address auto --gpu-per-trial 0.5
"""


def sopt_trial_command(action: str, trial_dir: pathlib.Path, config: str, overrides: Sequence[str]) -> list[str]:
    """A trial's argv: ``sopt run CONFIG OVERRIDES --out TRIAL_DIR --no-progress`` (action "run") or ``sopt resume
    TRIAL_DIR --no-progress`` (action "resume"), through this Python (``python -m sopt``)."""
    if action == "run":
        return [sys.executable, "-m", "sopt", "run", config, *overrides, "--out", str(trial_dir), "--no-progress"]
    if action == "resume":
        return [sys.executable, "-m", "sopt", "resume", str(trial_dir), "--no-progress"]
    raise ValueError(f"trial action {action!r}: allowed 'run' or 'resume'")


def check_sopt_trial(config: str, overrides: Sequence[str]) -> int:
    """Validates a trial's config as ``sopt run`` will (the problem's schema, the overrides' keys and values), without
    running anything; returns its ``steps``. Raises ConfigError (one line per problem)."""
    from sopt.experiments.cli import load_run_config
    _, resolved = load_run_config(config, None, list(overrides))
    return int(resolved.steps)


TrialCheck = Callable[[str, Sequence[str]], int]


class _UsageError(Exception):
    """A usage, space or config-file error: one line, exit status 2."""


def _number_within(parse: Callable[[str], Any], what: str, within: Callable[[Any], bool],
                   allowed: str) -> Callable[[str], Any]:
    """An argparse ``type``: ``parse(text)``, refused (ArgumentTypeError) when it is not ``what`` or outside
    ``within``, saying what is ``allowed``."""
    def check(text: str) -> Any:
        try:
            value = parse(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
        if not within(value):
            raise argparse.ArgumentTypeError(f"{value}: must be {allowed}")
        return value
    return check


_positive_int = _number_within(int, "an integer", lambda v: v >= 1, "at least 1")
_seed = _number_within(int, "an integer", lambda v: 0 <= v < 2**32, "in [0, 2^32)")
_gpu_fraction = _number_within(float, "a number", lambda v: 0 <= v <= 64,
                               "in [0, 64] (fractions like 0.5 share a GPU)")


def _gpu_list(text: str) -> list[str]:
    gpus = [g.strip() for g in text.split(",")]
    if any(not re.fullmatch(r"[A-Za-z0-9-]+", g) for g in gpus):
        raise argparse.ArgumentTypeError(f"{text!r}: give GPU indices (or UUIDs) separated by commas, like 0,1")
    if len(set(gpus)) != len(gpus):
        raise argparse.ArgumentTypeError(f"{text!r}: a GPU is named twice")
    return gpus


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``sopt sweep``."""
    p = CommandParser(prog="sopt sweep", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("config", metavar="CONFIG", help="the config file (TOML or JSON) every trial runs")
    p.add_argument("tokens", nargs="*", metavar="KEY=VALUE",
                   help="sweep axes (KEY=SPACE) and overrides given to every trial (KEY=VALUE, +KEY=VALUE, ~KEY)")
    p.add_argument("--samples", type=_positive_int, metavar="N", help="random search: N trials")
    p.add_argument("--seed", type=_seed, metavar="S", help="seed of the random search (default 0)")
    p.add_argument("--out", metavar="DIR", help="sweep directory (default runs/<problem>/sweep-<hash>)")
    p.add_argument("--jobs", type=_positive_int, metavar="N",
                   help="trials at once (default 1; with --gpus, GPUs x --trials-per-gpu; with Ray, as many as "
                        "the cluster's resources allow)")
    p.add_argument("--gpus", type=_gpu_list, metavar="0,1",
                   help="GPUs to spread the trials over (CUDA_VISIBLE_DEVICES per trial, round robin)")
    p.add_argument("--trials-per-gpu", type=_positive_int, metavar="K", help="trials at once on each GPU "
                   "(default 1)")
    p.add_argument("--metric", default="loss", metavar="NAME",
                   help="the metrics.jsonl / summary metric that ranks the trials (default loss)")
    p.add_argument("--mode", choices=("min", "max"), default="min", help="whether lower or higher is better "
                   "(default min)")
    p.add_argument("--prune", choices=("median", "halving", "asha"),
                   help="stop bad trials early: median stopping rule, or asynchronous successive halving "
                        "(asha is the same)")
    p.add_argument("--min-steps", type=_positive_int, metavar="N",
                   help="pruning: grace period of the median rule / first rung of halving (default: steps/eta^2)")
    p.add_argument("--eta", type=int, default=3, metavar="E", help="halving: reduction factor (default 3)")
    p.add_argument("--backend", choices=("local", "ray"), default="local",
                   help="run the trials as local processes (default) or through Ray Tune")
    p.add_argument("--address", metavar="ADDR",
                   help="Ray: the cluster to join (e.g. auto or ray://host:10001; default: a local Ray instance)")
    p.add_argument("--gpu-per-trial", type=_gpu_fraction, metavar="F",
                   help="Ray: GPUs each trial asks for (fractions allowed; default 0)")
    p.add_argument("--retry-failed", action="store_true", help="run the failed trials of a resumed sweep again")
    return p


# -- the config file -----------------------------------------------------------------------------------------------
def _read_config(path: pathlib.Path) -> tuple[str, dict[str, Any]]:
    """(text, data) of a TOML or JSON config, read as sopt run reads it (sopt.config.files.read_config_file: a
    regular file of at most 4 MiB, nesting bounded; a FIFO or /dev/zero is refused at once, never read)."""
    if not os.path.lexists(path):
        raise _UsageError(f"CONFIG {path}: no such file")
    try:
        return read_config_file(path)
    except ConfigError as exc:
        raise _UsageError(str(exc)) from None


def _problem_name(path: pathlib.Path, data: dict[str, Any]) -> str:
    """The config's problem as a folder name (a module:Class problem's spec with '.' for ':')."""
    problem = data.get("problem")
    if isinstance(problem, str) and SPEC.fullmatch(problem):
        return problem.replace(":", ".")
    if not isinstance(problem, str) or not re.fullmatch(r"[A-Za-z0-9_]+", problem):
        raise _UsageError(f"CONFIG {path}: problem = {problem!r}: needs a top-level problem key naming the "
                          f"problem (sopt problems lists them)")
    return problem


def _planned_steps(data: dict[str, Any], space: SearchSpace) -> int | None:
    """The trials' step count when the command line or the config says it (the largest, if swept)."""
    for axis in space.axes:
        if axis.name == "steps" and axis.kind == "list" and all(isinstance(v, int) for v in axis.values):
            return max(axis.values)
    steps = data.get("steps")
    for token in space.base_overrides:
        key, _, value = token.partition("=")
        if key.strip().lstrip("+") == "steps":
            try:
                steps = parse_value(value, "steps")
            except SpaceError:
                steps = None
    return steps if isinstance(steps, int) and not isinstance(steps, bool) and steps > 0 else None


# -- output --------------------------------------------------------------------------------------------------------
def _cell(value: Any, digits: int) -> str:
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    if value is None:
        return "-"
    return format_value(value) if not isinstance(value, str) else value


def trial_table(trials: Sequence[Trial], axes: Sequence[str], metric: str, mode: str,
                trial_dir: Callable[[Trial], pathlib.Path]) -> str:
    """The summary table (id, each swept key, status, metric) and a line naming the best trial as ``sopt report``
    ranks it (sopt.experiments.report_table.best_run over the trials' run directories, ``trial_dir``): by the
    metric's last value in metrics.jsonl where the trials log it (where curves.png's curve ends, what the pruner
    judged). Where a trial's final value (summary.json's: a problem's ``finish`` evaluates the loss anew at the
    final parameters) differs from it, the table shows both under the report's headers, ``<metric> (last
    logged)`` (the one that ranks, and that the best line quotes) and ``<metric> (final)``, as ``sopt report``."""
    records = {}
    for t in trials:
        if t.status in NEVER_BEST:   # nothing to read (pending) or no result (failed)
            continue
        record = read_run(trial_dir(t))
        record.status = t.status      # the sweep's verdict (pruned) over the trial's own summary
        records[t.id] = record
    by_curve, split = ranks_by_curve(list(records.values()), metric)
    best = best_run(list(records.values()), metric, mode, by_curve)
    columns = metric_columns(metric, split)
    header = ["id", *axes, "status", *(c.name for c in columns)]

    def metric_cells(t: Trial) -> list[str]:
        record = records.get(t.id)
        final = (record.metrics if record is not None else t.metrics).get(metric)
        values = [(record.last_logged(metric) if record is not None else None) if c.kind == "last" else final
                  for c in columns]
        return [_cell(v, 6) for v in values]

    rows = [[t.id, *(_cell(t.params.get(a), 4) for a in axes), t.status, *metric_cells(t)] for t in trials]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in [header, *rows]]
    if best is not None:
        trial = next(t for t in trials if records.get(t.id) is best)
        label = f"{metric} {LAST_LOGGED}" if split else metric
        lines.append(f"best: {trial.id} ({label} {ranking_value(best, metric, by_curve):.6g}) "
                     f"{' '.join(trial.overrides)}")
    return "\n".join(lines)


def _resume_command(args: argparse.Namespace, config: pathlib.Path, sweep_path: pathlib.Path) -> str:
    words = ["sopt", "sweep", str(config), *args.tokens]
    for flag, value in (("--samples", args.samples), ("--seed", args.seed), ("--jobs", args.jobs),
                        ("--gpus", ",".join(args.gpus) if args.gpus else None),
                        ("--trials-per-gpu", args.trials_per_gpu), ("--metric", args.metric if args.metric != "loss"
                                                                    else None),
                        ("--mode", args.mode if args.mode != "min" else None), ("--prune", args.prune),
                        ("--min-steps", args.min_steps), ("--eta", args.eta if args.eta != 3 else None),
                        ("--backend", args.backend if args.backend != "local" else None),
                        ("--address", args.address), ("--gpu-per-trial", args.gpu_per_trial)):
        if value is not None:
            words += [flag, str(value)]
    if args.retry_failed:
        words.append("--retry-failed")
    return shlex.join([*words, "--out", str(sweep_path.resolve())])


# -- the command ---------------------------------------------------------------------------------------------------
def _check_trials(check_trial: TrialCheck, config: str, space: SearchSpace, trials: list[Trial]) -> list[int]:
    """Every trial's steps, checked by ``check_trial``; a config error is a _UsageError naming the first trial it
    hits (its overrides), so a typo in a key or an out-of-range value stops the sweep before anything runs."""
    steps = []
    checked: dict[tuple[str, ...], int] = {}
    for trial in trials:
        overrides = (*space.base_overrides, *trial.overrides)
        if overrides not in checked:
            try:
                checked[overrides] = check_trial(config, list(overrides))
            except ValueError as exc:
                lines = getattr(exc, "lines", None) or [str(exc)]
                raise _UsageError(f"{lines[0]} (in {trial.id}: {' '.join(trial.overrides)})") from None
        steps.append(checked[overrides])
    return steps


def _check_options(args: argparse.Namespace) -> None:
    if args.backend != "ray":
        for flag, value in (("--address", args.address), ("--gpu-per-trial", args.gpu_per_trial)):
            if value is not None:
                raise _UsageError(f"{flag} {value}: only for --backend ray (locally use --gpus and "
                                  f"--trials-per-gpu)")
    elif args.gpus is not None or args.trials_per_gpu is not None:
        raise _UsageError("--gpus/--trials-per-gpu: only for --backend local; with Ray each trial asks for "
                          "--gpu-per-trial GPUs and Ray places it")
    if args.backend == "ray":
        try:
            import ray.tune  # noqa: F401  (checked before the sweep directory is made)
        except ImportError as exc:
            raise _UsageError(f"--backend ray needs Ray Tune ({exc}); pip install 'sopt[ray]'") from None
    if args.trials_per_gpu is not None and args.gpus is None:
        raise _UsageError(f"--trials-per-gpu {args.trials_per_gpu}: needs --gpus")
    if args.eta < 2:
        raise _UsageError(f"--eta {args.eta}: must be at least 2")
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.\-]*", args.metric):
        raise _UsageError(f"--metric {args.metric!r}: not a metric name")


def sweep_main(argv: Sequence[str], trial_command: TrialCommand | None = None,
               check_trial: TrialCheck | None = check_sopt_trial, log: Callable[[str], None] | None = None) -> int:
    """``sopt sweep ARGV`` (the arguments after ``sweep``); returns the exit status (see the module docstring).

    ``trial_command(action, trial_dir, config, overrides) -> argv`` builds each trial's process (default
    :func:`sopt_trial_command`; tests give a stand-in that follows the run directory contract).
    ``check_trial(config, overrides) -> steps`` validates every trial's config before any runs (default
    :func:`check_sopt_trial`; None: no check, the steps read from the config file and overrides).
    ``log``: where the progress lines and the table go (default: stdout, flushed)."""
    log = log or (lambda line: print(line, flush=True))
    trial_command = trial_command or sopt_trial_command
    try:
        args = build_parser().parse_intermixed_args(list(argv))
    except SystemExit as exc:        # --help, or a usage error already printed as one line
        return int(exc.code or 0)
    try:
        _check_options(args)
        config = pathlib.Path(args.config).expanduser().resolve()
        text, data = _read_config(config)
        problem = _problem_name(config, data)
        space = parse_space(args.tokens, args.samples, args.seed)
        params = space.trials()
        width = max(3, len(str(len(params) - 1)))
        trials = [Trial(f"trial-{i:0{width}d}", f"trial-{i:0{width}d}", p, space.overrides(p))
                  for i, p in enumerate(params)]
        steps = _planned_steps(data, space)
        if check_trial is not None:
            steps = max(_check_trials(check_trial, str(config), space, trials))
        prune = "halving" if args.prune == "asha" else args.prune
        min_steps = args.min_steps
        if prune is not None and min_steps is None:
            if steps is None:
                raise _UsageError(f"--prune {args.prune}: CONFIG {config} sets no steps; give --min-steps N")
            min_steps = max(1, steps // args.eta ** 2)
        space_specs = {a.name: a.spec for a in space.axes}     # keyed like the trials' params
        digest = sweep_hash(text, list(space.base_overrides), space_specs, space.method, space.samples, space.seed)
        header = {"problem": problem, "config": str(config), "overrides": list(space.base_overrides),
                  "space": space_specs, "method": space.method, "samples": space.samples, "seed": space.seed,
                  "metric": args.metric, "mode": args.mode, "prune": prune, "backend": args.backend,
                  "hash": digest}
        if args.out is not None and not args.out.strip():
            raise _UsageError(f"--out {args.out!r}: give a folder name")
        path = pathlib.Path(args.out) if args.out else pathlib.Path("runs") / problem / f"sweep-{digest}"
        try:
            check_name(path, "--out")
            sweep = SweepDir.open(path, header, trials)
            sweep.lock()
        except (ValueError, OSError) as exc:
            raise _UsageError(str(exc)) from None
        try:
            sweep.save()           # a full disk or a read-only folder shows here, before any trial runs
        except OSError as exc:
            sweep.unlock()
            raise _UsageError(f"sweep directory {sweep.path}: cannot write {sweep.file.name} "
                              f"({exc.strerror or exc})") from None
    except (_UsageError, SpaceError) as exc:
        print(f"error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2

    try:
        counts = sweep.counts()
        log(f"sweep directory: {sweep.path}")
        log(f"{space.describe()}: " + ", ".join(f"{n} {s}" for s, n in counts.items()))
        pruner = make_pruner(prune, args.mode, min_steps, args.eta) if prune else None
        if args.backend == "ray":
            from sopt.experiments.ray_backend import RayBindError, run_with_ray
            try:
                interrupted = run_with_ray(sweep, trial_command, str(config), jobs=args.jobs, address=args.address,
                                           gpu_per_trial=args.gpu_per_trial or 0.0, prune=prune,
                                           min_steps=min_steps, eta=args.eta, metric=args.metric, mode=args.mode,
                                           retry_failed=args.retry_failed, log=log)
            except RayBindError as exc:      # before any trial was queued
                print(f"error: --backend ray: {exc}", file=sys.stderr)
                return 2
        else:
            jobs = args.jobs or (len(args.gpus) * (args.trials_per_gpu or 1) if args.gpus else 1)
            executor = LocalExecutor(sweep, trial_command, str(config), jobs, args.gpus, args.trials_per_gpu or 1,
                                     pruner, args.metric, args.mode, args.retry_failed, log)
            interrupted = executor.run()
        log(trial_table(sweep.trials, [a.name for a in space.axes], args.metric, args.mode, sweep.trial_dir))
        counts = sweep.counts()
        summary = ", ".join(f"{n} {s}" for s, n in counts.items())
        if interrupted:
            log(f"sweep interrupted ({summary}); resume with: {_resume_command(args, config, sweep.path)}")
        else:
            log(f"sweep done ({summary}): {sweep.path}; compare the runs with: sopt report {sweep.path}")
        return 0
    except OSError as exc:     # sweep.json or a log cannot be written (disk full): the trials were stopped
        print(f"error: sweep directory {sweep.path}: cannot write {exc.filename or 'its files'} "
              f"({exc.strerror or exc}); its running trials were stopped; resume with: "
              f"{_resume_command(args, config, sweep.path)}", file=sys.stderr)
        return 2
    finally:
        sweep.unlock()


if __name__ == "__main__":
    sys.exit(sweep_main(sys.argv[1:]))
