"""The ``sopt`` command: run, resume, sweep and compare experiments from config files.

::

    sopt problems                                  # the problems, one line each
    sopt config fit_projectile > fit.toml          # a complete default config, every key documented
    sopt run fit.toml optimizer.learning_rate=0.05 steps=200 [--out DIR]
    sopt run --problem fit_projectile steps=50     # the defaults, with overrides
    sopt run nf.toml --nproc 2                     # data-parallel on 2 GPUs (sopt.distributed; or under torchrun)
    sopt warmup fit_projectile                     # compile its kernels ahead of the first run (or --all)
    sopt resume runs/fit_projectile/20261123-101500-3fa2c1
    sopt sweep fit.toml optimizer.learning_rate=0.01,0.1 seed=range(0,2) --jobs 2
    sopt report runs/fit_projectile

Exit status: 0 when the command did its work (a run interrupted by SIGINT/SIGTERM too: it checkpointed and says
how to resume); 2, with one line ``error: ...`` on stderr and no traceback, for everything else:

- a usage, config, override or folder error (a read-only folder, a run another process holds, a checkpoint that
  does not load, a ``config.toml`` edited or an input file changed since the run started, a ``--nproc`` this
  machine or problem cannot take), found before any GPU work or file is written;
- a run that failed (diverged, a full disk, any exception): ``error: the run failed at step N: REASON``, and the
  run directory records it (summary.json status ``failed`` with the reason, error.txt the traceback).

(A sweep tells a failed trial by its summary.json and a non-zero status; it needs no separate code.)
"""

from __future__ import annotations

import argparse
import os
import pathlib
import shlex
import sys
from typing import Any, NoReturn

DEFAULT_ROOT = "runs"


