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
* with ``--floor``, ``floor+torch-adam``: the torch-Adam loop with the TorchModule replaced by a module of the same
  parameters whose call does no work (zeros made once, through a torch.autograd.Function): what the loop costs
  torch itself, the least any torch binding of the network could take in an eager loop.

With ``--cuda-graph``, also ``torch+torch-adam+graph``: the torch-Adam step (``capturable=True``) captured once
in a CUDA graph (``torch.cuda.graph``) and replayed, which works only if every sopt submission in the step is
capturable (CUDA launches and device copies on torch's stream, nothing the host reads or waits for); if the
capture fails, the row says why. (sopt's Adam keeps its step count and arena side on the host, so a replay would
repeat one step: it is not captured.)

ms/step is wall clock over the timed steps after warm-up, the GPU synchronised at both ends; the ratio is each
row over ``native`` (issue 22's target: <= 1.15). ``host ms`` is the time the Python step() call itself takes
(no synchronisation): near ms/step, the loop is host-bound (Python and launch overhead); well below, GPU-bound.
Also prints the final loss of each (they train the same network from the same start, so they should be close).

Run on the GPU machine: python3 benchmarks/torch_interop.py [--steps 300] [--warmup 30] [--batches 14,18]
[--cuda-graph] [--json out.json]
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
from sopt.runtime import device as dev
from sopt.data.image import generated_image, pixel_coordinates
from sopt.losses import MSELoss
from sopt.nn import FullyFusedMLP, HashGridEncoding, Sequential
from sopt.nn.vjp import forward_numpy
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


def timed(step: Callable[[], Any], sync: Callable[[], None], steps: int, warmup: int) -> tuple[float, float]:
    """(wall seconds per step, GPU synchronised at both ends; mean seconds the step() call itself took)."""
    for _ in range(warmup):
        step()
    sync()
    host = 0.0
    t = time.perf_counter()
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        host += time.perf_counter() - t0
    sync()
    return (time.perf_counter() - t) / steps, host / steps


def run_native(kind: str, coords: np.ndarray, targets: np.ndarray, batch: int, steps: int, warmup: int) -> dict:
    model = network(kind)
    trainer = Trainer(model, MSELoss(), Adam(model.parameters(), lr=1e-2), BatchSampler(coords, targets, batch, seed=0),
                      progress=False, log_every=10**9)
    per_step, host = timed(trainer.train_step, dev.synchronize, steps, warmup)
    loss = float(trainer.train_step().item())
    return {"variant": "native", "ms_per_step": per_step * 1e3, "host_ms_per_step": host * 1e3, "final_loss": loss}


class _FloorCall(torch.autograd.Function):
    """The torch side of a TorchModule call and nothing else: an output and gradients for the input and every
    parameter (zeros made once, so no GPU work), through torch's autograd as a TorchModule's call goes."""

    @staticmethod
    def forward(ctx: Any, owner: "FloorModule", x: torch.Tensor, *params: torch.Tensor) -> torch.Tensor:
        ctx.owner = owner
        return owner.out

    @staticmethod
    def backward(ctx: Any, gy: torch.Tensor) -> tuple[Any, ...]:
        return (None, ctx.owner.gx, *ctx.owner.gparams)


class FloorModule(torch.nn.Module):
    """A TorchModule's parameters (same names and shapes) behind :class:`_FloorCall`: what the torch loop costs
    with sopt's part taking no time at all (issue 22's floor for any torch binding)."""

    def __init__(self, like: torch.nn.Module, batch: int, in_features: int, out_features: int) -> None:
        super().__init__()
        self.names = [name for name, _ in like.named_parameters()]
        self.params = torch.nn.ParameterList([torch.nn.Parameter(p.detach().clone()) for p in like.parameters()])
        device = self.params[0].device
        self.out = torch.zeros((batch, out_features), device=device)
        self.gx = torch.zeros((batch, in_features), device=device)
        self.gparams = [torch.zeros_like(p) for p in self.params]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _FloorCall.apply(self, x, *self.params)


def run_torch_loop(kind: str, optimiser: str, coords: torch.Tensor, targets: torch.Tensor, batch: int, steps: int,
                   warmup: int, floor: bool = False) -> dict:
    """The torch loop over ``TorchModule(network(kind))``; with ``floor``, over a :class:`FloorModule` of the same
    parameters instead (torch's own cost of the loop)."""
    net = sopt.torch.TorchModule(network(kind))
    if floor:
        net = FloorModule(net, batch, coords.shape[1], targets.shape[1])
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

    per_step, host = timed(step, torch.cuda.synchronize, steps, warmup)
    return {"variant": f"{'floor' if floor else 'torch'}+{optimiser}-adam", "ms_per_step": per_step * 1e3, "host_ms_per_step": host * 1e3,
            "final_loss": float(last[0].item())}


def run_torch_graph(kind: str, coords: torch.Tensor, targets: torch.Tensor, batch: int, steps: int,
                    warmup: int) -> dict:
    """The torch+torch-adam loop captured in one CUDA graph and replayed (see the module docstring)."""
    variant = "torch+torch-adam+graph"
    net = sopt.torch.TorchModule(network(kind))
    opt = torch.optim.Adam(net.parameters(), lr=1e-2, capturable=True)
    torch.cuda.manual_seed(0)
    static_loss = torch.zeros((), device=coords.device)

    def step() -> None:
        rows = torch.randint(0, coords.shape[0], (batch,), device=coords.device)
        loss = torch.nn.functional.mse_loss(net(coords[rows]), targets[rows])
        opt.zero_grad(set_to_none=False)
        loss.backward()
        opt.step()
        static_loss.copy_(loss.detach())

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):   # warm-up off the default stream, as torch.cuda.graph asks
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            step()
        torch.cuda.synchronize()
    except Exception as exc:   # noqa: BLE001 (reported in the row: which call could not be captured)
        torch.cuda.synchronize()
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return {"variant": variant, "ms_per_step": float("nan"), "host_ms_per_step": float("nan"),
                "final_loss": float("nan"), "error": f"capture failed: {type(exc).__name__}: {reason}"}
    probe = slice(0, coords.shape[0], max(1, coords.shape[0] // 4096))
    probe_x, probe_y = coords[probe].cpu().numpy(), targets[probe].cpu().numpy()

    def probe_loss() -> float:
        """The loss on fixed pixels by sopt's own forward (not through TorchModule, whose pooled arrays the graph
        holds): what the replays' updates did to the network."""
        return float(np.mean((forward_numpy(net.sopt_module, probe_x) - probe_y) ** 2))

    before = probe_loss()
    per_step, host = timed(graph.replay, torch.cuda.synchronize, steps, warmup)
    after = probe_loss()
    del graph
    row = {"variant": variant, "ms_per_step": per_step * 1e3, "host_ms_per_step": host * 1e3, "final_loss": after}
    if not after < 0.8 * before:   # the replays did not train: some of the step was not captured as it ran
        row["error"] = f"replays do not train (probe loss {before:.5f} -> {after:.5f})"
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--batches", default="14,18", help="log2 batch sizes, comma-separated")
    parser.add_argument("--networks", default="fused,hashgrid")
    parser.add_argument("--json", help="also write the rows to this file")
    parser.add_argument("--cuda-graph", action="store_true",
                        help="also time the torch-Adam step captured in a CUDA graph (run it separately: a failed "
                             "capture may leave the CUDA context unusable)")
    parser.add_argument("--floor", action="store_true",
                        help="also time the torch loop with sopt's part replaced by nothing (FloorModule: the same "
                             "parameters, zero outputs and gradients made once): torch's own cost per step")
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
            if args.floor:
                results.append(run_torch_loop(kind, "torch", coords_t, targets_t, batch, args.steps, args.warmup,
                                              floor=True))
            if args.cuda_graph:
                results.append(run_torch_graph(kind, coords_t, targets_t, batch, args.steps, args.warmup))
            for r in results:
                r.update(network=kind, batch=f"2^{log2}", ratio=r["ms_per_step"] / native["ms_per_step"])
                rows.append(r)
                print(f"{kind:9s} 2^{log2}  {r['variant']:22s} {r['ms_per_step']:8.3f} ms/step  "
                      f"(host {r['host_ms_per_step']:7.3f} ms)  x{r['ratio']:.3f} of native  "
                      f"final loss {r['final_loss']:.5f}" + (f"  [{r['error']}]" if "error" in r else ""), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
