"""Where a physics.py sopt iteration spends its time, for any checkout of sopt: host, GPU span, each dispatch.

physics.py times an iteration of a cloth case (A: 32 x 32, B: 128 x 128, 1000 steps) from its host start to the
device's synchronisation. This splits that into

* host µs of recording (``with tape:`` + rollout + loss + ``tape.backward``) and of ``tape.submit()``;
* dispatches (``sopt.runtime.device.dispatch_count()``) and submissions per iteration;
* GPU µs between timestamps written into the iteration's command buffer: the whole buffer (first command to
  last) and each compute dispatch (order, declared kernel or Slang function where the tree has sopt.runtime.kernel, and thread
  count; benchmarks/gpu_timestamps.py), the rest being clears, copies and gaps;

and prints whether sopt's CUDA device shares torch's CUDA context (SlangPy imports torch when installed, and a
device made after that shares its context since cf7db66); ``--no-torch`` hides torch so that it cannot.

Each tree is run in its own process (its ``sopt`` and ``benchmarks/physics.py`` come first on sys.path)::

    SOPT_DEVICE=cuda python3 benchmarks/physics_split.py --tree .          # this checkout
    SOPT_DEVICE=cuda python3 benchmarks/physics_split.py --tree .old       # another checkout, same harness
    SOPT_DEVICE=cuda python3 benchmarks/physics_split.py --tree . --no-torch
    python3 benchmarks/physics_split.py --small                            # lavapipe smoke test

``--dump DIR`` compiles the kernels into a fresh cache with Slang's intermediates (the CUDA source of each
kernel) written to DIR, for diffing two trees' generated code.
"""

from __future__ import annotations

import argparse
import importlib
import os
import pathlib
import statistics
import sys
import tempfile
import time
from typing import Any

from gpu_timestamps import DispatchStamps   # beside this script


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tree", default=str(pathlib.Path(__file__).resolve().parents[1]),
                    help="root of the sopt checkout to time (default: this one)")
    ap.add_argument("--cases", default="A,B", help="comma-separated cloth cases: A, B")
    ap.add_argument("--repeats", type=int, default=30, help="timed iterations per measurement")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--small", action="store_true", help="physics.py's small sizes (lavapipe)")
    ap.add_argument("--no-torch", action="store_true", help="hide torch (SlangPy and sopt then never import it)")
    ap.add_argument("--dump", default=None, help="folder for Slang's intermediates (fresh shader cache)")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    tree = pathlib.Path(args.tree).resolve()
    if args.no_torch:
        sys.modules["torch"] = None   # type: ignore[assignment]   # 'import torch' raises ImportError
    sys.path[:0] = [str(tree), str(tree / "benchmarks")]
    if args.dump:
        os.environ["SOPT_CACHE_DIR"] = tempfile.mkdtemp(prefix="sopt-split-cache-")
    import slangpy as spy

    if args.dump:
        dump = pathlib.Path(args.dump).resolve()
        dump.mkdir(parents=True, exist_ok=True)
        base_device = spy.Device

        class DumpingDevice(base_device):   # type: ignore[misc, valid-type]
            def __init__(self, **kwargs: Any) -> None:
                options = dict(kwargs.pop("compiler_options", None) or {})
                options.update(dump_intermediates=True, dump_intermediates_prefix=str(dump) + "/")
                super().__init__(compiler_options=options, **kwargs)

        spy.Device = DumpingDevice
    import physics as ph   # the tree's harness (sys.path above)
    from sopt.runtime import device as dev
    from sopt.autodiff import tape as tp

    if not pathlib.Path(dev.__file__).resolve().is_relative_to(tree):
        raise SystemExit(f"imported sopt from {dev.__file__}, not from {tree}")
    device = dev.get_device()
    shares = getattr(dev, "_torch_index", None)
    print(f"tree {tree}: {device.info.adapter_name} [{dev.device_kind()}]; torch "
          f"{'hidden' if args.no_torch else ('imported' if 'torch' in sys.modules else 'not imported')}; "
          f"device shares torch's CUDA context: {shares is not None}")
    sizes = {"A": (5, 4, 40), "B": (8, 6, 40)} if args.small else {"A": (32, 32, 1000), "B": (128, 128, 1000)}
    for key in [c.strip() for c in args.cases.split(",") if c.strip()]:
        nx, ny, steps = sizes[key]
        run = ph.sopt_run(ph.cloth_problem(nx, ny, steps, 0), None)
        measure(key, run, args, spy, dev, tp)
        run.close()
    return 0


def measure(key: str, run: Any, args: argparse.Namespace, spy: Any, dev: Any, tp: Any) -> None:
    """Print case ``key``'s per-iteration host, total and GPU times of ``run`` (a physics.SoptRun)."""
    submits = [0]
    real_submit = dev.submit

    def counting_submit(encoder: Any) -> None:
        submits[0] += 1
        real_submit(encoder)

    dev.submit = counting_submit

    def iteration() -> tuple[float, float]:
        tape = run.tape
        began = time.perf_counter()
        with tape:
            for p in run.params.values():
                tp.clear(tape.encoder, p.grad)
            final = ph_rollout(run)
            run._loss = run.mse(final[run.observe], run.target)
        tape.backward(run._loss)
        recorded = time.perf_counter()
        tape.submit()
        return recorded - began, time.perf_counter() - recorded

    for _ in range(args.warmup):
        iteration()
        dev.synchronize()
    dispatches, submitted = dev.dispatch_count(), submits[0]
    record, submit, total = [], [], []
    for _ in range(args.repeats):
        began = time.perf_counter()
        r, s = iteration()
        dev.synchronize()
        total.append(time.perf_counter() - began)
        record.append(r)
        submit.append(s)
    per = args.repeats
    print(f"case {key}: {1e3 * statistics.median(total):.3f} ms per iteration (median of {per}); host record "
          f"{1e6 * statistics.median(record):.1f} us + submit {1e6 * statistics.median(submit):.1f} us; "
          f"{(dev.dispatch_count() - dispatches) / per:g} dispatches, {(submits[0] - submitted) / per:g} submits "
          f"per iteration; loss {run.loss():.9g}")

    # GPU timestamps: after the tape opens its encoder, around each compute dispatch, before the submission
    try:
        kn = importlib.import_module("sopt.runtime.kernel")
    except ImportError:   # a checkout from before the kernel layer
        kn = None
    try:
        spans = DispatchStamps(spy, dev, tp, kn).collect(iteration, max(3, args.repeats // 3))
    except Exception as exc:   # a backend without timestamp queries: the times above still stand
        print(f"  GPU timestamps unavailable: {type(exc).__name__}: {exc}")
        return
    finally:
        dev.submit = real_submit
    for name, values in spans.items():
        print(f"  GPU {name}: {1e6 * statistics.median(values):.1f} us (median of {len(values)})")


def ph_rollout(run: Any) -> Any:
    """physics.SoptRun.iteration's rollout (the tree's sopt.sim.rollout)."""
    from sopt.sim import rollout
    return rollout(run.sim, run.sim.initial_state(), run.steps, budget_bytes=run.budget_bytes).state


if __name__ == "__main__":
    sys.exit(main())