class CommandParser(argparse.ArgumentParser):
    """argparse whose usage errors are one ``error: ...`` line with exit status 2, like config errors."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"error: {message} (see {self.prog} --help)\n")


def _fail(exc: BaseException) -> int:
    # sopt.config.schema (pydantic, numpy: slow to import) is imported only by commands that need it, so
    # `sopt --version` and `sopt --help` answer without it; a ConfigError exists only once it was imported
    schema = sys.modules.get("sopt.config.schema")
    is_config_error = schema is not None and isinstance(exc, schema.ConfigError)
    lines = exc.lines if is_config_error else [" ".join(str(exc).split())]
    for line in lines:
        print(f"error: {line}", file=sys.stderr)
    return 2


def _is_override(word: str) -> bool:
    return "=" in word or word.startswith(("~", "+"))


def load_run_config(config_path: str | None, problem_name: str | None, overrides: list[str]) -> Any:
    """The validated config of a run: the defaults of its problem (named by the file's ``problem`` key or
    ``problem_name``), the file merged over them, then the overrides. ConfigError (one line each)."""
    from sopt.config.files import read_config
    from sopt.config.overrides import apply_override, parse_override
    from sopt.config.schema import ConfigError, complete, defaults, merge, validate
    from sopt.experiments.problem import problem_class

    parsed = [parse_override(o) for o in overrides]   # grammar errors first, before the file is read
    data: dict[str, Any] = read_config(config_path) if config_path is not None else {}
    name = data.get("problem", problem_name)
    if config_path is not None and "problem" not in data and problem_name is None:
        raise ConfigError([f"config file {config_path!r} has no top-level 'problem' key (e.g. problem = "
                           "\"fit_projectile\"); add it or pass --problem NAME"])
    if problem_name is not None and "problem" in data and data["problem"] != problem_name:
        raise ConfigError([f"--problem {problem_name!r} but config file {config_path!r} says problem = "
                           f"{data['problem']!r}"])
    # an override may name the problem (problem=fit_cloth) when nothing else does, but not remove it, nor
    # contradict --problem, the file's problem key or an earlier override
    named = (f"--problem {problem_name!r}" if problem_name is not None
             else f"config file {config_path!r}, which says problem = {data['problem']!r}" if "problem" in data
             else None)
    for o in parsed:
        if o.key == ("problem",):
            if o.op != "set":
                raise ConfigError([f"override {o.text!r}: the problem key can only be set (problem=NAME)"])
            if named is not None and o.value != name:
                raise ConfigError([f"override {o.shown} conflicts with {named}: name the problem once (drop the "
                                   "override, or change the other)"])
            name, named = o.value, f"override {o.shown}"
    cls = problem_class(name)
    default = defaults(cls.schema)   # built and checked once (complete would make it again each time)
    data = complete(cls.schema, merge(default, {**data, "problem": name}), default)
    for o in parsed:   # each on a complete config: after optimizer.otype=SGD, optimizer.momentum=0.9 finds its key
        data = complete(cls.schema, apply_override(data, o), default)
    return cls, validate(cls.schema, data)


def _print_outcome(outcome: Any, nproc: int = 1) -> int:
    if outcome.status == "interrupted":
        print(f"interrupted after step {outcome.steps}; checkpoint written. Continue with:\n"
              f"  sopt resume {shlex.quote(str(outcome.run_dir))}" + (f" --nproc {nproc}" if nproc > 1 else ""))
        return 0
    if outcome.status == "failed":
        print(f"error: the run failed at step {outcome.steps}: {outcome.error} (recorded in {outcome.run_dir})",
              file=sys.stderr)
        return 2
    for line in outcome.lines:
        print(line)
    shown = ", ".join(f"{k} {v:.6g}" for k, v in outcome.metrics.items() if k not in ("step", "steps_per_s", "time_s"))
    from sopt.train.progress import process_seconds   # "here": this command, from its process's start
    print(f"finished {outcome.steps} steps ({process_seconds():.1f} s here): {shown}")
    return 0


def cmd_run(argv: list[str]) -> int:
    parser = CommandParser(prog="sopt run", description="Run a problem from a config file (TOML or JSON) with overrides.",
                     epilog="Overrides (Hydra grammar): a.b=VALUE changes a key, +a.b=VALUE adds one, ~a.b removes "
                            "one (its default applies); VALUE is a TOML literal (0.1, true, \"text\", [1, 2]) or "
                            "a bare word (SGD). Example: sopt run fit.toml optimizer.learning_rate=0.05 steps=200")
    parser.add_argument("words", nargs="*", metavar="CONFIG|OVERRIDE",
                        help="a .toml/.json config file (first, unless --problem), then overrides")
    parser.add_argument("--problem", metavar="NAME", help="run NAME's default config (sopt problems lists them)")
    parser.add_argument("--out", metavar="DIR", help="new or empty run folder (default: runs/<problem>/<date>-<time>-<hash>)")
    parser.add_argument("--root", metavar="DIR", default=DEFAULT_ROOT, help="where new run folders go "
                        "(default: %(default)s)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--nproc", type=int, default=1, metavar="N", help="data-parallel: N processes, one per GPU, "
                        "each taking batch_size / N of every batch (default 1; torchrun's variables also work)")
    args = parser.parse_args(argv)
    words = list(args.words)
    config_path = None
    if words and not _is_override(words[0]):
        config_path = words.pop(0)
    elif args.problem is None:
        parser.error("give a config file (sopt config PROBLEM writes one) or --problem NAME")
    stray = [w for w in words if not _is_override(w)]
    if stray:
        parser.error(f"{stray[0]!r} is not an override (KEY=VALUE, +KEY=VALUE or ~KEY); the config file comes first")
    from sopt.experiments import run_dir as rd

    try:
        rank = _rank_environment(args.nproc)
        cls, config = load_run_config(config_path, args.problem, words)
        if args.out is not None:   # checked before the problem is built (minutes of data making for nothing)
            rd.check_out_dir(args.out)
        else:
            rd.check_root_dir(args.root)
        nproc = rank.world_size if rank is not None else args.nproc
        if nproc > 1:
            from sopt.distributed.splittable import check_splittable
            check_splittable(cls, config, nproc, on_this_host=args.nproc > 1)
        if args.nproc > 1:   # this process launches the ranks, each of which runs this command without --nproc
            from sopt.distributed.launcher import launch
            child = ["run", *args.words, *(["--problem", args.problem] if args.problem else []),
                     *(["--out", args.out] if args.out else []), "--root", args.root,
                     *(["--no-progress"] if args.no_progress else [])]
            return launch(args.nproc, [sys.executable, "-m", "sopt", *child])
        dp = _start_data_parallel(rank, config)
        import sopt
        device = sopt.get_device()
        # No background prefetch of the declared kernels' modules (tried, and removed in issue 38): SlangPy holds the
        # GIL while it loads a module, opens the device or builds a call site (benchmarks/slangpy_gil.py), so a
        # loading thread only takes turns with this one, and "declared" is every kernel of every module imported
        # (the MLPs', every optimiser's and simulator's), most of which this problem never runs: the first step
        # came later with it.
        problem = cls(config)
        from sopt.config.files import dumps_toml

        def make_out() -> pathlib.Path:
            return (rd.claim_out_dir(args.out) if args.out is not None
                    else rd.new_run_dir(args.root, cls.name, dumps_toml(config.model_dump(mode="json"))))
        out = make_out() if dp is None else pathlib.Path(dp.from_main(make_out))   # rank 0 makes it
        if dp is not None and not dp.is_main:
            return _train_replica(problem, dp, None)
        print(f"device: {sopt.device_kind()} ({device.info.adapter_name})")
        print(f"run directory: {out}")
        from sopt.experiments import runner
        # a failure once training began is an outcome; what raises here (another process took the folder) did not
        # start the run
        outcome = runner.start(problem, out, words, progress=not args.no_progress, device=device, data_parallel=dp)
        if dp is not None and outcome.status != "failed":
            dp.close()
    except (ValueError, OSError, sopt_device_error()) as exc:
        return _fail(exc)
    return _print_outcome(outcome, nproc)


def _rank_environment(nproc: int) -> Any:
    """This process's place in a data-parallel run (torchrun's or ``--nproc``'s variables), or None; ValueError
    for a bad ``--nproc`` or one given to a process that already is a rank."""
    from sopt.distributed.environment import rank_environment
    if not 1 <= nproc <= 4096:
        raise ValueError(f"--nproc {nproc} is out of range: allowed 1 to 4096 (processes, one per GPU)")
    rank = rank_environment()
    if rank is not None and nproc > 1:
        raise ValueError(f"--nproc {nproc} in a process that already is rank {rank.rank} of {rank.world_size} "
                         "(torchrun set WORLD_SIZE): leave --nproc out under torchrun")
    return rank


def _start_data_parallel(rank: Any, config: Any) -> Any:
    """Join the run's process group (rank None: a run of its own, None)."""
    if rank is None:
        return None
    from sopt.distributed.data_parallel import start
    return start(rank, deterministic=bool(getattr(config, "deterministic", False)))


