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

``--table issue21``: issue 21's comparison instead, one training step of the same network in tiny-cuda-nn (classic
kernels and JIT fusion, with ``--tcnn KIT_DIR``), sopt and PyTorch eager, timed in this one run, for each network,
input dimension (``--dims 2,3``) and batch (``--batches 14,18,20``):

* ``hashgrid``: hash grid 16 levels x 2 features, table 2^19, base resolution 16, per-level scale 1.5 ->
  FullyFusedMLP 64 x 2 hidden ReLU -> 3 (sopt: ``Sequential(HashGridEncoding, FullyFusedMLP)``; PyTorch: the same
  hash grid written with tensor ops, ``torch_hashgrid_encode``, and ``nn.Linear`` layers);
* ``frequency``: frequency encoding, 12 frequencies -> the same MLP (sopt: ``FullyFusedMLP`` with the encoding
  fused; 3D: 72 features, whose first layer the fused kernels run in two chunks of columns; an input beyond
  their 512 features would be timed on the ``sopt.nn.MLP`` layers instead, labelled so).

``--cuda-graph on`` (or ``both``) times sopt's steps replayed from a CUDA graph (``Trainer(cuda_graph=True)``: two
steps per launch, as tiny-cuda-nn's classic kernels replay a graph per step), rows labelled ``...-graph``.

``--mlp fp16`` (or ``both``, each sopt network twice) builds sopt's MLP as ``TensorCoreMLP`` (CUDA only: half
operands on tensor cores, float32 accumulation and master weights, as tiny-cuda-nn's FullyFusedMLP) instead of
the float32 ``FullyFusedMLP`` (``--mlp fp32``, the default): ``Sequential(HashGridEncoding, TensorCoreMLP)`` and
``TensorCoreMLP`` with the frequency encoding fused (as FullyFusedMLP fuses it; up to 80 encoded inputs), the hash
grid's table gradient summed in float16 (``gradient_precision="float16"``, as tiny-cuda-nn's fp16 gradients; float32
with ``--deterministic``). Its rows are labelled ``hashgrid-fp16`` / ``frequency-fp16``; both start from the
same initial weights (same seed), and their tiny-cuda-nn and PyTorch columns are the network's measurements (PyTorch
runs once per network, dims and batch).

PyTorch starts from sopt's initial table and weights, so both train the same function (their PSNR agree when the
networks are the same). Data: 2D, the generated ``--size`` image (PSNR over every pixel); 3D, 2^21 random points
of the unit cube with the smooth 3-channel target ``cube_target`` (PSNR over 2^16 other points). tiny-cuda-nn's
benchmark (benchmarks/tcnn) trains on uniform random inputs and targets, pre-generated on the GPU (timing only, no
PSNR) and reports GPU-timeline ms/step (CUDA events); sopt's and PyTorch's ms/step are wall clock with the GPU
synchronised at both ends and include drawing each batch from the data set on the GPU: the median of 5 rounds'
means (``time_steps_budget``). Timed steps per batch, over the rounds together: ``--steps`` or ``issue21_steps``
(1000 at 2^14, 256 at 2^18, 100 at 2^20), after ``--warmup`` untimed ones. The
table gives ms/step and the ratios sopt / tiny-cuda-nn (above 1: sopt slower) and PyTorch / sopt.

Run: SOPT_DEVICE=cuda python3 benchmarks/neural_field.py [--steps 1000] [--batches 14,18] [--quick] [--deterministic]
     SOPT_DEVICE=cuda python3 benchmarks/neural_field.py --table issue21 --tcnn .tcnn-kit [--dims 2,3] [--mlp both]
