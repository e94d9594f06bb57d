"""Neural-field image fitting: sopt against PyTorch, same network, same GPU, same run.

Network: frequency encoding of (x, y) in [0, 1] with 16 frequencies (tiny-cuda-nn layout: per dimension
sin/cos of 2^k pi x, 64 features) -> 3 hidden layers of 64 ReLU -> 3 outputs; float32; Adam lr 1e-2;
MSE on random pixels of a 512x512 image (generated, no download); batch 2^14 and 2^18; 1000 steps.

For each framework and batch size it prints samples/s, ms/step (wall clock over the timed steps after
warm-up, the GPU synchronised at both ends) and the PSNR of the final network on every pixel.

sopt variants:
* ``sopt fused``: FullyFusedMLP with the frequency encoding fused into its kernels (one forward kernel,
  one backward kernel per layer);
* ``sopt fused+enc``: the FrequencyEncoding module followed by a FullyFusedMLP;
* ``sopt layers``: FrequencyEncoding + the ``sopt.nn.MLP`` builder (Linear/ReLU modules, .bwds);
both driven by ``sopt.train.Trainer.train_step`` (one command buffer per step, GPU batch sampling).
PyTorch: eager ``nn.Sequential`` of ``nn.Linear``/``nn.ReLU`` with the same initial weights as sopt's fused
network, ``torch.optim.Adam(lr=1e-2)`` (default foreach implementation), batches drawn with ``torch.randint``
on the GPU. Also times sopt's hash-grid network (16 levels x 2 features, 2^19 table, base resolution 16,
per-level scale 1.5 to reach 512 px -> 2 hidden layers of 64 ReLU -> 3) and reports it.

``--deterministic`` adds the ``-det`` twin of each of ``fused``, ``hashgrid`` and ``layers`` in ``--variants``
(``fused`` and ``hashgrid`` when none is): the network built with ``deterministic=True`` (fixed-order
weight-gradient reduction, fixed-point hash-table gradient), timed in the same run, and prints each one's
ms/step against its default-mode twin.

Run: SOPT_DEVICE=cuda python3 benchmarks/neural_field.py [--steps 1000] [--batches 14,18] [--quick] [--deterministic]
"""

from __future__ import annotations

import argparse
import json
import math
import pathlib
import sys
import time
from typing import Any, Callable

import numpy as np
import slangpy as spy

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))   # this checkout's sopt, not an installed one

from sopt import device as dev
from sopt.data.image import generated_image, pixel_coordinates
from sopt.losses import MSELoss
from sopt.nn import MLP, FrequencyEncoding, HashGridEncoding, Sequential
from sopt.nn.fully_fused_mlp import FullyFusedMLP
from sopt.optim import Adam
from sopt.train import BatchSampler, Trainer

N_FREQS = 16
HIDDEN, LAYERS = 64, 3


def psnr(mse: float) -> float:
    return float("inf") if mse <= 0 else 10.0 * math.log10(1.0 / mse)


def sopt_eval_psnr(model: Any, coords: Any, image: np.ndarray) -> float:
    """PSNR of ``model`` on every pixel, evaluated in chunks on the GPU."""
    pred = []
    n = coords.shape[0]
    chunk = 1 << 16
    for start in range(0, n, chunk):
        x = sopt_tensor(coords[start:start + chunk])
        pred.append(model.forward(x).to_numpy().copy())
    p = np.clip(np.concatenate(pred), 0, 1)
    return psnr(float(np.mean((p - image.reshape(-1, 3)) ** 2)))


def sopt_tensor(a: np.ndarray) -> Any:
    return spy.Tensor.from_numpy(dev.get_device(), np.ascontiguousarray(a, np.float32))


def time_steps(step: Callable[[], Any], sync: Callable[[], None], steps: int, warmup: int) -> float:
    for _ in range(warmup):
        step()
    sync()
    t = time.perf_counter()
    for _ in range(steps):
        step()
    sync()
    return (time.perf_counter() - t) / steps