def _train_replica(problem: Any, dp: Any, checkpoint: pathlib.Path | None) -> int:
    """A rank other than 0 trains in step with rank 0 and writes nothing; a failure is one ``error:`` line."""
    from sopt.distributed.replica import train_replica
    try:
        train_replica(problem, dp, checkpoint)
    except Exception as exc:   # noqa: BLE001 -- the launcher reports this rank's one line; rank 0's run records it
        print(f"error: {type(exc).__name__}: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    dp.close()
    return 0


def sopt_device_error() -> type[BaseException]:
    from sopt.runtime.device import DeviceUnavailableError
    return DeviceUnavailableError


def cmd_resume(argv: list[str]) -> int:
    parser = CommandParser(prog="sopt resume", description="Continue an interrupted (or killed) run to its end; a "
                           "run that already finished is left as it is (one line saying so, exit status 0).")
    parser.add_argument("run_dir", metavar="RUN_DIR")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--accept-config-change", action="store_true",
                        help="resume although config.toml was edited since the run started (refused otherwise); "
                             "the change is recorded in overrides.txt and metrics.jsonl")
    parser.add_argument("--accept-input-change", action="store_true",
                        help="resume although an input file the run reads (a mesh, images) changed since it "
                             "started (refused otherwise); the change is recorded in overrides.txt and metrics.jsonl")
    parser.add_argument("--nproc", type=int, default=1, metavar="N", help="data-parallel: N processes, one per GPU "
                        "(any N the batch splits over; default 1)")
    args = parser.parse_args(argv)
    from sopt.experiments import run_dir as rd
    from sopt.experiments import runner
    from sopt.config.files import read_config
    from sopt.config.schema import validate
    from sopt.experiments.problem import problem_class
    out = pathlib.Path(args.run_dir)
    try:
        rank = _rank_environment(args.nproc)
        rd.check_name(args.run_dir, "sopt resume")
        if not out.is_dir():
            raise rd.RunDirError(f"{args.run_dir!r} is not a folder; give a run directory (it holds config.toml)")
        if rank is None or rank.is_main:   # (rank 0 has the run's lock, and its summary says running, by now)
            summary = rd.read_summary(out) if (out / rd.CONFIG_FILE).is_file() else {}
            if summary.get("status") == "finished":   # as a finished fit resumed from its last checkpoint: a no-op
                print(f"the run in {str(out)!r} has already finished ({summary.get('steps')} steps); nothing to "
                      "resume")
                return 0
            runner.check_resumable(out)
        data = read_config(out / rd.CONFIG_FILE)
        cls = problem_class(data.get("problem"), f"problem (in {str(out / rd.CONFIG_FILE)!r})")
        config = validate(cls.schema, data)
        if rank is None or rank.is_main:
            runner.check_config_unchanged(out, config, args.accept_config_change)
            runner.check_inputs_unchanged(out, args.accept_input_change)
        nproc = rank.world_size if rank is not None else args.nproc
        if nproc > 1:
            from sopt.distributed.splittable import check_splittable
            check_splittable(cls, config, nproc, on_this_host=args.nproc > 1)
        if args.nproc > 1:
            from sopt.distributed.launcher import launch
            child = ["resume", args.run_dir, *(["--no-progress"] if args.no_progress else []),
                     *(["--accept-config-change"] if args.accept_config_change else []),
                     *(["--accept-input-change"] if args.accept_input_change else [])]
            return launch(args.nproc, [sys.executable, "-m", "sopt", *child])
        dp = _start_data_parallel(rank, config)
        if dp is not None and not dp.is_main:
            import sopt
            sopt.get_device()
            return _train_replica(cls(config), dp, out / rd.CHECKPOINT_FILE)
        with rd.RunLock(out):   # before any GPU work: a second resume of the run stops here
            import sopt
            device = sopt.get_device()
            problem = cls(config)
            print(f"device: {sopt.device_kind()} ({device.info.adapter_name})")
            print(f"run directory: {out} (resuming)")
            # what raises here (a checkpoint that does not load) changed nothing; a failure once training began
            # is an outcome
            outcome = runner.resume(problem, out, progress=not args.no_progress,
                                    accept_config_change=args.accept_config_change,
                                    accept_input_change=args.accept_input_change, data_parallel=dp)
        if dp is not None and outcome.status != "failed":
            dp.close()
    except (ValueError, OSError, sopt_device_error()) as exc:
        return _fail(exc)
    return _print_outcome(outcome, nproc)