"""

from __future__ import annotations

import argparse
import json
import math
import pathlib
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import slangpy as spy

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))   # this checkout's sopt, not an installed one

from sopt.runtime import device as dev
from sopt.data.image import generated_image, pixel_coordinates
from sopt.losses import MSELoss
from sopt.nn import MLP, FrequencyEncoding, HashGridEncoding, Sequential
from sopt.nn.fully_fused_mlp import FullyFusedMLP
from sopt.nn.hashgrid import GridLevel
from sopt.nn.tensor_core_mlp import TensorCoreMLP
from sopt.optim import Adam
from sopt.train import BatchSampler, Trainer

from benchmarks.tcnn import runner as tcnn_runner

N_FREQS = 16
HIDDEN, LAYERS = 64, 3
# the hash grid of the "hashgrid" variant and of issue 21's table (tiny-cuda-nn's HashGrid keys in the docstring)
HASHGRID = {"n_levels": 16, "n_features": 2, "log2_table_size": 19, "base_resolution": 16, "per_level_scale": 1.5}
HASHGRID_PRIMES = (1, 2654435761, 805459861, 3674653429)   # tcnn's CoherentPrime hash (sopt's, slang_lib/nn/hashgrid)
# issue 21's table: encoding -> FullyFusedMLP 64 x 2 hidden ReLU -> 3, frequency encoding with 12 frequencies
ISSUE21_NETWORKS = ("hashgrid", "frequency")
ISSUE21_N_FREQS, ISSUE21_LAYERS = 12, 2
# --mlp: sopt's MLP in float32 (FullyFusedMLP) or half precision on tensor cores (TensorCoreMLP, CUDA only)
MLP_PRECISIONS = ("fp32", "fp16")
CUBE_POINTS, CUBE_EVAL_POINTS = 1 << 21, 1 << 16


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
        enc = HashGridEncoding(2, **HASHGRID, seed=0, deterministic=det)
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


def torch_network(torch: Any, in_features: int = 2 * 2 * N_FREQS, hidden_layers: int = LAYERS) -> Any:
    """``nn.Sequential`` of ``hidden_layers`` x (Linear to HIDDEN, ReLU), then Linear to 3."""
    layers: list[Any] = []
    width = in_features
    for _ in range(hidden_layers):
        layers += [torch.nn.Linear(width, HIDDEN), torch.nn.ReLU()]
        width = HIDDEN
    layers.append(torch.nn.Linear(width, 3))
    return torch.nn.Sequential(*layers)


def torch_encode(torch: Any, x: Any, n_freqs: int = N_FREQS) -> Any:
    """tcnn's frequency encoding of ``x (N, D)``: ``(N, D * 2 * n_freqs)``, ``[d, k, sin/cos]`` =
    sin/cos(2^k pi x_d)."""
    freqs = (2.0 ** torch.arange(n_freqs, device=x.device, dtype=x.dtype)) * math.pi
    arg = x[:, :, None] * freqs                                  # (N, D, F)
    return torch.stack([torch.sin(arg), torch.cos(arg)], dim=-1).reshape(x.shape[0], -1)  # (d, k, sin/cos)


def torch_hashgrid_encode(torch: Any, x: Any, table: Any, levels: list[GridLevel]) -> Any:
    """sopt's (and tcnn's) multiresolution hash encoding written with PyTorch tensor ops, differentiable in ``table``:
    ``x (N, D)`` in [0, 1], ``table (rows, F)`` -> ``(N, L * F)`` level-major. Level l is read at ``pos = x *
    scale_l + 0.5`` by D-linear interpolation of the 2^D cell corners, each corner's row ``offset_l + index %
    size_l`` with index dense (``sum_d c_d resolution_l^d``) or tcnn's hash (``xor_d c_d prime_d``) in uint32
    arithmetic, as ``HashGridEncoding`` (``levels``: its ``grid_levels``)."""
    n, dims = x.shape
    dev = x.device
    scale = torch.tensor([lv.scale for lv in levels], dtype=torch.float32, device=dev)            # (L,)
    size = torch.tensor([lv.size for lv in levels], dtype=torch.int64, device=dev)
    offset = torch.tensor([lv.offset for lv in levels], dtype=torch.int64, device=dev)
    hashed = torch.tensor([lv.hashed for lv in levels], dtype=torch.bool, device=dev)
    stride = torch.tensor([[lv.resolution**d for d in range(dims)] for lv in levels], dtype=torch.int64,
                          device=dev)                                                            # (L, D)
    primes = torch.tensor(HASHGRID_PRIMES[:dims], dtype=torch.int64, device=dev)
    pos = x[:, None, :] * scale[None, :, None] + 0.5                                             # (N, L, D)
    floor = torch.floor(pos)
    t = pos - floor
    cell = floor.to(torch.int64)
    out = None
    for c in range(1 << dims):
        upper = torch.tensor([(c >> d) & 1 for d in range(dims)], dtype=torch.bool, device=dev)  # (D,)
        corner = cell + upper.to(torch.int64)
        weight = torch.where(upper, t, 1.0 - t).prod(dim=-1)                                     # (N, L)
        mixed = (corner * primes) & 0xFFFFFFFF                                                   # uint32 products
        hash_index = mixed[..., 0]
        for d in range(1, dims):
            hash_index = hash_index ^ mixed[..., d]
        dense_index = ((corner * stride).sum(dim=-1)) & 0xFFFFFFFF
        row = torch.where(hashed, hash_index, dense_index) % size + offset                       # (N, L)
        term = weight[..., None] * table[row]                                                    # (N, L, F)
        out = term if out is None else out + term
    return out.reshape(n, -1)


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


def cube_target(points: np.ndarray) -> np.ndarray:
    """Issue 21's 3D training target, smooth and analytic: ``points (N, 3)`` -> ``(N, 3)`` in [0, 1], channel c =
    0.5 + 0.5 * mean_j sin(2 pi k_j . p + phase_cj) over four integer wave vectors k_j (up to 3 periods along an
    axis, so the field has detail for a hash grid to learn yet stays band-limited)."""
    waves = np.array([[1, 2, 0], [0, 3, 1], [2, 0, 3], [3, 2, 2]], np.float64)    # (4, 3) periods per unit
    phases = np.array([[0.0, 1.3, 2.1, 0.7], [0.9, 2.6, 0.4, 1.8], [1.7, 0.2, 2.9, 1.1]])   # (3 channels, 4)
    arg = 2 * np.pi * (np.asarray(points, np.float64) @ waves.T)                  # (N, 4)
    return (0.5 + 0.5 * np.sin(arg[:, None, :] + phases[None]).mean(axis=-1)).astype(np.float32)


@dataclass(frozen=True)
class FieldData:
    """Training set (``coords``, ``targets``) and evaluation set of one input dimension; values (N, 3) in [0, 1]."""
    coords: np.ndarray
    targets: np.ndarray
    eval_coords: np.ndarray
    eval_targets: np.ndarray
    what: str


def field_data(dims: int, size: int) -> FieldData:
    """2D: the generated ``size`` x ``size`` image, trained and evaluated on every pixel; 3D: ``CUBE_POINTS``
    uniform random points of the unit cube (seed 0) with ``cube_target``, evaluated on ``CUBE_EVAL_POINTS`` others
    (seed 1)."""
    if dims == 2:
        image = generated_image(size).reshape(-1, 3)
        coords = pixel_coordinates(size, size)
        return FieldData(coords, image, coords, image, f"{size}x{size} generated image")
    if dims == 3:
        points = np.random.default_rng(0).random((CUBE_POINTS, 3), dtype=np.float32)
        held_out = np.random.default_rng(1).random((CUBE_EVAL_POINTS, 3), dtype=np.float32)
        return FieldData(points, cube_target(points), held_out, cube_target(held_out),
                         f"{CUBE_POINTS} random points of the unit cube, cube_target")
    raise ValueError(f"dims must be 2 or 3, got {dims!r}")


def issue21_steps(batch: int) -> int:
    """Timed steps at ``batch`` for issue 21's table: ~2^26 samples, between 100 and 1000 steps."""
    return min(1000, max(100, (1 << 26) // batch))


@dataclass
class SoptField:
    """One sopt network of issue 21's table and the arrays PyTorch starts from: ``table`` (hash grid) or None, and
    ``layers`` [(W (out, in), b (out,))] of the MLP."""
    label: str
    model: Any
    table: np.ndarray | None
    layers: list[tuple[np.ndarray, np.ndarray]]


def mlp_layers(state: dict[str, np.ndarray]) -> list[tuple[np.ndarray, np.ndarray]]:
    """(weight, bias) per layer from an MLP's or FullyFusedMLP's ``state_dict`` (keys ``"{k}.weight"``,
    ``"{k}.bias"``), in layer order."""
    ks = sorted({int(key.split(".")[0]) for key in state})
    return [(np.asarray(state[f"{k}.weight"]), np.asarray(state[f"{k}.bias"])) for k in ks]


def network_label(network: str, mlp: str, graph: bool = False) -> str:
    """The table's name of issue 21's ``network`` with sopt's MLP in precision ``mlp``, its steps replayed from a
    CUDA graph or not: ``"hashgrid"`` (fp32), ``"hashgrid-fp16"``, ``"hashgrid-fp16-graph"``."""
    return (network if mlp == "fp32" else f"{network}-{mlp}") + ("-graph" if graph else "")


def base_network(label: str) -> str:
    """Issue 21's network of a table label (``network_label``'s inverse): what tiny-cuda-nn and PyTorch ran."""
    label = label.removesuffix("-graph")
    for mlp in MLP_PRECISIONS[1:]:
        label = label.removesuffix(f"-{mlp}")
    return label


def sopt_field_network(network: str, dims: int, seed: int = 0, deterministic: bool = False,
                       mlp: str = "fp32") -> SoptField:
    """Issue 21's ``network`` ("hashgrid" or "frequency") for ``dims`` inputs, built with sopt (see the module
    docstring); the frequency network falls back to the ``sopt.nn.MLP`` layers where FullyFusedMLP refuses its
    encoded width. ``deterministic``: every layer sums its gradients in a fixed order. ``mlp``: "fp32"
    (FullyFusedMLP) or "fp16" (TensorCoreMLP: the frequency encoding fused into it, the hash grid in a Sequential
    before it; CUDA only, ValueError for an encoded width above its 80 inputs); the same initial weights either
    way."""
    if mlp not in MLP_PRECISIONS:
        raise ValueError(f"mlp must be one of {MLP_PRECISIONS}, got {mlp!r}")
    if network not in ISSUE21_NETWORKS:
        raise ValueError(f"network must be one of {ISSUE21_NETWORKS}, got {network!r}")
    if mlp == "fp16":
        if network == "frequency":   # fused into the first layer, as FullyFusedMLP fuses it
            net = TensorCoreMLP(dims, 3, HIDDEN, ISSUE21_LAYERS, activation="relu", seed=seed,
                                encoding={"otype": "Frequency", "n_frequencies": ISSUE21_N_FREQS},
                                deterministic=deterministic)
            return SoptField("sopt fp16", net, None, mlp_layers(net.state_dict()))
        # float16 table-gradient sums as tiny-cuda-nn's fp16 gradients (float32 where deterministic)
        enc = HashGridEncoding(dims, **HASHGRID, seed=seed, deterministic=deterministic,
                               gradient_precision="float32" if deterministic else "float16")
        net = TensorCoreMLP(enc.out_features, 3, HIDDEN, ISSUE21_LAYERS, activation="relu", seed=seed,
                            deterministic=deterministic)
        return SoptField("sopt fp16", Sequential(enc, net), enc.state_dict()["table"], mlp_layers(net.state_dict()))
    if network == "hashgrid":
        enc = HashGridEncoding(dims, **HASHGRID, seed=seed, deterministic=deterministic)
        net = FullyFusedMLP(enc.out_features, 3, HIDDEN, ISSUE21_LAYERS, activation="relu", seed=seed,
                            deterministic=deterministic)
        return SoptField("sopt", Sequential(enc, net), enc.state_dict()["table"], mlp_layers(net.state_dict()))
    encoding = {"otype": "Frequency", "n_frequencies": ISSUE21_N_FREQS}
    try:
        model = FullyFusedMLP(dims, 3, HIDDEN, ISSUE21_LAYERS, activation="relu", encoding=encoding, seed=seed,
                              deterministic=deterministic)
        label = "sopt"
    except ValueError as e:   # the fused kernels take at most 512 input features
        print(f"  sopt frequency {dims}D: FullyFusedMLP refuses it ({e}); timing sopt.nn.MLP's layers instead")
        model = MLP(dims, 3, HIDDEN, ISSUE21_LAYERS, activation="relu", encoding=encoding, seed=seed,
                    deterministic=deterministic)
        label = "sopt layers"
    return SoptField(label, model, None, mlp_layers(model.state_dict()))


def time_steps_budget(step: Callable[[], Any], sync: Callable[[], None], steps: int, warmup: int,
                      max_seconds: float, rounds: int = 5) -> tuple[float, int]:
    """(seconds per step, steps timed): ``steps`` timed steps after ``warmup`` untimed ones and 5 untimed probe
    steps, fewer (but at least 10) where the probe says ``steps`` would take longer than ``max_seconds``, timed in
    ``rounds`` rounds; the median round's mean. A round's mean is a pipelined step's cost (the host records step
    k + 1 while the GPU runs step k); the median keeps a burst of host interference on the lent machines out of it
    (a host-bound 2^14 step read 0.13 ms in one run and 0.23 ms in another, its code unchanged)."""
    for _ in range(warmup):
        step()
    sync()
    t = time.perf_counter()
    for _ in range(5):
        step()
    sync()
    probe = (time.perf_counter() - t) / 5
    n = max(1, min(steps, max(10, int(max_seconds / max(probe, 1e-9)))) // rounds)
    per_round = sorted(time_steps(step, sync, n, 0) for _ in range(rounds))
    return per_round[len(per_round) // 2], n * rounds


def run_sopt_field(network: str, dims: int, data: FieldData, batch: int, steps: int, warmup: int,
                   max_seconds: float, seed: int = 0, mlp: str = "fp32",
                   graph: bool = False) -> tuple[dict[str, Any], SoptField]:
    """Times sopt's training step of issue 21's ``network`` with its MLP in precision ``mlp``, recorded every step
    or (``graph``) replayed from a CUDA graph (``Trainer(cuda_graph=True)``, timed two steps per call, as one
    replay runs them); the row (its ``network`` is ``network_label(network, mlp, graph)``) and the network built
    (PyTorch starts from its initial arrays, read before training)."""
    field = sopt_field_network(network, dims, seed, mlp=mlp)
    opt = Adam(field.model.parameters(), lr=1e-2)
    sampler = BatchSampler(data.coords, data.targets, batch_size=batch, seed=seed)
    trainer = Trainer(field.model, MSELoss(), opt, sampler, progress=False, log_every=10**9, cuda_graph=graph)
    if graph:
        trainer.train_steps(5)   # a recorded step, then the capture (a period checked, a period captured)
        per_pair, timed = time_steps_budget(lambda: trainer.train_steps(2), dev.synchronize, -(-steps // 2),
                                            -(-warmup // 2), max_seconds)
        per_step, timed = per_pair / 2, 2 * timed
    else:
        per_step, timed = time_steps_budget(trainer.train_step, dev.synchronize, steps, warmup, max_seconds)
    label = field.label + (" graph" if graph else "")
    row = {"framework": label, "network": network_label(network, mlp, graph), "dims": dims, "batch": batch,
           "ms_per_step": per_step * 1e3, "timed_steps": timed, "trained_steps": trainer.step,
           "psnr": sopt_eval_psnr(field.model, data.eval_coords, data.eval_targets), "seed": seed}
    return row, field


def torch_field_network(torch: Any, network: str, dims: int, field: SoptField) -> tuple[Any, Callable[[Any], Any]]:
    """PyTorch's twin of ``field`` (same initial table and weights): (module holding the parameters, forward)."""
    dev_t = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    in_features = field.layers[0][0].shape[1]
    mlp = torch_network(torch, in_features, ISSUE21_LAYERS).to(dev_t)
    linears = [m for m in mlp if isinstance(m, torch.nn.Linear)]
    with torch.no_grad():
        for lin, (w, b) in zip(linears, field.layers, strict=True):
            lin.weight.copy_(torch.from_numpy(w))
            lin.bias.copy_(torch.from_numpy(b))
    if network == "hashgrid":
        enc = field.model[0]
        table = torch.nn.Parameter(torch.from_numpy(np.ascontiguousarray(field.table)).to(dev_t))
        holder = torch.nn.ModuleDict({"mlp": mlp})
        holder.register_parameter("table", table)
        levels = enc.levels
        return holder, lambda x: mlp(torch_hashgrid_encode(torch, x, table, levels))
    return mlp, lambda x: mlp(torch_encode(torch, x, ISSUE21_N_FREQS))


def run_torch_field(torch: Any, network: str, dims: int, data: FieldData, field: SoptField, batch: int, steps: int,
                    warmup: int, max_seconds: float, seed: int = 0) -> dict[str, Any]:
    """Times PyTorch eager's training step of issue 21's ``network``, started from ``field``'s initial arrays."""
    dev_t = torch.device("cuda")
    module, forward = torch_field_network(torch, network, dims, field)
    X = torch.tensor(data.coords, device=dev_t)
    Y = torch.tensor(data.targets, device=dev_t)
    opt = torch.optim.Adam(module.parameters(), lr=1e-2)
    gen = torch.Generator(device=dev_t)
    gen.manual_seed(seed)
    trained = 0

    def step() -> None:
        nonlocal trained
        idx = torch.randint(0, X.shape[0], (batch,), device=dev_t, generator=gen)
        loss = torch.nn.functional.mse_loss(forward(X[idx]), Y[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        trained += 1

    per_step, timed = time_steps_budget(step, torch.cuda.synchronize, steps, warmup, max_seconds)
    with torch.no_grad():
        E = torch.tensor(data.eval_coords, device=dev_t)
        T = torch.tensor(data.eval_targets, device=dev_t)
        pred = torch.cat([forward(E[s:s + 65536]) for s in range(0, E.shape[0], 65536)])
        mse = float(torch.mean((pred.clamp(0, 1) - T) ** 2))
    return {"framework": "pytorch eager", "network": network, "dims": dims, "batch": batch,
            "ms_per_step": per_step * 1e3, "timed_steps": timed, "trained_steps": trained, "psnr": psnr(mse),
            "seed": seed}


def issue21_table(rows: list[dict[str, Any]], tcnn_rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One entry per (network label, dims, batch) that sopt, PyTorch or tiny-cuda-nn timed, in that order of first
    appearance: ``tcnn``, ``tcnn_jit``, ``sopt``, ``torch`` ms/step (None where not timed; a tcnn JIT run that fell
    back to the classic kernels counts as not timed), ``sopt_label``, PSNRs and trained steps, and the ratios
    ``sopt_vs_tcnn`` = sopt / tcnn, ``sopt_vs_tcnn_jit`` = sopt / tcnn JIT (above 1: sopt slower) and
    ``torch_vs_sopt`` = torch / sopt (above 1: sopt faster). A sopt row's network is a label (``network_label``:
    ``"hashgrid-fp16"`` for ``--mlp fp16``); PyTorch's and tiny-cuda-nn's rows name the base network and fill
    every entry of it (both precisions' entries compare against the same measurements)."""
    table: dict[tuple[str, int, int], dict[str, Any]] = {}

    def entry(network: str, dims: int, batch: int) -> dict[str, Any]:
        return table.setdefault((network, dims, batch), {
            "network": network, "dims": dims, "batch": batch, "tcnn": None, "tcnn_jit": None, "sopt": None,
            "sopt_label": None, "sopt_psnr": None, "sopt_steps": None, "torch": None, "torch_psnr": None,
            "torch_steps": None})

    def entries_of(network: str, dims: int, batch: int) -> list[dict[str, Any]]:
        """The entries of base ``network`` (every precision), one made for it when there is none."""
        found = [e for (label, d, b), e in table.items() if (base_network(label), d, b) == (network, dims, batch)]
        return found or [entry(network, dims, batch)]

    for r in rows:
        if r["framework"] == "pytorch eager":
            for e in entries_of(base_network(r["network"]), r["dims"], r["batch"]):
                e["torch"], e["torch_psnr"], e["torch_steps"] = r["ms_per_step"], r["psnr"], r.get("trained_steps")
        else:
            e = entry(r["network"], r["dims"], r["batch"])
            e["sopt"], e["sopt_label"], e["sopt_psnr"] = r["ms_per_step"], r["framework"], r["psnr"]
            e["sopt_steps"] = r.get("trained_steps")
    for r in tcnn_rows:
        if r["jit_failed"]:
            continue
        for e in entries_of(r["model"], r["dims"], r["batch"]):
            e["tcnn_jit" if r["jit"] else "tcnn"] = r["mean_ms"]

    def ratio(a: float | None, b: float | None) -> float | None:
        return a / b if a is not None and b is not None and b > 0 else None

    for e in table.values():
        e["sopt_vs_tcnn"] = ratio(e["sopt"], e["tcnn"])
        e["sopt_vs_tcnn_jit"] = ratio(e["sopt"], e["tcnn_jit"])
        e["torch_vs_sopt"] = ratio(e["torch"], e["sopt"])
    return list(table.values())


def format_issue21_table(table: list[dict[str, Any]]) -> str:
    """Markdown table of ``issue21_table``'s entries: ms per training step, ratios, PSNR in dB after the trained
    steps (sopt's, then PyTorch's where they differ) ("-": not run)."""
    def ms(v: float | None) -> str:
        return "-" if v is None else f"{v:.3f}"

    def x(v: float | None) -> str:
        return "-" if v is None else f"{v:.2f}x"

    def db(v: float | None) -> str:
        return "-" if v is None else f"{v:.2f}"

    lines = ["| network | dims | batch | tiny-cuda-nn | tiny-cuda-nn JIT | sopt | PyTorch eager | sopt / tcnn | "
             "sopt / tcnn JIT | PyTorch / sopt | sopt PSNR | PyTorch PSNR | steps |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for e in table:
        steps = "/".join(str(n) for n in dict.fromkeys((e["sopt_steps"], e["torch_steps"])) if n is not None) or "-"
        name = e["network"] + (" (sopt: MLP layers)" if e["sopt_label"] == "sopt layers" else "")
        lines.append(f"| {name} | {e['dims']}D | 2^{e['batch'].bit_length() - 1} | {ms(e['tcnn'])} | "
                     f"{ms(e['tcnn_jit'])} | {ms(e['sopt'])} | {ms(e['torch'])} | {x(e['sopt_vs_tcnn'])} | "
                     f"{x(e['sopt_vs_tcnn_jit'])} | {x(e['torch_vs_sopt'])} | {db(e['sopt_psnr'])} | "
                     f"{db(e['torch_psnr'])} | {steps} |")
    return "\n".join(lines)


def main_issue21(args: argparse.Namespace, torch: Any, has_torch: bool) -> None:
    """``--table issue21``: tiny-cuda-nn (with ``--tcnn``), then sopt and PyTorch, on issue 21's networks."""
    started = time.perf_counter()
    dims_list = [int(d) for d in args.dims.split(",")]
    networks = args.networks.split(",")
    mlps = list(MLP_PRECISIONS) if args.mlp == "both" else [args.mlp]
    graphs = {"off": [False], "on": [True], "both": [False, True]}[args.cuda_graph]
    batches = [1 << int(b) for b in args.batches.split(",")]
    steps = [args.steps if args.steps else issue21_steps(b) for b in batches]
    tcnn_note = tcnn_runner.unavailable() if args.tcnn else None
    print(f"issue 21 table: networks {', '.join(networks)}; sopt MLP {', '.join(mlps)}; dims {args.dims}; batches "
          f"{', '.join(f'2^{b.bit_length() - 1}' for b in batches)}; timed steps {steps} after {args.warmup} "
          f"warm-up; Adam lr 1e-2; at most {args.max_seconds:g} s of timed steps per sopt/PyTorch run")
    tcnn_rows: list[dict[str, Any]] = []
    if not args.tcnn:
        print("tiny-cuda-nn: not run (give --tcnn KIT_DIR; benchmarks/tcnn/README.md)")
    elif tcnn_note:
        print(f"tiny-cuda-nn: skipped, {tcnn_note}")
    else:
        print(f"tiny-cuda-nn: kit {args.tcnn}, build folder {args.tcnn_build_dir}")
        t = time.perf_counter()
        try:
            tcnn_rows = tcnn_runner.run_bench(args.tcnn, dims=dims_list, models=networks, batches=batches,
                                              steps=steps, warmup=args.warmup, build_dir=args.tcnn_build_dir)
            print(f"tiny-cuda-nn: {len(tcnn_rows)} runs in {time.perf_counter() - t:.0f} s (build included)")
        except RuntimeError as e:   # sopt's and PyTorch's timings are still worth having
            print(f"tiny-cuda-nn: FAILED after {time.perf_counter() - t:.0f} s, its columns stay empty: {e}")
    if not has_torch:
        print("PyTorch: not run (no torch with CUDA here)")
    rows: list[dict[str, Any]] = []
    for dims in dims_list:
        data = field_data(dims, args.size)
        print(f"{dims}D data: {data.what}")
        for network in networks:
            for batch, n_steps in zip(batches, steps):
                field = None   # the network PyTorch starts from: the first precision's (the same initial weights)
                for mlp, graph in [(m, g) for m in mlps for g in graphs]:
                    t = time.perf_counter()
                    try:
                        row, built = run_sopt_field(network, dims, data, batch, n_steps, args.warmup,
                                                    args.max_seconds, mlp=mlp, graph=graph)
                    except ValueError as e:   # TensorCoreMLP's 80 inputs
                        if mlp == "fp32":
                            raise
                        print(f"  sopt {network_label(network, mlp, graph)} {dims}D: not run ({e})", flush=True)
                        continue
                    field = field or built
                    rows.append(row)
                    print(f"  {row} ({time.perf_counter() - t:.1f} s)", flush=True)
                if has_torch and field is not None:
                    t = time.perf_counter()
                    rows.append(run_torch_field(torch, network, dims, data, field, batch, n_steps, args.warmup,
                                                args.max_seconds))
                    print(f"  {rows[-1]} ({time.perf_counter() - t:.1f} s)", flush=True)
                    torch.cuda.empty_cache()
    table = issue21_table(rows, tcnn_rows)
    print()
    print("ms per training step; sopt / tcnn above 1: sopt slower; PyTorch / sopt above 1: sopt faster; PSNR in dB "
          "after each run's steps (tiny-cuda-nn trains on random data: no PSNR)")
    print(format_issue21_table(table))
    print(f"whole run: {time.perf_counter() - started:.0f} s")
    if args.json:
        meta = {"sopt_device": dev.get_device().info.adapter_name, "sopt_backend": dev.device_kind(),
                "torch": f"{torch.__version__} on {torch.cuda.get_device_name()}" if has_torch else None,
                "args": vars(args)}
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "rows": rows, "tcnn_rows": tcnn_rows, "table": table}, f, indent=1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--table", choices=("image", "issue21"), default="image",
                    help="image (default): the variants below on the image; issue21: tiny-cuda-nn, sopt and PyTorch "
                         "on issue 21's networks (see the docstring)")
    ap.add_argument("--steps", type=int, default=None,
                    help="image: steps per run, warm-up included (default 1000); issue21: timed steps per run "
                         "(default: issue21_steps of the batch, 1000 at 2^14 .. 100 at 2^20)")
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--batches", default=None, help="log2 batch sizes (default 14,18; issue21: 14,18,20)")
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
    ap.add_argument("--dims", default="2,3", help="issue21: input dimensions, from 2,3 (default 2,3)")
    ap.add_argument("--networks", default=",".join(ISSUE21_NETWORKS),
                    help="issue21: networks, from hashgrid,frequency (default both)")
    ap.add_argument("--tcnn", metavar="KIT_DIR", default=None,
                    help="issue21: also build and time tiny-cuda-nn from this kit (benchmarks/tcnn/make-kit.sh); "
                         "skipped with a note where there is no NVIDIA GPU, nvcc or cmake")
    ap.add_argument("--tcnn-build-dir", default=tcnn_runner.DEFAULT_BUILD_DIR,
                    help=f"issue21: tiny-cuda-nn's build folder, reused when built (default "
                         f"{tcnn_runner.DEFAULT_BUILD_DIR})")
    ap.add_argument("--max-seconds", type=float, default=8.0,
                    help="issue21: at most this many seconds of timed steps per sopt or PyTorch run (fewer steps, "
                         "at least 10, for a slow one; default 8)")
    ap.add_argument("--mlp", choices=(*MLP_PRECISIONS, "both"), default="fp32",
                    help="issue21: sopt's MLP in float32 (FullyFusedMLP, the default), fp16 (TensorCoreMLP: half "
                         "operands on tensor cores, CUDA only) or both, rows labelled hashgrid / hashgrid-fp16")
    ap.add_argument("--cuda-graph", choices=("off", "on", "both"), default="off",
                    help="issue21: sopt's steps recorded every step (off, the default), replayed from a CUDA graph "
                         "(on: Trainer(cuda_graph=True); tiny-cuda-nn's classic kernels replay one too) or both, "
                         "rows labelled hashgrid-fp16 / hashgrid-fp16-graph")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    if args.table == "image":
        used = [flag for flag, value in (("--tcnn", args.tcnn), ("--dims", args.dims != "2,3"),
                                         ("--networks", args.networks != ",".join(ISSUE21_NETWORKS)),
                                         ("--mlp", args.mlp != "fp32")) if value]
        if used:
            ap.error(f"{', '.join(used)}: only with --table issue21 (the image table's networks are not issue 21's)")
    elif args.deterministic:
        ap.error("--deterministic: only with --table image")
    else:   # issue21's arguments, checked before any GPU work
        dims = args.dims.split(",")
        if not dims or any(d not in ("2", "3") for d in dims):
            ap.error(f"--dims: each value must be 2 or 3, got {args.dims!r}")
        if not args.networks or any(n not in ISSUE21_NETWORKS for n in args.networks.split(",")):
            ap.error(f"--networks: each value must be one of {', '.join(ISSUE21_NETWORKS)}, got {args.networks!r}")
        if args.tcnn:
            try:
                tcnn_runner.check_kit(args.tcnn, [int(d) for d in dims])
            except ValueError as e:
                ap.error(str(e))
    if args.batches is None:
        args.batches = "14,18,20" if args.table == "issue21" else "14,18"
    if args.steps is None and args.table == "image":
        args.steps = 1000
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
    if args.table == "issue21":
        if args.mlp != "fp32" and dev.device_kind() != "cuda":
            ap.error(f"--mlp {args.mlp}: TensorCoreMLP runs on CUDA only, this device is {dev.device_kind()!r}")
        main_issue21(args, torch, has_torch)
        return
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