def run_sopt(kind: str, coords: np.ndarray, image: np.ndarray, batch: int, steps: int, warmup: int,
             torch_init: list | None, seed: int = 0) -> dict[str, Any]:
    targets = image.reshape(-1, 3)
    name = kind
    det = kind.endswith("-det")
    kind = kind.removesuffix("-det")
    if kind == "fused":
        model = FullyFusedMLP(2, 3, HIDDEN, LAYERS, activation="relu",
                              encoding={"otype": "Frequency", "n_frequencies": N_FREQS}, seed=0, deterministic=det)
        if torch_init is not None:
            model.load_layers(torch_init)
    elif kind == "fused+enc":
        mlp = FullyFusedMLP(2 * 2 * N_FREQS, 3, HIDDEN, LAYERS, activation="relu", seed=0)
        if torch_init is not None:
            mlp.load_layers(torch_init)
        model = Sequential(FrequencyEncoding(2, N_FREQS), mlp)
    elif kind == "layers":
        model = MLP(2, 3, HIDDEN, LAYERS, activation="relu", encoding={"otype": "Frequency", "n_frequencies": N_FREQS},
                    seed=0, deterministic=det)
    elif kind == "hashgrid":
        enc = HashGridEncoding(2, n_levels=16, n_features=2, log2_table_size=19, base_resolution=16,
                               per_level_scale=1.5, seed=0, deterministic=det)
        model = Sequential(enc, FullyFusedMLP(enc.out_features, 3, HIDDEN, 2, activation="relu", seed=0,
                                              deterministic=det))
    else:
        raise ValueError(kind)
    opt = Adam(model.parameters(), lr=1e-2)
    sampler = BatchSampler(coords, targets, batch_size=batch, seed=seed)
    trainer = Trainer(model, MSELoss(), opt, sampler, progress=False, log_every=10**9)
    total = warmup + steps
    per_step = time_steps(trainer.train_step, dev.synchronize, steps, warmup)
    assert trainer.step == total
    return {"framework": f"sopt {name}", "batch": batch, "ms_per_step": per_step * 1e3,
            "samples_per_s": batch / per_step, "psnr": sopt_eval_psnr(model, coords, image),
            "steps": total, "seed": seed}


def torch_network(torch: Any) -> Any:
    layers: list[Any] = []
    width = 2 * 2 * N_FREQS
    for _ in range(LAYERS):
        layers += [torch.nn.Linear(width, HIDDEN), torch.nn.ReLU()]
        width = HIDDEN
    layers.append(torch.nn.Linear(width, 3))
    return torch.nn.Sequential(*layers)


def torch_encode(torch: Any, x: Any) -> Any:
    freqs = (2.0 ** torch.arange(N_FREQS, device=x.device, dtype=x.dtype)) * math.pi
    arg = x[:, :, None] * freqs                                  # (N, 2, F)
    return torch.stack([torch.sin(arg), torch.cos(arg)], dim=-1).reshape(x.shape[0], -1)  # (d, k, sin/cos)