def cmd_problems(argv: list[str]) -> int:
    CommandParser(prog="sopt problems", description="List the problems sopt run knows: the built-in ones and those "
                  "installed packages register (entry point group problems).").parse_args(argv)
    from sopt.config.schema import ConfigError
    from sopt.experiments.problem import problem_class, problem_names
    names = problem_names()
    width = max(len(n) for n in names)
    for name in names:   # each description is its class's: this imports every problem (only this command does)
        try:
            line = problem_class(name).description
        except ConfigError as exc:   # an installed package's problem that does not load: listed, with why
            line = f"(does not load: {exc.lines[0]})"
        print(f"{name:<{width}}  {line}")
    return 0


def cmd_config(argv: list[str]) -> int:
    parser = CommandParser(prog="sopt config", description="Print PROBLEM's complete config (TOML), every key "
                     "documented: its defaults, with the overrides applied as sopt run applies them; sopt run "
                     "accepts the text as it is.",
                     epilog="Example: sopt config neural_field_image encoding.otype=HashGrid (documents the "
                            "HashGrid encoding's keys). Overrides: a.b=VALUE, +a.b=VALUE, ~a.b (sopt run --help).")
    parser.add_argument("problem", metavar="PROBLEM")
    parser.add_argument("overrides", nargs="*", metavar="OVERRIDE", help="KEY=VALUE, +KEY=VALUE or ~KEY")
    parser.add_argument("--json", action="store_true", help="plain JSON instead of documented TOML")
    args = parser.parse_intermixed_args(argv)
    stray = [w for w in args.overrides if not _is_override(w)]
    if stray:
        parser.error(f"{stray[0]!r} is not an override (KEY=VALUE, +KEY=VALUE or ~KEY)")
    from sopt.config.overrides import parse_override
    from sopt.config.schema import ConfigError
    from sopt.experiments.problem import problem_class
    try:
        parsed = [parse_override(o) for o in args.overrides]   # grammar errors first, as in sopt run
        for o in parsed:
            if o.key == ("problem",):
                raise ConfigError([f"override {o.shown}: sopt config names the problem once, as PROBLEM "
                                   "(drop the override)"])
        cls = problem_class(args.problem, "PROBLEM")
        # a module:Class problem's config names it so
        config = load_run_config(None, args.problem, args.overrides)[1] if args.overrides else cls.schema(
            problem=args.problem)
    except ConfigError as exc:
        return _fail(exc)
    if args.json:
        import json
        print(json.dumps(config.model_dump(mode="json"), indent=2))
    else:
        from sopt.config.document import document
        made = f" with {shlex.join(args.overrides)}" if args.overrides else ""
        header = (f"{args.problem}: {cls.description}\nThe defaults{made}. Run with: sopt run THIS_FILE "
                  "[key=value ...]\nEach key: its meaning [type; bounds]. Unset keys are commented out.")
        print(document(config, header), end="")
    return 0


