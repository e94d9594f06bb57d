"""A user's Slang function inside a torch model: a torch MLP predicts a damped oscillation's amplitude, damping,
frequency and phase from a condition vector, and a Slang function (sopt.load_module) renders the waveform; torch
autograd differentiates through it (SlangPy's .bwds) into the MLP.

Run: python examples/torch_slang_layer.py [--steps N]
"""

from __future__ import annotations

import argparse
import pathlib

import torch

import sopt
import sopt.torch  # noqa: F401  (sopt.load_module's functions then take torch tensors)

SLANG = pathlib.Path(__file__).with_name("torch_slang_layer.slang")


class WaveModel(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(2, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4))
        self.slang = sopt.load_module(SLANG)

    def forward(self, cond: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """cond (B, 2), t (T,) -> waveforms (B, T)."""
        a, d, w, phi = self.net(cond).unbind(1)
        d, w = torch.nn.functional.softplus(d), 3.0 + torch.nn.functional.softplus(w)
        rows, cols = cond.shape[0], t.shape[0]
        expand = lambda v: v[:, None].expand(rows, cols).contiguous()   # noqa: E731
        return self.slang.damped_wave(expand(a), expand(d), expand(w), expand(phi), t[None, :].expand(rows, cols).contiguous())


def truth(cond: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    a, d = 1.0 + 0.5 * cond[:, :1], 0.5 + cond[:, 1:].abs()
    return a * torch.exp(-d * t) * torch.sin((4.0 + cond[:, :1]) * t)


def main(steps: int = 150, quiet: bool = False) -> dict[str, float]:
    torch.manual_seed(0)
    device = sopt.torch.placement.torch_device()
    model = WaveModel().to(device)
    t = torch.linspace(0, 3, 48, device=device)
    opt = torch.optim.Adam(model.net.parameters(), lr=1e-2)
    losses = []
    for step in range(steps):
        cond = torch.rand(16, 2, device=device) * 2 - 1
        loss = torch.nn.functional.mse_loss(model(cond, t), truth(cond, t))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if not quiet and step % 50 == 0:
            print(f"step {step}: loss {loss.item():.5f}")
    if not quiet:
        print(f"loss {losses[0]:.4f} -> {losses[-1]:.4f} after {steps} steps")
    return {"first": losses[0], "last": losses[-1]}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=150)
    main(parser.parse_args().steps)
