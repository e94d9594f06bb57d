"""``sopt warmup``: compile a problem's kernels into the disk cache ahead of its first run.

A first run on the software driver spends minutes compiling before its first step; ``sopt warmup PROBLEM
[overrides]`` (or ``--all``) pays that once, ahead of time: it builds the problem from its config, trains one step
with the problem's own callbacks (its evaluation) and runs its ``finish`` (final metrics, pictures) in a temporary
folder that is removed, so every kernel a run uses is compiled into the cache (``SOPT_CACHE_DIR``; the driver's
compile at a kernel's first run goes to the driver's own cache, Mesa's shader cache on the software driver). It
prints what it compiled and how long each took; a second warmup finds everything cached and says so.
"""

from __future__ import annotations

import dataclasses
import pathlib
import sys
import tempfile
import time
from typing import Any

from sopt.runtime import device


@dataclasses.dataclass
class Warmed:
    """What warming up one problem did: ``compiled`` (kernel label, seconds) of the compiles the disk cache had
    not seen, ``kernels`` the kernels it used that this process had not used before, ``seconds`` in all."""

    problem: str
    compiled: list[tuple[str, float]]
    kernels: int
    seconds: float

    def lines(self, cache: pathlib.Path) -> list[str]:
        """The report: what was compiled and in how long, or that the cache held everything."""
        if not self.compiled:
            return [f"{self.problem}: nothing to compile; the {self.kernels} kernel(s) it uses were already compiled "
                    f"(cache {cache}) ({self.seconds:.1f} s)"]
        # each kernel's time is its compile notice's: SlangPy's compile and the driver's at the first run
        return [f"{self.problem}: compiled {len(self.compiled)} kernel(s) into {cache} in {self.seconds:.1f} s "
                "(building the problem, one step and its finish; each kernel's compile time, the driver's "
                "included):",
                *(f"  {i}: {label}  {s:.1f} s" for i, (label, s) in enumerate(self.compiled, 1))]


def warm_up(cls: Any, config: Any) -> Warmed:
    """Build ``cls(config)`` and run one training step, its callbacks' first metrics step and its ``finish`` in a
    temporary folder (removed), compiling every kernel a run of that config uses; returns what was compiled."""
    from sopt.train import Trainer

    compiled_before, used_before = len(device.compiles()), device.kernels_used()
    began = time.perf_counter()
    problem = cls(config)
    parts = dict(problem.trainer_parts())
    # one step that is also the last: every callback (the problem's evaluation) runs its metrics step
    trainer = Trainer(**parts, log_every=1, progress=False)
    with tempfile.TemporaryDirectory(prefix="sopt-warmup-") as folder:
        result = trainer.fit(1)
        problem.finish(pathlib.Path(folder), result.history)
    device.synchronize()
    return Warmed(cls.name, device.compiles()[compiled_before:], device.kernels_used() - used_before,
                  time.perf_counter() - began)


def warmup_main(argv: list[str]) -> int:
    """``sopt warmup PROBLEM|CONFIG [overrides]`` or ``sopt warmup --all``; returns the exit status."""
    from sopt.config.schema import ConfigError
    from sopt.experiments.cli import CommandParser, _fail, _is_override, load_run_config, sopt_device_error
    from sopt.experiments.problem import problem_names

    parser = CommandParser(prog="sopt warmup", description="Compile a problem's kernels into the disk cache "
                           "(SOPT_CACHE_DIR) ahead of its first run: builds it from its config, trains one step and "
                           "runs its finish in a temporary folder that is removed.",
                           epilog="Example: sopt warmup neural_field_image; sopt warmup fit.toml steps=50; "
                                  "sopt warmup --all")
    parser.add_argument("words", nargs="*", metavar="PROBLEM|CONFIG|OVERRIDE",
                        help="a problem name or a .toml/.json config file, then overrides (as sopt run takes them)")
    parser.add_argument("--all", action="store_true", help="every problem sopt problems lists, with its defaults")
    args = parser.parse_args(argv)
    words = list(args.words)
    if args.all and words:
        parser.error(f"--all takes no problem, config or override (got {words[0]!r}): each problem warms up with "
                     "its defaults")
    if not args.all and (not words or _is_override(words[0])):
        parser.error("give a problem (sopt problems lists them) or a config file, then overrides; or --all")
    stray = [w for w in words[1:] if not _is_override(w)]
    if stray:
        parser.error(f"{stray[0]!r} is not an override (KEY=VALUE, +KEY=VALUE or ~KEY); the problem comes first")
    try:   # every config is read and checked before any GPU work
        if args.all:
            configs = [load_run_config(None, name, []) for name in problem_names()]
        else:
            first, overrides = words[0], words[1:]
            as_file = first.endswith((".toml", ".json"))   # a config file, as sopt run takes; else a problem's name
            configs = [load_run_config(first if as_file else None, None if as_file else first, overrides)]
    except ConfigError as exc:
        return _fail(exc)
    try:
        dev = device.get_device()
        cache = device.disk_cache()
        if cache is None:
            raise OSError(f"the shader cache folder {str(device.cache_dir())!r} is not writable, so nothing compiled "
                          "now would be kept; set SOPT_CACHE_DIR to a writable folder")
        print(f"device: {device.device_kind()} ({dev.info.adapter_name}); cache {cache}")
    except (OSError, sopt_device_error()) as exc:
        return _fail(exc)
    began = time.perf_counter()
    for cls, config in configs:
        try:
            warmed = warm_up(cls, config)
        except Exception as exc:   # noqa: BLE001 -- any failure of a problem (a bug, a full disk) is one line, status 2
            print(f"error: warming up {cls.name} failed: {' '.join(str(exc).split()) or type(exc).__name__}",
                  file=sys.stderr)
            return 2
        for line in warmed.lines(cache):
            print(line)
        sys.stdout.flush()   # one problem's report before the next one's compile notices
    if len(configs) > 1:
        print(f"warmed up {len(configs)} problems in {time.perf_counter() - began:.1f} s")
    return 0