def _delegate(module: str, function: str) -> Any:
    import importlib
    return getattr(importlib.import_module(module), function)


COMMANDS = {
    "run": (cmd_run, "run a problem from a config with overrides"),
    "resume": (cmd_resume, "continue an interrupted run"),
    "sweep": (lambda argv: _delegate("sopt.experiments.sweep", "sweep_main")(argv),
              "grid or random search over config keys, locally or on Ray"),
    "report": (lambda argv: _delegate("sopt.experiments.report", "report_main")(argv),
               "compare runs and sweeps: table and plots"),
    "warmup": (lambda argv: _delegate("sopt.experiments.warmup", "warmup_main")(argv),
               "compile a problem's kernels into the disk cache ahead of its first run"),
    "problems": (cmd_problems, "list the problems"),
    "config": (cmd_config, "print a problem's default config, documented"),
}


LIGHT_COMMANDS = ("run", "resume", "warmup", "config", "problems")   # those that never need torch


def main(argv: list[str] | None = None) -> int:
    """The ``sopt`` console script; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: sopt COMMAND [ARGS]  (sopt COMMAND --help for more)\n\ncommands:")
        for name, (_, line) in COMMANDS.items():
            print(f"  {name:<9} {line}")
        return 0 if argv else 2
    if argv[0] in ("-V", "--version"):
        import importlib.metadata
        try:
            print(f"sopt {importlib.metadata.version('sopt')}")
        except importlib.metadata.PackageNotFoundError:
            print("sopt (not installed)")
        return 0
    command = COMMANDS.get(argv[0])
    if command is None:
        import difflib
        near = difflib.get_close_matches(argv[0], list(COMMANDS), n=1)
        hint = f"; did you mean {near[0]!r}?" if near else ""
        print(f"error: unknown command {argv[0]!r}{hint} allowed: {', '.join(COMMANDS)}", file=sys.stderr)
        return 2
    os.environ.setdefault("MPLBACKEND", "Agg")   # pictures are files; no display needed
    data_parallel = "WORLD_SIZE" in os.environ or any(a.startswith("--nproc") for a in argv)
    if argv[0] in LIGHT_COMMANDS and "torch" not in sys.modules and not data_parallel:
        # slangpy's extension imports torch when it is installed (slow on a cold start) only to offer its torch
        # bridge, which no problem uses: marking torch unavailable keeps `sopt run` within a second of its first step
        sys.modules["torch"] = None  # type: ignore[assignment]
    return int(command[0](argv[1:]) or 0)


def problem_module_main(package: str) -> NoReturn:
    """``python -m problems.NAME [CONFIG] [overrides...] [--out DIR]``: exactly ``sopt run --problem NAME ...``
    (NAME: the last part of ``package``, the problem's package; every problem's ``__main__`` calls this)."""
    sys.exit(main(["run", "--problem", package.rpartition(".")[2], *sys.argv[1:]]))


def entry_point() -> None:
    """The console script: ``main`` with a reader that stopped reading (``sopt config X | head``) ending quietly,
    and a Ctrl-C outside training (while a problem is built, a sweep checks its trials, or a second one during a
    step) one line with the shell's status 130 rather than a traceback; every file sopt writes is whole (atomic)."""
    try:
        code = main()
        sys.stdout.flush()
    except KeyboardInterrupt:
        print("error: interrupted (Ctrl-C); files already written are whole, nothing half-written is left",
              file=sys.stderr)
        code = 130
    except BrokenPipeError:
        # Python's documented recipe: point stdout at devnull so the interpreter's final flush does not fail again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = 1
    sys.exit(code)
