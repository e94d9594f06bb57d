"""Radiance-field training throughput: sopt's neural_radiance step against the same renderer in PyTorch eager, same
GPU, same run; prints rays/s of a training step and the ratio sopt / PyTorch (issue 21's target: >= 10x).

The renderer, on each side: ``--rays`` random pixels of the built-in scene's training views (``--size`` pixels,
100 views), each ray marched through the scene box with step ``2 sqrt(3) bound / --march-steps`` keeping its
points in occupied cells of the occupancy grid (``--grid``^3), at most ``--samples`` per ray (every k-th point when
a ray has more, as march.slang); the network at those samples (hash grid 16 levels x 2 features, table 2^19, base
resolution 16, per-level scale 1.5 -> 64 x 2 hidden ReLU -> 4 outputs); volume rendering (exp density, sigmoid
colour, white background); MSE against the pixels; backward; Adam; the occupancy grid updated every 16 steps
(one random point per cell through the network, decayed max). Unused sample slots (rays with fewer occupied
points) are evaluated on both sides (sopt's fixed-shape batch; PyTorch the same tensors).

sopt: ``NeuralRadiance`` (problems/neural_radiance) driven by ``Trainer.train_step`` (one command buffer per
step). PyTorch: the same maths with tensor ops (``torch_hashgrid_encode`` of benchmarks/neural_field.py, nn.Linear
layers, cumulative-product compositing, autograd, torch.optim.Adam), starting from sopt's weights and, after sopt's
``--warmup`` training steps, sopt's occupancy grid, so both march the same occupied cells. Timed: ``--steps``
steps after the warm-up, wall clock with the GPU synchronised at both ends.

Run: SOPT_DEVICE=cuda python3 benchmarks/neural_radiance.py [--rays 4096,16384] [--samples 64] [--steps 200]
"""

from __future__ import annotations

import argparse
import math
import pathlib
import sys
import time
from typing import Any

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from sopt.runtime import device as dev  # noqa: E402
from problems.neural_radiance import load_config  # noqa: E402
from problems.neural_radiance.cameras import pixel_rays  # noqa: E402
from problems.neural_radiance.problem import NeuralRadiance  # noqa: E402
from sopt.train import Trainer  # noqa: E402


def sopt_config(rays: int, samples: int, size: int, grid: int, march_steps: int) -> Any:
    return load_config(image_size=size, train_views=100, test_views=2, rays_per_batch=rays, samples_per_ray=samples,
                       march_steps=march_steps, occupancy={"resolution": grid, "update_every": 16, "warmup_steps": 64},
                       encoding={"otype": "HashGrid", "n_levels": 16, "n_features_per_level": 2, "log2_hashmap_size": 19,
                                 "base_resolution": 16, "per_level_scale": 1.5},
                       network={"otype": "FullyFusedMLP", "n_neurons": 64, "n_hidden_layers": 2},
                       steps=100_000, log_every=100_000)


def time_sopt(problem: NeuralRadiance, warmup: int, steps: int) -> tuple[float, Trainer]:
    parts = problem.trainer_parts()
    parts["callbacks"] = []
    trainer = Trainer(**parts, log_every=10**9, progress=False)
    for _ in range(warmup):
        trainer.train_step()
    dev.get_device().wait()
    start = time.perf_counter()
    for _ in range(steps):
        trainer.train_step()
    dev.get_device().wait()
    return (time.perf_counter() - start) / steps, trainer


