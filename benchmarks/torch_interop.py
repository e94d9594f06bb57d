"""sopt inside a plain torch training loop (sopt.torch.TorchModule) against sopt's native training step, same run.

Networks (as benchmarks/neural_field.py): ``fused``, FullyFusedMLP with the 16-frequency encoding fused (2 -> 3
hidden layers of 64 ReLU -> 3); ``hashgrid``, Sequential(HashGridEncoding 16 levels x 2 features, 2^19 table,
base 16, scale 1.5; FullyFusedMLP 64 x 2 hidden ReLU -> 3). Data: the generated 512 x 512 image, random pixels,
batch 2^14 and 2^18, MSE, Adam lr 1e-2.

Per network and batch, in one process on one GPU:

* ``native``: sopt.train.Trainer.train_step (batch drawn on the GPU by BatchSampler, forward, loss, backward and
  sopt's Adam recorded into one command buffer, one submission);
* ``torch+torch-adam``: ``TorchModule(network)`` in a torch loop: ``torch.randint`` batch, ``net(x)``,
  ``F.mse_loss``, ``loss.backward()``, ``torch.optim.Adam`` (foreach) ``step``, ``zero_grad``;
* ``torch+sopt-adam``: the same loop with ``sopt.optim.Adam(net.parameters(), lr=1e-2)`` (sopt's one-dispatch
  step over the arena the TorchModule's parameters view).

ms/step is wall clock over the timed steps after warm-up, the GPU synchronised at both ends; the ratio is each
row over ``native`` (issue 22's target: <= 1.15). Also prints the final loss of each (they train the same network
from the same start, so they should be close).

Run on the GPU machine: python3 benchmarks/torch_interop.py [--steps 300] [--warmup 30] [--batches 14,18]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any, Callable

import numpy as np
import torch   # before sopt's device exists: sopt then shares torch's CUDA context and stream

import sopt
import sopt.torch
from sopt import device as dev
from sopt.data.image import generated_image, pixel_coordinates
from sopt.losses import MSELoss
from sopt.nn import FullyFusedMLP, HashGridEncoding, Sequential
from sopt.optim import Adam
from sopt.train import BatchSampler, Trainer

SIZE = 512
N_FREQS, HIDDEN, LAYERS = 16, 64, 3
HASHGRID = {"n_levels": 16, "n_features": 2, "log2_table_size": 19, "base_resolution": 16, "per_level_scale": 1.5}


def network(kind: str) -> sopt.nn.Module:
    if kind == "fused":
        return FullyFusedMLP(2, 3, HIDDEN, LAYERS, activation="relu",
                             encoding={"otype": "Frequency", "n_frequencies": N_FREQS}, seed=0)
    enc = HashGridEncoding(2, **HASHGRID, seed=0)
    return Sequential(enc, FullyFusedMLP(enc.out_features, 3, HIDDEN, 2, activation="relu", seed=0))


def timed(step: Callable[[], Any], sync: Callable[[], None], steps: int, warmup: int) -> float:
    for _ in range(warmup):
        step()
    sync()
    t = time.perf_counter()
    for _ in range(steps):
        step()
    sync()
    return (time.perf_counter() - t) / steps


def run_native(kind: str, coords: np.ndarray, targets: np.ndarray, batch: int, steps: int, warmup: int) -> dict:
    model = network(kind)
    trainer = Trainer(model, MSELoss(), Adam(model.parameters(), lr=1e-2), BatchSampler(coords, targets, batch, seed=0),
                      progress=False, log_every=10**9)
    per_step = timed(trainer.train_step, dev.synchronize, steps, warmup)
    loss = float(trainer.train_step().item())
    return {"variant": "native", "ms_per_step": per_step * 1e3, "final_loss": loss}


def run_torch_loop(kind: str, optimiser: str, coords: torch.Tensor, targets: torch.Tensor, batch: int, steps: int,
                   warmup: int) -> dict:
    net = sopt.torch.TorchModule(network(kind))
    opt = torch.optim.Adam(net.parameters(), lr=1e-2) if optimiser == "torch" else Adam(net.parameters(), lr=1e-2)
    generator = torch.Generator(device=coords.device).manual_seed(0)
    last: list[torch.Tensor] = []

    def step() -> None:
        rows = torch.randint(0, coords.shape[0], (batch,), device=coords.device, generator=generator)
        loss = torch.nn.functional.mse_loss(net(coords[rows]), targets[rows])
        opt.zero_grad()
        loss.backward()
        opt.step()
        last[:] = [loss]

    per_step = timed(step, torch.cuda.synchronize, steps, warmup)
    return {"variant": f"torch+{optimiser}-adam", "ms_per_step": per_step * 1e3, "final_loss": float(last[0].item())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--batches", default="14,18", help="log2 batch sizes, comma-separated")
    parser.add_argument("--networks", default="fused,hashgrid")
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("benchmarks/torch_interop.py times the CUDA path: it needs torch with CUDA and an NVIDIA GPU")
    if dev.device_kind() != "cuda" or dev.torch_device_index() is None:
        sys.exit("sopt's device does not share torch's CUDA context (SOPT_DEVICE=vulkan?); run with CUDA")
    image = generated_image(SIZE).reshape(-1, 3).astype(np.float32)
    coords = pixel_coordinates(SIZE, SIZE).astype(np.float32)
    coords_t = torch.from_numpy(coords).cuda()
    targets_t = torch.from_numpy(image).cuda()
    print(f"device: {torch.cuda.get_device_name()}; torch {torch.__version__}; {args.steps} timed steps after "
          f"{args.warmup} warm-up")
    rows = []
    for kind in args.networks.split(","):
        for log2 in (int(b) for b in args.batches.split(",")):
            batch = 2**log2
            native = run_native(kind, coords, image, batch, args.steps, args.warmup)
            results = [native] + [run_torch_loop(kind, o, coords_t, targets_t, batch, args.steps, args.warmup)
                                  for o in ("torch", "sopt")]
            for r in results:
                r.update(network=kind, batch=f"2^{log2}", ratio=r["ms_per_step"] / native["ms_per_step"])
                rows.append(r)
                print(f"{kind:9s} 2^{log2}  {r['variant']:18s} {r['ms_per_step']:8.3f} ms/step  "
                      f"x{r['ratio']:.3f} of native  final loss {r['final_loss']:.5f}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
