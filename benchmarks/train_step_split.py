"""Where one neural-field training step spends its GPU time: each dispatch of ``Trainer.train_step``, timed.

``benchmarks/neural_field.py`` times whole steps; this writes GPU timestamps into the step's command buffer (after
the tape opens its encoder, around every dispatch, before the submission) and prints, for issue 21's networks
(``neural_field.sopt_field_network``: hash grid or frequency encoding into FullyFusedMLP 64 x 2 hidden ReLU -> 3),
the whole buffer's span, each dispatch's (labelled by its Slang function or kernel, in recording order) and the
rest (clears, copies, gaps between dispatches), medians over the timed steps, with the host time of a step::

    SOPT_DEVICE=cuda python3 benchmarks/train_step_split.py --network hashgrid --dims 2 --batch 18
    python3 benchmarks/train_step_split.py --network hashgrid --dims 2 --batch 10 --steps 3   # lavapipe smoke test
    SOPT_DEVICE=cuda python3 benchmarks/train_step_split.py --network hashgrid --batch 18 --deterministic
    SOPT_DEVICE=cuda python3 benchmarks/train_step_split.py --network hashgrid --batch 18 --mlp both

``--mlp fp16`` builds the network's MLP as TensorCoreMLP (half-precision tensor-core products, CUDA only) instead
of FullyFusedMLP (``fp32``, the default); ``both`` splits the two networks' steps one after the other.

Where the backend has no timestamp queries the step times still print.
"""

from __future__ import annotations

import argparse
import pathlib
import statistics
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import numpy as np   # noqa: E402
import slangpy as spy   # noqa: E402

from benchmarks import neural_field as nf   # noqa: E402
from benchmarks.gpu_timestamps import DispatchStamps   # noqa: E402
from sopt.runtime import device as dev   # noqa: E402
from sopt.runtime import kernel as kn   # noqa: E402
from sopt.autodiff import tape as tp   # noqa: E402
from sopt.losses import MSELoss   # noqa: E402
from sopt.optim import Adam   # noqa: E402
from sopt.train import BatchSampler, Trainer   # noqa: E402


def split_step(args: argparse.Namespace, mlp: str, coords: np.ndarray, targets: np.ndarray) -> None:
    """Times and splits the training step of issue 21's ``args.network`` with its MLP in precision ``mlp``."""
    field = nf.sopt_field_network(args.network, args.dims, deterministic=args.deterministic, mlp=mlp)
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
    print(f"{dev.get_device().info.adapter_name} [{dev.device_kind()}]: {nf.network_label(args.network, mlp)} "
          f"{args.dims}D, batch 2^{args.batch}: {1e3 * statistics.median(total):.3f} ms per step with a wait (median "
          f"of {args.steps}), host {1e3 * statistics.median(host):.3f} ms")
    try:
        spans = DispatchStamps(spy, dev, tp, kn).collect(trainer.train_step, args.steps)
    except Exception as exc:   # a backend without timestamp queries: the step times above stand
        print(f"  GPU timestamps unavailable: {type(exc).__name__}: {exc}")
        return
    for name, values in spans.items():
        short = name if len(name) <= 90 else name[:60] + "..." + name[-27:]
        print(f"  GPU {1e6 * statistics.median(values):8.1f} us  {short}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--network", default="hashgrid", choices=nf.ISSUE21_NETWORKS)
    ap.add_argument("--dims", type=int, default=2, choices=(2, 3))
    ap.add_argument("--batch", type=int, default=18, help="log2 of the batch size")
    ap.add_argument("--steps", type=int, default=20, help="timed steps (each its own timestamps)")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--deterministic", action="store_true",
                    help="the network's layers with deterministic=True (gradients summed in a fixed order)")
    ap.add_argument("--mlp", choices=(*nf.MLP_PRECISIONS, "both"), default="fp32",
                    help="the MLP in float32 (FullyFusedMLP, the default), fp16 (TensorCoreMLP, CUDA only) or both")
    args = ap.parse_args(argv)
    if args.mlp != "fp32" and dev.device_kind() != "cuda":
        ap.error(f"--mlp {args.mlp}: TensorCoreMLP runs on CUDA only, this device is {dev.device_kind()!r}")
    rng = np.random.default_rng(0)
    coords = rng.random((1 << 16, args.dims), dtype=np.float32)
    targets = rng.random((1 << 16, 3), dtype=np.float32)
    for mlp in nf.MLP_PRECISIONS if args.mlp == "both" else (args.mlp,):
        split_step(args, mlp, coords, targets)
    return 0

if __name__ == "__main__":
    sys.exit(main())
