"""Where one neural-field training step spends its GPU time: each dispatch of ``Trainer.train_step``, timed.

``benchmarks/neural_field.py`` times whole steps; this writes GPU timestamps into the step's command buffer (after
the tape opens its encoder, around every dispatch, before the submission) and prints, for issue 21's networks
(``neural_field.sopt_field_network``: hash grid or frequency encoding into FullyFusedMLP 64 x 2 hidden ReLU -> 3),
the whole buffer's span, each dispatch's (labelled by its Slang function or kernel, in recording order) and the
rest (clears, copies, gaps between dispatches), medians over the timed steps, with the host time of a step::

    SOPT_DEVICE=cuda python3 benchmarks/train_step_split.py --network hashgrid --dims 2 --batch 18
    python3 benchmarks/train_step_split.py --network hashgrid --dims 2 --batch 10 --steps 3   # lavapipe smoke test

Where the backend has no timestamp queries the step times still print.
"""

from __future__ import annotations

import argparse
import gc
import pathlib
import statistics
import sys
import time
import warnings
from typing import Any

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import numpy as np   # noqa: E402
import slangpy as spy   # noqa: E402

from benchmarks import neural_field as nf   # noqa: E402
from sopt import device as dev   # noqa: E402
from sopt import kernel as kn   # noqa: E402
from sopt import tape as tp   # noqa: E402
from sopt.losses import MSELoss   # noqa: E402
from sopt.optim import Adam   # noqa: E402
from sopt.train import BatchSampler, Trainer   # noqa: E402

MAX_MARKS = 256


class Stamps:
    """Timestamps written into the command buffers sopt records, labelled, while :meth:`patched` is active."""

    def __init__(self) -> None:
        self.pool = dev.get_device().create_query_pool(type=spy.QueryType.timestamp, count=MAX_MARKS)
        self.marks: list[str] = []

    def stamp(self, encoder: Any, label: str) -> None:
        if encoder is not None and len(self.marks) < MAX_MARKS:
            encoder.write_timestamp(self.pool, len(self.marks))
            self.marks.append(label)

    def around(self, encoder: Any, label: str, record: Any) -> None:
        n = sum(1 for m in self.marks if m.startswith("begin ")) + 1
        name = f"{n:2d} {label}"
        self.stamp(encoder, "begin " + name)
        record()
        self.stamp(encoder, "end " + name)

    def patched(self) -> "Stamps":
        real_run, real_dispatch = kn._run, dev.BoundKernel.dispatch
        real_enter, real_submit = tp.Tape.__enter__, dev.submit
        # compute kernel -> its declaration's label (sopt.kernel keeps each loaded kernel under the Kernel's key)
        with warnings.catch_warnings():   # isinstance on every live object wakes deprecated torch aliases
            warnings.simplefilter("ignore")
            declared = {k._key(): k.label for k in gc.get_objects() if isinstance(k, kn.Kernel)}
        labels = {id(kernel): declared.get(key[1:], key[2]) for key, kernel in kn._programs.items()}

        def run(node: Any, encoder: Any, args: tuple, kwargs: dict) -> None:
            self.around(encoder, str(getattr(node, "name", "function")),
                        lambda: real_run(node, encoder, args, kwargs))

        def dispatch(bound: Any, threads: int, encoder: Any = None) -> None:
            self.around(encoder, f"{labels.get(id(bound.kernel), 'kernel')} ({threads} threads)",
                        lambda: real_dispatch(bound, threads, encoder))

        def enter(tape: Any) -> Any:
            out = real_enter(tape)
            self.stamp(tape.encoder, "start")
            return out

        def submit(encoder: Any) -> None:
            self.stamp(encoder, "submit")
            real_submit(encoder)

        self._restore = lambda: (setattr(kn, "_run", real_run), setattr(dev.BoundKernel, "dispatch", real_dispatch),
                                 setattr(tp.Tape, "__enter__", real_enter), setattr(dev, "submit", real_submit))
        kn._run, dev.BoundKernel.dispatch, tp.Tape.__enter__, dev.submit = run, dispatch, enter, submit
        return self

    def restore(self) -> None:
        self._restore()

    def spans(self) -> dict[str, float]:
        """Seconds per span of the last step: the buffer, each dispatch, and the rest."""
        at = dict(zip(self.marks, self.pool.get_timestamp_results(0, len(self.marks))))
        out = {"command buffer (start to submit)": at["submit"] - at["start"]}
        inside = 0.0
        for label, begin in at.items():
            if label.startswith("begin "):
                name = label[len("begin "):]
                out[name] = at["end " + name] - begin
                inside += out[name]
        out["outside dispatches (clears, copies, gaps)"] = out["command buffer (start to submit)"] - inside
        return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--network", default="hashgrid", choices=nf.ISSUE21_NETWORKS)
    ap.add_argument("--dims", type=int, default=2, choices=(2, 3))
    ap.add_argument("--batch", type=int, default=18, help="log2 of the batch size")
    ap.add_argument("--steps", type=int, default=20, help="timed steps (each its own timestamps)")
    ap.add_argument("--warmup", type=int, default=10)
    args = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    coords = rng.random((1 << 16, args.dims), dtype=np.float32)
    targets = rng.random((1 << 16, 3), dtype=np.float32)
    field = nf.sopt_field_network(args.network, args.dims)
    trainer = Trainer(field.model, MSELoss(), Adam(field.model.parameters(), lr=1e-2),
                      BatchSampler(coords, targets, batch_size=1 << args.batch, seed=0), progress=False,
                      log_every=10**9)
    for _ in range(args.warmup):
        trainer.train_step()
    dev.synchronize()
    host, total = [], []
    for _ in range(args.steps):
        began = time.perf_counter()
        trainer.train_step()
        host.append(time.perf_counter() - began)
        dev.synchronize()
        total.append(time.perf_counter() - began)
    print(f"{dev.get_device().info.adapter_name} [{dev.device_kind()}]: {args.network} {args.dims}D, batch "
          f"2^{args.batch}: {1e3 * statistics.median(total):.3f} ms per step with a wait (median of {args.steps}), "
          f"host {1e3 * statistics.median(host):.3f} ms")
    stamps = Stamps()
    spans: dict[str, list[float]] = {}
    stamps.patched()
    try:
        for _ in range(args.steps):
            stamps.marks.clear()
            stamps.pool.reset()
            trainer.train_step()
            dev.synchronize()
            for name, value in stamps.spans().items():
                spans.setdefault(name, []).append(value)
    except Exception as exc:   # a backend without timestamp queries: the step times above stand
        print(f"  GPU timestamps unavailable: {type(exc).__name__}: {exc}")
        return 0
    finally:
        stamps.restore()
    for name, values in spans.items():
        short = name if len(name) <= 90 else name[:60] + "..." + name[-27:]
        print(f"  GPU {1e6 * statistics.median(values):8.1f} us  {short}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