class TorchRadiance:
    """The renderer of the module docstring in PyTorch, from sopt's problem (its views, weights and grid)."""

    def __init__(self, torch: Any, problem: NeuralRadiance, lr: float) -> None:
        from neural_field import torch_hashgrid_encode
        self.torch, self.encode = torch, torch_hashgrid_encode
        cfg = problem.config
        d = torch.device("cuda" if torch.cuda.is_available() else "cpu")   # cpu: a smoke test only
        views = problem.train_views
        rays = [np.concatenate(pixel_rays(views.cameras, i), axis=1) for i in range(len(views))]
        self.rays = torch.tensor(np.concatenate(rays), dtype=torch.float32, device=d)       # (P, 6)
        self.colours = torch.tensor(views.images.reshape(-1, 3), device=d)
        enc, mlp = problem.model.modules
        self.levels = enc.levels
        self.table = torch.nn.Parameter(torch.tensor(enc.table.numpy(), device=d))
        layers = []
        for w, b in mlp.layer_slices():
            lin = torch.nn.Linear(w.shape[1], w.shape[0]).to(d)
            with torch.no_grad():
                lin.weight.copy_(torch.tensor(w))
                lin.bias.copy_(torch.tensor(b))
            layers += [lin, torch.nn.ReLU()]
        self.mlp = torch.nn.Sequential(*layers[:-1])
        self.opt = torch.optim.Adam([self.table, *self.mlp.parameters()], lr=lr, betas=(0.9, 0.99), eps=1e-15)
        self.grid = torch.tensor(problem.field.occupancy.parameter.numpy(), device=d)
        self.res, self.bound, self.dt, self.samples = cfg.occupancy.resolution, cfg.bound, cfg.dt, cfg.samples_per_ray
        self.threshold = problem.field.occupancy.threshold
        self.steps_max = cfg.march_steps + 1
        self.batch = cfg.rays_per_batch
        self.gen = torch.Generator(device=d)
        self.gen.manual_seed(0)
        self.step_count = 0

    def network(self, points: Any) -> Any:
        return self.mlp(self.encode(self.torch, points, self.table, self.levels))

    def march(self, rays: Any) -> tuple[Any, Any]:
        """(points (R, S, 3) unit cube, deltas (R, S)): every dt-grid point of the ray in an occupied cell, every
        k-th of them when there are more than S (march.slang's samples)."""
        torch = self.torch
        o, d = rays[:, :3], rays[:, 3:]
        inv = 1.0 / torch.where(d.abs() > 1e-9, d, torch.full_like(d, 1e-9))
        ta, tb = (-self.bound - o) * inv, (self.bound - o) * inv
        t0 = torch.clamp(torch.minimum(ta, tb).amax(dim=1), min=0.0)
        t1 = torch.maximum(ta, tb).amin(dim=1)
        u0 = torch.rand(len(rays), device=rays.device, generator=self.gen)
        k = torch.arange(self.steps_max, device=rays.device, dtype=torch.float32)
        t = t0[:, None] + self.dt * (u0[:, None] + k[None])                                 # (R, K)
        p = torch.clamp((o[:, None] + t[..., None] * d[:, None]) / (2 * self.bound) + 0.5, 0.0, 1.0)
        c = torch.clamp((p * self.res).long(), 0, self.res - 1)
        cell = (c[..., 2] * self.res + c[..., 1]) * self.res + c[..., 0]
        limit = torch.minimum(torch.tensor(self.threshold, device=rays.device), self.grid.mean())
        occupied = (self.grid[cell] > limit) & (t < t1[:, None])
        n = occupied.sum(dim=1)
        stride = torch.clamp((n + self.samples - 1) // self.samples, min=1)
        rank = torch.cumsum(occupied.long(), dim=1) - 1
        keep = occupied & (rank % stride[:, None] == 0) & (rank // stride[:, None] < self.samples)
        slot = torch.where(keep, rank // stride[:, None], torch.full_like(rank, self.samples))   # S: dropped
        points = torch.zeros(len(rays), self.samples + 1, 3, device=rays.device)
        deltas = torch.zeros(len(rays), self.samples + 1, device=rays.device)
        points.scatter_(1, slot[..., None].expand(-1, -1, 3), p)
        deltas.scatter_(1, slot, torch.where(keep, self.dt * stride[:, None].float(), torch.zeros_like(t)))
        return points[:, :self.samples], deltas[:, :self.samples]

    def update_grid(self) -> None:
        torch = self.torch
        with torch.no_grad():
            r = self.res
            idx = torch.arange(r ** 3, device=self.grid.device)
            cells = torch.stack([idx % r, (idx // r) % r, idx // (r * r)], dim=1).float()
            points = (cells + torch.rand(cells.shape, device=cells.device, generator=self.gen)) / r
            sigma = torch.exp(torch.clamp(self.network(points)[:, 0], max=15.0))
            self.grid = torch.maximum(self.grid * 0.95, sigma)

    def step(self) -> Any:
        torch = self.torch
        if self.step_count % 16 == 0:
            self.update_grid()
        self.step_count += 1
        pick = torch.randint(0, len(self.rays), (self.batch,), device=self.rays.device, generator=self.gen)
        rays, target = self.rays[pick], self.colours[pick]
        points, deltas = self.march(rays)
        raw = self.network(points.reshape(-1, 3)).reshape(self.batch, self.samples, 4)
        sigma = torch.exp(torch.clamp(raw[..., 0], max=15.0))
        alpha = 1.0 - torch.exp(-sigma * deltas)
        trans = torch.cumprod(torch.cat([torch.ones_like(alpha[:, :1]), 1.0 - alpha], dim=1), dim=1)
        weights = trans[:, :-1] * alpha
        rgb = (weights[..., None] * torch.sigmoid(raw[..., 1:])).sum(dim=1) + trans[:, -1:] * 1.0
        loss = ((rgb - target) ** 2).mean()
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        return loss


def time_torch(model: TorchRadiance, warmup: int, steps: int) -> float:
    torch = model.torch
    for _ in range(warmup):
        model.step()
    sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
    sync()
    start = time.perf_counter()
    for _ in range(steps):
        model.step()
    sync()
    return (time.perf_counter() - start) / steps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rays", default="4096,16384", help="rays per step, comma-separated")
    ap.add_argument("--samples", type=int, default=64, help="samples per ray at most")
    ap.add_argument("--march-steps", type=int, default=512)
    ap.add_argument("--grid", type=int, default=64, help="occupancy grid cells per side")
    ap.add_argument("--size", type=int, default=128, help="pixels per side of the training views")
    ap.add_argument("--warmup", type=int, default=300, help="sopt training steps before timing (the grid culls)")
    ap.add_argument("--steps", type=int, default=200, help="timed steps")
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--quick", action="store_true", help="a smoke test at tiny sizes (any device)")
    args = ap.parse_args()
    if args.quick:
        args.rays, args.samples, args.march_steps, args.grid, args.size, args.warmup, args.steps = \
            "256", 16, 128, 16, 24, 70, 4
    print(f"device: {dev.get_device().info.adapter_name} ({dev.device_kind()})")
    rows = []
    for rays in (int(r) for r in args.rays.split(",")):
        problem = NeuralRadiance(sopt_config(rays, args.samples, args.size, args.grid, args.march_steps))
        sopt_s, trainer = time_sopt(problem, args.warmup, args.steps)
        filled = float((problem.field.occupancy.occupied_fraction(trainer.step)))
        row = {"rays": rays, "sopt_ms": 1e3 * sopt_s, "sopt_rays_s": rays / sopt_s, "occupied": filled}
        if not args.no_torch:
            import torch
            model = TorchRadiance(torch, problem, lr=1e-2)
            torch_s = time_torch(model, 10, max(10, args.steps // 4))
            row.update(torch_ms=1e3 * torch_s, torch_rays_s=rays / torch_s, ratio=torch_s / sopt_s)
        rows.append(row)
        print(row, flush=True)
    print(f"\nsamples/ray {args.samples}, march steps {args.march_steps}, grid {args.grid}^3, views {args.size}^2")
    print("| rays/step | sopt ms/step | sopt rays/s | PyTorch ms/step | PyTorch rays/s | sopt / PyTorch |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        t = (f"{r['torch_ms']:.2f} | {r['torch_rays_s']:.3g} | {r['ratio']:.1f}x" if "ratio" in r else "- | - | -")
        print(f"| {r['rays']} | {r['sopt_ms']:.2f} | {r['sopt_rays_s']:.3g} | {t} |")


if __name__ == "__main__":
    main()