def run_torch(torch: Any, net: Any, coords: np.ndarray, image: np.ndarray, batch: int, steps: int,
              warmup: int, seed: int = 0) -> dict[str, Any]:
    dev_t = torch.device("cuda")
    X = torch.tensor(coords, device=dev_t)
    Y = torch.tensor(image.reshape(-1, 3), device=dev_t)
    opt = torch.optim.Adam(net.parameters(), lr=1e-2)
    gen = torch.Generator(device=dev_t)
    gen.manual_seed(seed)

    def step() -> None:
        idx = torch.randint(0, X.shape[0], (batch,), device=dev_t, generator=gen)
        pred = net(torch_encode(torch, X[idx]))
        loss = torch.nn.functional.mse_loss(pred, Y[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    per_step = time_steps(step, torch.cuda.synchronize, steps, warmup)
    with torch.no_grad():
        pred = torch.cat([net(torch_encode(torch, X[s:s + 65536])) for s in range(0, X.shape[0], 65536)])
        mse = float(torch.mean((pred.clamp(0, 1) - Y) ** 2))
    return {"framework": "pytorch eager", "batch": batch, "ms_per_step": per_step * 1e3,
            "samples_per_s": batch / per_step, "psnr": psnr(mse), "steps": warmup + steps, "seed": seed}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=1000, help="steps per run, warm-up included (default 1000)")
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--batches", default="14,18", help="log2 batch sizes (default 14,18)")
    ap.add_argument("--size", type=int, default=512, help="image side in pixels (default 512)")
    ap.add_argument("--variants", default="fused,fused+enc,hashgrid,torch",
                    help="comma-separated from fused, fused+enc, layers, hashgrid, torch")
    ap.add_argument("--quick", action="store_true", help="tiny run for a smoke test (64 px, 2^10 batch, 30 steps)")
    ap.add_argument("--seeds", type=int, default=3,
                    help="runs per framework and batch size, seeds 0..N-1 for the initial weights and the batches; "
                         "the summary gives the median ms/step and the mean PSNR (one run's final PSNR varies by "
                         "~0.5 dB with the seed at lr 1e-2)")
    ap.add_argument("--deterministic", action="store_true",
                    help="also time fused and hashgrid with deterministic=True (variants fused-det, hashgrid-det) "
                         "and print their cost against the default mode")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    if args.quick:
        args.size, args.batches, args.steps, args.warmup = 64, "10", 30, 5
    image = generated_image(args.size)
    coords = pixel_coordinates(args.size, args.size)
    variants = args.variants.split(",")
    if args.deterministic:
        # the deterministic twin of each network asked for (fused and hashgrid when none is)
        nets = [v for v in ("fused", "hashgrid", "layers") if v in variants] or ["fused", "hashgrid"]
        variants += [f"{v}-det" for v in nets if f"{v}-det" not in variants]
        variants += [v for v in nets if v not in variants]   # the default twin, same run
    try:
        import torch
        has_torch = torch.cuda.is_available()
    except ImportError:
        torch, has_torch = None, False
    device = dev.get_device()
    print(f"sopt device: {device.info.adapter_name} [{dev.device_kind()}]"
          + (f"; torch {torch.__version__} on {torch.cuda.get_device_name()}" if has_torch else "; torch: n/a"))
    print(f"image {args.size}x{args.size}, {args.steps} steps per run ({args.warmup} untimed warm-up), Adam lr 1e-2")
    timed = args.steps - args.warmup
    rows = []
    for log2 in [int(b) for b in args.batches.split(",")]:
        batch = 1 << log2
        for seed in range(args.seeds):
            torch_init = None
            if has_torch and "torch" in variants:
                torch.manual_seed(seed)
                net = torch_network(torch).cuda()
                torch_init = [(m.weight.detach().cpu().numpy(), m.bias.detach().cpu().numpy())
                              for m in net if isinstance(m, torch.nn.Linear)]
                rows.append(run_torch(torch, net, coords, image, batch, timed, args.warmup, seed))
                print(f"  {rows[-1]}", flush=True)
            for kind in ("fused", "fused-det", "fused+enc", "layers", "layers-det", "hashgrid", "hashgrid-det"):
                if kind in variants:
                    rows.append(run_sopt(kind, coords, image, batch, timed, args.warmup, torch_init, seed))
                    print(f"  {rows[-1]}", flush=True)
    print()
    print(f"over {args.seeds} seed(s): median ms/step, mean (min..max) final PSNR")
    print(f"{'framework':<16} {'batch':>8} {'ms/step':>9} {'Msamples/s':>11} {'PSNR dB':>20}  vs pytorch")
    summary = {}
    for r in rows:
        summary.setdefault((r["framework"], r["batch"]), []).append(r)
    for (name, batch), runs in summary.items():
        ms = float(np.median([r["ms_per_step"] for r in runs]))
        ps = [r["psnr"] for r in runs]
        ref = summary.get(("pytorch eager", batch))
        speed = f"{float(np.median([r['ms_per_step'] for r in ref])) / ms:.2f}x" if ref else "n/a"
        dpsnr = f", PSNR {np.mean(ps) - np.mean([r['psnr'] for r in ref]):+.2f} dB" if ref else ""
        print(f"{name:<16} {batch:>8} {ms:>9.3f} {batch / ms / 1e3:>11.1f} "
              f"{np.mean(ps):>8.2f} ({min(ps):.2f}..{max(ps):.2f})  {speed}{dpsnr}")
    for base in ("fused", "hashgrid", "layers"):
        for batch in sorted({b for _, b in summary}):
            default, det = summary.get((f"sopt {base}", batch)), summary.get((f"sopt {base}-det", batch))
            if default and det:
                ms_default = float(np.median([r["ms_per_step"] for r in default]))
                ms_det = float(np.median([r["ms_per_step"] for r in det]))
                print(f"deterministic cost, {base:<8} batch {batch:>8}: {ms_default:.3f} -> {ms_det:.3f} ms/step "
                      f"({100 * (ms_det / ms_default - 1):+.1f}%)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
