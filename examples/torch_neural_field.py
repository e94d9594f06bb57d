"""A neural field trained in a plain torch loop with sopt's hash grid and fully fused MLP (sopt.torch.TorchModule).

torch holds the data, the loss, the optimiser and the schedule; sopt's kernels run the network forward and
backward. On CUDA (torch imported first) the parameters are zero-copy views of sopt's memory; on Vulkan (CPU
torch) they are copied each call (a warning says so once).

Run: python examples/torch_neural_field.py [--steps N] [--side S]   (default 300 steps on a 64 x 64 image)
"""

from __future__ import annotations

import argparse
import math

import torch

import sopt
import sopt.torch
from sopt.data import generated_image, pixel_coordinates


def main(steps: int = 300, side: int = 64, batch: int = 4096, quiet: bool = False) -> dict[str, float]:
    device = sopt.torch.placement.torch_device()
    torch.manual_seed(0)
    image = torch.from_numpy(generated_image(side)).to(device).reshape(-1, 3)
    coords = torch.from_numpy(pixel_coordinates(side, side)).to(device)
    encoding = sopt.nn.HashGridEncoding(in_dims=2, n_levels=8, n_features=2, log2_table_size=12, base_resolution=4,
                                        per_level_scale=1.5, seed=0)
    network = sopt.nn.FullyFusedMLP(encoding.out_features, 3, hidden_features=32, hidden_layers=2, seed=0)
    field = sopt.torch.TorchModule(sopt.nn.Sequential(encoding, network))
    opt = torch.optim.Adam(field.parameters(), lr=1e-2, betas=(0.9, 0.99), eps=1e-15)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=steps, eta_min=1e-3)
    for step in range(steps):
        rows = torch.randint(0, coords.shape[0], (min(batch, coords.shape[0]),), device=device)
        loss = torch.nn.functional.mse_loss(field(coords[rows]), image[rows])
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        if not quiet and step % 50 == 0:
            print(f"step {step}: loss {loss.item():.5f}")
    with torch.no_grad():
        mse = torch.nn.functional.mse_loss(field(coords).clamp(0, 1), image).item()
    psnr = -10.0 * math.log10(max(mse, 1e-12))
    if not quiet:
        print(f"PSNR {psnr:.2f} dB after {steps} steps ({len(list(field.parameters()))} torch parameters: "
              f"{', '.join(k for k, _ in field.named_parameters())})")
    return {"psnr": psnr, "mse": mse}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--side", type=int, default=64)
    args = parser.parse_args()
    main(args.steps, args.side)
