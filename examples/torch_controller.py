"""A torch MLP controller trained through a sopt SpringSystem rollout (sopt.torch.rollout).

A four-particle mass-spring "worm" on the ground with two actuated springs; a torch MLP maps a clock signal (the
sin/cos of a few gait phases at each step) to the two actuations, so the whole (T, 2) control sequence is one
torch tensor. The rollout runs in sopt (memory-bounded: ``budget`` states at most, the rest recomputed), and its
adjoint hands torch the gradient of the distance walked with respect to every control, which torch's autograd
carries into the MLP's weights. torch.optim.Adam does the rest.

Run: python examples/torch_controller.py [--iterations N] [--steps T]
"""

from __future__ import annotations

import argparse

import numpy as np
import torch

import sopt
import sopt.torch
from sopt.sim import SpringSystem


def worm() -> SpringSystem:
    """Four particles in a diamond chain on the ground (y = 0), springs between neighbours and across."""
    x0 = np.array([[0.0, 0.05], [0.1, 0.15], [0.2, 0.05], [0.3, 0.15]], np.float32)
    springs = [[0, 1], [1, 2], [2, 3], [0, 2], [1, 3]]
    return SpringSystem(x0, springs, stiffness=sopt.Parameter([300.0], name="stiffness"), damping=0.5, mass=0.05,
                        ground=0.0, pinned=[], actuators=[3, 4], actuation_strength=0.3, dt=2e-3)


class Controller(torch.nn.Module):
    """Clock features (sin, cos of 3 gait frequencies) -> 2 actuations in (-1, 1)."""

    def __init__(self, steps: int, dt: float) -> None:
        super().__init__()
        t = torch.arange(steps, dtype=torch.float32)[:, None] * dt
        freqs = torch.tensor([2.0, 4.0, 8.0]) * 2 * torch.pi
        self.register_buffer("clock", torch.cat([torch.sin(t * freqs), torch.cos(t * freqs)], 1))
        self.net = torch.nn.Sequential(torch.nn.Linear(6, 32), torch.nn.Tanh(), torch.nn.Linear(32, 2), torch.nn.Tanh())

    def forward(self) -> torch.Tensor:
        return self.net(self.clock)


def main(iterations: int = 40, steps: int = 200, quiet: bool = False) -> dict[str, float]:
    torch.manual_seed(0)
    device = sopt.torch.placement.torch_device()
    sim = worm()
    policy = Controller(steps, sim.dt).to(device)
    opt = torch.optim.Adam(policy.parameters(), lr=2e-2)
    distances = []
    for it in range(iterations):
        out = sopt.torch.rollout(sim, steps, controls=policy(), budget=2 * int(np.sqrt(steps)) + 8)
        distance = out.state["x"][:, 0].mean() - 0.15        # how far the centre moved along +x (m)
        opt.zero_grad()
        (-distance).backward()
        opt.step()
        distances.append(distance.item())
        if not quiet and it % 10 == 0:
            print(f"iteration {it}: distance {distances[-1] * 100:.2f} cm")
    if not quiet:
        print(f"distance after {iterations} iterations: {distances[-1] * 100:.2f} cm (first {distances[0] * 100:.2f})")
    return {"first": distances[0], "last": distances[-1], "best": max(distances)}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=40)
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()
    main(args.iterations, args.steps)
