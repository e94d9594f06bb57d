"""Data-parallel weak scaling: the hash-grid neural field at 2^20 samples per GPU, on 1 and on N GPUs.

Network: benchmarks/neural_field.py's hash grid (16 levels x 2 features, 2^19-entry tables, base resolution 16,
per-level scale 1.5) -> FullyFusedMLP, 2 hidden layers of 64 ReLU -> RGB; Adam lr 1e-2; MSE on random pixels of a
generated 1024 x 1024 image. Each process draws 2^20 samples a step (the global batch is 2^20 x N), so ideal weak
scaling keeps the step time constant: efficiency = t_1 / t_N.

For N = 1, 2 (when more than 2 GPUs are visible) and every visible GPU, the processes are started by sopt's
launcher (:func:`sopt.distributed.launch`, one per GPU, NVLink multicast off) and each runs
``Trainer.train_step`` with the data-parallel hook (batch split, one NCCL all-reduce of the flat gradient buffer
between backward and optimiser step). Rank 0 reports:

- ms/step: wall clock over the timed steps after warm-up, every GPU synchronised (and a barrier) at both ends;
  the slowest rank's time;
- the all-reduce alone: ``torch.distributed.all_reduce`` (AVG, as the hook does) of a buffer of the gradient's
  size, timed over 50 calls; its share of the N-process step; and NCCL's bus bandwidth for that size,
  ``busbw = 2 (N - 1) / N * bytes / time`` (nccl-tests' definition);
- whether every rank ended with the same parameters (a checksum per rank).

Run on a machine with 2+ GPUs:  python3 benchmarks/distributed.py            (about 2 minutes with compiles)
On the software driver, as a check of the code path (gloo): python3 benchmarks/distributed.py --log2-batch 10
--log2-table 12 --steps 3 --warmup 2 --nprocs 1,2 --image 64
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
import tempfile
import time
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))   # this checkout's sopt, not an installed one


def _synchronize() -> None:
    import torch

    from sopt.runtime import device as dev
    dev.synchronize()
    if torch.cuda.is_available() and dev.device_kind() == "cuda":
        torch.cuda.synchronize()


def worker(args: argparse.Namespace) -> None:
    """One rank (or the only process): build, warm up, time; rank 0 writes the results to ``args.result``."""
    import numpy as np
    import torch

    from sopt.distributed import rank_environment, start
    env = rank_environment()
    dp = start(env) if env is not None else None
    if dp is None and torch.cuda.is_available() and os.environ.get("SOPT_DEVICE", "") != "vulkan":
        torch.cuda.set_device(0)   # the one process shares torch's context too, as a rank does
    import torch.distributed as dist

    from sopt.runtime import device as dev
    from sopt.data.image import generated_image, pixel_coordinates
    from sopt.losses import MSELoss
    from sopt.nn import HashGridEncoding, Sequential
    from sopt.nn.fully_fused_mlp import FullyFusedMLP
    from sopt.optim import Adam
    from sopt.train import BatchSampler, Trainer

    world = dp.world_size if dp is not None else 1
    image = generated_image(args.image)
    coords, targets = pixel_coordinates(args.image, args.image), image.reshape(-1, 3).astype(np.float32)
    enc = HashGridEncoding(2, n_levels=16, n_features=2, log2_table_size=args.log2_table, base_resolution=16,
                           per_level_scale=1.5, seed=0)
    model = Sequential(enc, FullyFusedMLP(enc.out_features, 3, 64, 2, activation="relu", seed=0))
    optimizer = Adam(model.parameters(), lr=1e-2)
    sampler = BatchSampler(coords, targets, batch_size=(1 << args.log2_batch) * world, seed=0)
    trainer = Trainer(model, MSELoss(), optimizer, sampler, progress=False, log_every=10**9, data_parallel=dp)
    assert sampler.batch_size == 1 << args.log2_batch

    def barrier() -> None:
        _synchronize()
        if dp is not None:
            dist.barrier(group=dp.control)

    for _ in range(args.warmup):
        trainer.train_step()
    barrier()
    began = time.perf_counter()
    for _ in range(args.steps):
        trainer.train_step()
    barrier()
    step_s = (time.perf_counter() - began) / args.steps
    n_grad = optimizer.arena.n_elements
    result: dict[str, Any] = {"nproc": world, "device": dev.get_device().info.adapter_name,
                              "samples_per_process": 1 << args.log2_batch, "gradient_floats": n_grad}
    if dp is not None:
        slowest = torch.tensor([step_s], dtype=torch.float64)
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX, group=dp.control)
        step_s = float(slowest.item())
        # the all-reduce alone, on a buffer of the gradient's size, as the hook calls it
        on_gpu = dp.backend == "nccl"
        buffer = torch.ones(n_grad, dtype=torch.float32, device="cuda" if on_gpu else "cpu")
        op = dist.ReduceOp.AVG if on_gpu else dist.ReduceOp.SUM
        for _ in range(5):
            dist.all_reduce(buffer, op=op)
        barrier()
        calls = 50 if on_gpu else 5
        t0 = time.perf_counter()
        for _ in range(calls):
            dist.all_reduce(buffer, op=op)
        barrier()
        reduce_s = (time.perf_counter() - t0) / calls
        result.update(all_reduce_ms=reduce_s * 1e3, all_reduce_share=reduce_s / step_s,
                      busbw_GBps=2 * (world - 1) / world * 4 * n_grad / reduce_s / 1e9, backend=dp.backend)
        # every rank's parameters must be the same (each took the same step on the same averaged gradients)
        checksum = torch.tensor([float(np.float64(optimizer.arena.values.to_numpy()).sum())], dtype=torch.float64)
        sums: list[Any] = [None] * world
        dist.all_gather_object(sums, float(checksum.item()), group=dp.control)
        result["same_parameters_on_every_rank"] = len(set(sums)) == 1
    result["ms_per_step"] = step_s * 1e3
    result["samples_per_s"] = (1 << args.log2_batch) * world / step_s
    if dp is None or dp.is_main:
        pathlib.Path(args.result).write_text(json.dumps(result))
    if dp is not None:
        dp.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--log2-batch", type=int, default=20, help="log2 of the samples per process per step")
    parser.add_argument("--log2-table", type=int, default=19, help="log2 of the hash grid's table entries")
    parser.add_argument("--image", type=int, default=1024, help="side of the generated image (pixels)")
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--nprocs", default=None, help="process counts to time, e.g. 1,2,8 (default: 1, 2 when "
                                                       "more than 2 GPUs are visible, and all of them)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return 0
    from sopt.distributed import launch
    from sopt.distributed.environment import keep_multicast_off
    keep_multicast_off()
    if args.nprocs is not None:
        counts = [int(n) for n in args.nprocs.split(",")]
    else:
        import torch
        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if gpus < 2:
            print(f"error: {gpus} CUDA GPU(s) visible; weak scaling needs 2 or more (or give --nprocs)", file=sys.stderr)
            return 2
        counts = sorted({1, gpus} | ({2} if gpus > 2 else set()))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in counts:
            result = pathlib.Path(tmp, f"n{n}.json")
            command = [sys.executable, str(pathlib.Path(__file__).resolve()), "--worker", "--result", str(result),
                       "--log2-batch", str(args.log2_batch), "--log2-table", str(args.log2_table),
                       "--image", str(args.image), "--steps", str(args.steps), "--warmup", str(args.warmup)]
            if n == 1:
                import subprocess
                status = subprocess.run(command, env={**os.environ}).returncode
            else:
                status = launch(n, command)
            if status != 0:
                print(f"error: the {n}-process run failed (exit status {status})", file=sys.stderr)
                return 2
            rows.append(json.loads(result.read_text()))
    t1 = next((r["ms_per_step"] for r in rows if r["nproc"] == 1), None)
    print(f"hash-grid neural field, 2^{args.log2_batch} samples per process, table 2^{args.log2_table}, "
          f"{rows[0]['gradient_floats']} gradient floats ({4 * rows[0]['gradient_floats'] / 2**20:.1f} MiB), "
          f"{rows[0]['device']}")
    print(f"{'procs':>5} {'ms/step':>9} {'Msamples/s':>11} {'efficiency':>10} {'allreduce ms':>12} {'share':>6} "
          f"{'busbw GB/s':>10} {'same params':>11}")
    for r in rows:
        eff = f"{t1 / r['ms_per_step']:.3f}" if t1 is not None else "n/a"
        share = f"{100 * r['all_reduce_share']:.1f}%" if "all_reduce_share" in r else "-"
        print(f"{r['nproc']:>5} {r['ms_per_step']:>9.3f} {r['samples_per_s'] / 1e6:>11.1f} {eff:>10} "
              f"{r.get('all_reduce_ms', float('nan')):>12.3f} {share:>6} {r.get('busbw_GBps', float('nan')):>10.1f} "
              f"{str(r.get('same_parameters_on_every_rank', '-')):>11}")
    print("RESULT " + json.dumps(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
