"""Optimiser step benchmark: sopt's Slang kernels against torch.optim's ``fused=True`` kernels.

What is measured
----------------
For each optimiser (SGD with momentum 0.9, Adam, AdamW; lr 1e-3, torch's defaults otherwise) and each problem
size (one tensor of 1M / 16M / 64M float32 parameters, 1M = 2**20, and a "mixed" model of 100 tensors whose
sizes are log-uniform in [1K, 1M], fixed seed), six variants are timed in the same process:

* ``sopt``       -- ``sopt.optim.<Opt>(params, ...)`` with its defaults: ``skip_nonfinite=True`` with
  ``double_buffer=True``, the update reading values and state from one side of a double-buffered arena and
  writing the other while it checks the gradients for NaN/Inf, then a restore dispatch that does nothing unless
  a NaN/Inf was found;
* ``sopt scan``  -- ``double_buffer=False``: single-buffered, a read-only pass over the gradients (non-finite
  detection) before the in-place update kernel;
* ``sopt nochk`` -- ``skip_nonfinite=False``: one in-place update dispatch per step, the semantics of torch's
  fused kernels (which check nothing);
* ``torch``      -- ``torch.optim.<Opt>(params, ..., fused=True)``, params and grads float32 on CUDA;
* ``torch+zero`` -- the same, each step being ``opt.step()`` then ``opt.zero_grad(set_to_none=False)`` (with
  ``fused=True`` torch zeroes the gradients in one ``torch._foreach_zero_``), separate tensors and optimiser.
* ``torch+skip`` -- torch+zero with torch's way to skip a step whose gradients hold a NaN/Inf with a fused optimiser:
  a ``torch.amp.GradScaler(init_scale=1.0)``, each step being ``scaler.step(opt)`` (a
  ``_amp_foreach_non_finite_check_and_unscale_`` pass reading and writing every gradient, then the fused step told
  to do nothing if that pass found one), ``scaler.update()`` and ``opt.zero_grad(set_to_none=False)``: the work
  sopt's default step does.

sopt gets one optimiser over all the model's Parameters (one flat arena); torch gets the same number of
tensors (1 or 100) with the same sizes. All variants take the same number of steps.

Three comparisons. sopt's step reads p, g and the state and writes p, the state and zero into every gradient
(zero-on-step: the next backward pass accumulates into zero gradients); torch's fused step leaves the gradients
in place.

* Bare step (``speedup`` = torch time / sopt time): sopt's step against torch's ``opt.step()`` alone. torch does
  less work here: it does not clear the gradients, which sopt's step does (4 bytes per parameter more).
* Same end state (``speedup vs same end state`` = torch+zero time / sopt time): sopt's step against torch's
  ``opt.step()`` + ``opt.zero_grad(set_to_none=False)``, after which both have updated parameters and zero
  gradients ready to accumulate into. With torch's default ``zero_grad()`` (``set_to_none=True``) the gradients
  are freed instead and the next backward allocates and writes fresh ones, a cost outside this benchmark.
* Same work (``speedup vs same work``): sopt's default (and scan) step, which skips steps with non-finite
  gradients, against torch+skip, which does the same; and sopt nochk, which checks nothing, against torch+zero,
  which neither does.

Timing. Every variant first takes ``--warmup`` steps (shader compilation, lazy state allocation), then
``--rounds`` rounds of N back-to-back ``step()`` calls followed by one device synchronisation, timed with
``time.perf_counter`` on the host; a round's time / N is one sample and the table shows the median over
rounds. N is the same for every variant of a row: at least ``--steps`` and enough for the fastest variant's
round to last ``--min-time`` seconds. Rounds of the variants are interleaved (sopt, sopt scan, sopt nochk, torch,
torch+zero, torch+skip, sopt, ...) so that clock or thermal drift affects them alike. Separately, ``--gpu-steps`` steps are
timed on the GPU alone, one sample per step: SlangPy timestamp queries written before and after each
``opt.step(encoder)`` (slang-rhi's CUDA backend reports them in whole microseconds), CUDA events around each
torch ``step()`` (torch+zero: around ``step()`` + ``zero_grad()``); the tables show the median per step.

Bytes counted per parameter element per step (float32, 4 bytes each; s = state tensors per parameter,
1 for SGD with momentum, 2 for Adam/AdamW):

* torch fused:  reads p, g and the states, writes p and the states       = 4 * (2 + s) + 4 * (1 + s)
  (gradients are left in place);
* torch+zero:   torch fused plus the memset writing zero into each gradient          = torch fused + 4;
* torch+skip:   torch+zero plus GradScaler's check, reading and writing each gradient  = torch+zero + 8;
* sopt nochk:   the same traffic as torch+zero in one kernel: reads p, g and the states, writes p, the states
  and zero into each gradient (sopt's step consumes its gradients)       = 4 * (2 + s) + 4 * (2 + s)
* sopt default: the same as sopt nochk (it writes p and the states to the other side instead of in place; the
  restore dispatch reads one flag per thread)                            = sopt nochk;
* sopt scan:    sopt nochk plus the non-finite scan reading every gradient once more  = sopt nochk + 4.

So SGD(momentum): torch 20, torch+zero 24, sopt nochk 24, sopt 24, sopt scan 28 B/element; Adam/AdamW: torch
28, torch+zero 32, sopt nochk 32, sopt 32, sopt scan 36. Each variant's effective bandwidth is its own byte count / its step time (host-clock
median), so it credits sopt for the extra gradient traffic it does; the speed-ups compare times only. The bytes
use the model's real parameter count (sopt's arena pads each tensor to a multiple of 4 elements; that padding,
at most 3 elements per tensor, is not counted).

The limit is the device-to-device copy bandwidth measured in the same run: ``dst.copy_(src)`` of a
``--copy-mib`` (1 GiB) torch tensor on CUDA, bytes read + written (2 x size) / time. SlangPy's own
``copy_buffer`` on sopt's device is measured too and serves as the limit when torch cannot run on CUDA.

Gradients are filled with random finite non-zero values before timing, and re-filled (a device-side copy,
not timed) before each round. sopt's step zeroes every gradient it consumes, so within a round the later sopt
steps see zero gradients: that does not change the work -- the kernels read and write every byte whatever the
values, and zero gradients are finite, so no step is skipped (checked: ``skipped_steps`` must stay 0).
Likewise torch+zero's ``zero_grad`` zeroes its gradients, so its later steps in a round see zero gradients; that
does not change its timing either, as torch's fused kernels do not branch on the values. torch's fused step
alone leaves its gradients untouched, so it sees the same random gradients on every step.

GPU memory: all six variants of a row are alive together (their rounds interleave); at 64M Adam that is
2 GiB for sopt (g, two sides of p, m, v and a device copy of the random gradients), 2 x 1.25 GiB for sopt scan
and nochk (p, g, m, v and the copy), 1 GiB for torch (p, g, m, v) and 2 x 1.25 GiB for torch+zero and torch+skip
(the same and a copy of the random gradients), everything freed before the next row; the copy measurement
(2 x 1 GiB per framework) runs and frees first.

Output: three tables (step times in us, host clock and GPU only; bandwidths and % of copy; the three
comparisons' speed-ups), and with ``--json`` everything per row (``speedup_vs_torch`` = bare step,
``speedup_vs_torch_zero`` = same end state, ``speedup_vs_torch_skip`` = sopt's same work) and the comparisons'
descriptions in ``meta.comparisons``.

Runs without torch (torch columns "n/a") and on any SlangPy device sopt supports (``SOPT_DEVICE=cuda|vulkan``);
``--quick`` uses tiny sizes and few steps for a smoke test, e.g. on Mesa's lavapipe.

Usage::

    SOPT_DEVICE=cuda python benchmarks/optim_step.py --json optim_step.json
    python benchmarks/optim_step.py --quick
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import math
import os
import pathlib
import platform
import re
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable

_REPO = pathlib.Path(__file__).resolve().parents[1]
try:
    import sopt
except ImportError:  # running from a source checkout without `pip install .`
    sys.path.insert(0, str(_REPO))
    import sopt

import numpy as np
import slangpy as spy

from sopt.runtime import device as sdev
from sopt.optim import SGD, Adam, AdamW, Optimizer

torch: Any = None
_TORCH_IMPORT_ERROR: str | None = None
try:
    import torch  # type: ignore[no-redef]
except Exception as exc:  # ImportError, or a broken install (OSError from a missing library)
    torch = None
    _TORCH_IMPORT_ERROR = f"{type(exc).__name__}: {exc}"

KIB = 1 << 10
MIB = 1 << 20
BYTES_PER_FLOAT = 4


# -- what is benchmarked ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class OptimizerSpec:
    """One optimiser with the same hyperparameters for sopt and torch."""

    key: str
    label: str
    sopt_cls: type[Optimizer]
    torch_name: str
    kwargs: dict[str, Any]


OPTIMIZERS: dict[str, OptimizerSpec] = {
    "sgd": OptimizerSpec("sgd", "SGD(m=0.9)", SGD, "SGD", {"lr": 1e-3, "momentum": 0.9}),
    "adam": OptimizerSpec("adam", "Adam", Adam, "Adam", {"lr": 1e-3}),
    "adamw": OptimizerSpec("adamw", "AdamW", AdamW, "AdamW", {"lr": 1e-3}),
}


@dataclass(frozen=True)
class SizeSpec:
    """A model: the element count of each of its tensors."""

    label: str
    sizes: tuple[int, ...]

    @property
    def n_params(self) -> int:
        return int(sum(self.sizes))


_COUNT_RE = re.compile(r"^(\d+(?:\.\d+)?)([KMG]?)$", re.IGNORECASE)
_SUFFIX = {"": 1, "K": KIB, "M": MIB, "G": 1 << 30}


def parse_count(text: str) -> int:
    """'64K' -> 65536, '1M' -> 1048576, '1000' -> 1000 (binary suffixes)."""
    m = _COUNT_RE.match(text.strip())
    if not m:
        raise ValueError(f"not a count: {text!r} (use e.g. 1000, 64K, 16M)")
    value = int(float(m.group(1)) * _SUFFIX[m.group(2).upper()])
    if value < 1:
        raise ValueError(f"count must be >= 1, got {text!r}")
    return value


def format_count(n: int) -> str:
    for suffix, scale in (("G", 1 << 30), ("M", MIB), ("K", KIB)):
        if n >= scale and n % scale == 0:
            return f"{n // scale}{suffix}"
    return str(n)


def mixed_sizes(count: int, low: int, high: int, seed: int) -> tuple[int, ...]:
    """``count`` tensor sizes log-uniform in [low, high], from a fixed seed."""
    rng = np.random.default_rng(seed)
    sizes = np.exp(rng.uniform(math.log(low), math.log(high), count))
    return tuple(int(min(max(round(s), low), high)) for s in sizes)


def parse_size(token: str, seed: int) -> SizeSpec:
    """'16M' (one tensor) or 'mixed[:COUNT[:MIN:MAX]]' (default mixed:100:1K:1M)."""
    token = token.strip()
    if token.lower().startswith("mixed"):
        parts = token.split(":")
        if parts[0].lower() != "mixed" or len(parts) not in (1, 2, 4):
            raise ValueError(f"bad mixed size {token!r}: use mixed, mixed:COUNT or mixed:COUNT:MIN:MAX")
        count = int(parts[1]) if len(parts) >= 2 else 100
        low, high = (parse_count(parts[2]), parse_count(parts[3])) if len(parts) == 4 else (KIB, MIB)
        if count < 1 or low > high:
            raise ValueError(f"bad mixed size {token!r}: need COUNT >= 1 and MIN <= MAX")
        return SizeSpec(f"mixed{count}[{format_count(low)}-{format_count(high)}]", mixed_sizes(count, low, high, seed))
    n = parse_count(token)
    return SizeSpec(format_count(n), (n,))


def bytes_per_element(n_states: int) -> dict[str, int]:
    """Bytes each variant moves per parameter element per step (see the module docstring)."""
    torch_bytes = BYTES_PER_FLOAT * ((2 + n_states) + (1 + n_states))
    nochk = BYTES_PER_FLOAT * ((2 + n_states) + (2 + n_states))
    return {"sopt": nochk, "sopt_scan": nochk + BYTES_PER_FLOAT, "sopt_nochk": nochk, "torch": torch_bytes,
            "torch_zero": torch_bytes + BYTES_PER_FLOAT,
            "torch_skip": torch_bytes + BYTES_PER_FLOAT + 2 * BYTES_PER_FLOAT}


# -- timing helpers --------------------------------------------------------------------------------------------
def summarize(samples: list[float]) -> dict[str, float]:
    """Median, mean, min, max of per-step times in seconds, as microseconds."""
    return {"median_us": statistics.median(samples) * 1e6, "mean_us": statistics.fmean(samples) * 1e6,
            "min_us": min(samples) * 1e6, "max_us": max(samples) * 1e6, "samples": len(samples)}


class Variant:
    """One optimiser instance being timed; subclasses bind it to sopt or torch."""

    name: str
    bytes_per_step: int

    def step(self) -> None:
        raise NotImplementedError

    def sync(self) -> None:
        raise NotImplementedError

    def refill(self) -> None:
        """Put random finite gradients back (not timed)."""

    def gpu_step_times(self, n: int) -> list[float] | None:
        """Per-step GPU-only times (s) of ``n`` steps, or None when the backend can't time on the GPU."""
        return None

    def check(self) -> dict[str, Any]:
        """Sanity information after timing (e.g. skipped steps)."""
        return {}

    def close(self) -> None:
        """Drop every GPU allocation."""


# sopt variant name -> the optimiser options that make it
SOPT_OPTIONS: dict[str, dict[str, Any]] = {
    "sopt": {},
    "sopt_scan": {"double_buffer": False},
    "sopt_nochk": {"skip_nonfinite": False},
}


class SoptVariant(Variant):
    def __init__(self, spec: OptimizerSpec, model: SizeSpec, name: str, seed: int, poll_every: int | None) -> None:
        self.name = name
        self.device = sdev.get_device()
        rng = np.random.default_rng(seed)
        self.params = [sopt.Parameter(rng.standard_normal(n, dtype=np.float32), name=f"p{i}")
                       for i, n in enumerate(model.sizes)]
        options: dict[str, Any] = dict(SOPT_OPTIONS[name])
        if poll_every is not None:
            options["poll_every"] = poll_every
        self.opt: Optimizer = spec.sopt_cls(self.params, **spec.kwargs, **options)
        arena = self.opt.arena
        self.n_states = len(self.opt.required_states())
        self.bytes_per_step = bytes_per_element(self.n_states)[self.name] * model.n_params
        # Random finite non-zero gradients in the arena's layout (padding stays zero), kept on the device so a
        # refill is a device copy. The step zeroes the gradients it consumes: see the module docstring.
        grads = arena.join([(rng.standard_normal(n, dtype=np.float32) + 0.1).astype(np.float32) for n in model.sizes])
        self.grad_bytes = grads.nbytes
        self.grad_src = self.device.create_buffer(
            size=self.grad_bytes, data=grads,
            usage=spy.BufferUsage.shader_resource | spy.BufferUsage.copy_source | spy.BufferUsage.copy_destination)
        del grads
        self.has_timestamps = self.device.has_feature(spy.Feature.timestamp_query)
        self.refill()
        self.sync()

    def step(self) -> None:
        self.opt.step()

    def sync(self) -> None:
        sdev.synchronize()

    def refill(self) -> None:
        encoder = self.device.create_command_encoder()
        grads = self.opt.arena.grads
        encoder.copy_buffer(grads.storage, grads.offset * BYTES_PER_FLOAT, self.grad_src, 0, self.grad_bytes)
        self.device.submit_command_buffer(encoder.finish())

    def gpu_step_times(self, n: int) -> list[float] | None:
        if not self.has_timestamps or n <= 0:
            return None
        pool = self.device.create_query_pool(type=spy.QueryType.timestamp, count=2 * n)
        for i in range(n):
            encoder = self.device.create_command_encoder()
            encoder.write_timestamp(pool, 2 * i)
            self.opt.step(encoder)
            encoder.write_timestamp(pool, 2 * i + 1)
            self.device.submit_command_buffer(encoder.finish())
        self.sync()
        stamps = pool.get_timestamp_results(0, 2 * n)  # seconds
        return [stamps[2 * i + 1] - stamps[2 * i] for i in range(n)]

    def check(self) -> dict[str, Any]:
        skipped = self.opt.skipped_steps
        if skipped:
            raise RuntimeError(f"{self.name}: {skipped} steps were skipped as non-finite; the timing is invalid")
        return {"skipped_steps": skipped, "arena_elements": self.opt.arena.n_elements,
                "state_tensors_per_param": self.n_states}

    def close(self) -> None:
        self.sync()
        del self.opt, self.params, self.grad_src
        gc.collect()


class TorchVariant(Variant):
    """``torch.optim.<Opt>(..., fused=True)``, one of three ways (``name``):

    * ``torch``: ``opt.step()``;
    * ``torch_zero``: ``opt.step()`` then ``opt.zero_grad(set_to_none=False)`` (sopt's end state, gradients zero);
    * ``torch_skip``: torch's way to skip steps with non-finite gradients, a ``torch.amp.GradScaler`` with scale 1:
      ``scaler.step(opt)`` (its ``_amp_foreach_non_finite_check_and_unscale_`` pass, then the fused step, which
      does nothing when that pass found a NaN/Inf), ``scaler.update()``, then ``opt.zero_grad(set_to_none=False)``
      -- the work sopt's default step does.
    """

    def __init__(self, spec: OptimizerSpec, model: SizeSpec, device: str, seed: int, name: str = "torch") -> None:
        self.name = name
        self.zero_grad = name in ("torch_zero", "torch_skip")
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"
        gen = torch.Generator(device=self.device)
        gen.manual_seed(seed)
        self.params = []
        for n in model.sizes:
            p = torch.randn(n, device=self.device, dtype=torch.float32, generator=gen).requires_grad_(True)
            # random finite non-zero gradients; torch's step does not modify them (zero_grad does: see refill)
            p.grad = torch.randn(n, device=self.device, dtype=torch.float32, generator=gen) + 0.1
            self.params.append(p)
        # torch+zero: a device copy of the random gradients, put back before each round (not timed).
        # zero_grad(set_to_none=False) zeroes the gradients, so from the second step of a round on, torch+zero's
        # step sees zero gradients. That does not change its timing: torch's fused kernels do the same loads,
        # arithmetic and stores whatever the values (no value-dependent branches; no grad scaler / found_inf
        # here), and the memset writes every byte regardless. Same situation as sopt's zero-on-step.
        self.grad_src = [p.grad.clone() for p in self.params] if self.zero_grad else []
        cls = getattr(torch.optim, spec.torch_name)
        self.opt = cls(self.params, **spec.kwargs, fused=True)
        self.scaler = None
        if name == "torch_skip":
            # scale 1 and no growth: only the non-finite check and the skip, no scaling
            self.scaler = torch.amp.GradScaler(self.device.type, init_scale=1.0, growth_interval=2**30)
            self.scaler.scale(torch.ones((), device=self.device))   # creates the scale tensor step() needs
        self.model = model
        self.n_states: int | None = None
        self.bytes_per_step = 0  # known after the first step creates the state

    def _count_states(self) -> None:
        # per-element state tensors (momentum_buffer / exp_avg, exp_avg_sq); the scalar `step` is not one
        p = self.params[0]
        self.n_states = sum(1 for v in self.opt.state[p].values() if torch.is_tensor(v) and v.shape == p.shape)
        self.bytes_per_step = bytes_per_element(self.n_states)[self.name] * self.model.n_params

    def _step(self) -> None:
        if self.scaler is not None:
            self.scaler.step(self.opt)
            self.scaler.update()
        else:
            self.opt.step()
        if self.zero_grad:
            # with fused=True torch zeroes all gradients of a device/dtype in one torch._foreach_zero_ call
            self.opt.zero_grad(set_to_none=False)

    def step(self) -> None:
        self._step()
        if self.n_states is None:
            self._count_states()

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize(self.device)

    def refill(self) -> None:
        if self.zero_grad:
            with torch.no_grad():
                for p, src in zip(self.params, self.grad_src):
                    p.grad.copy_(src)

    def gpu_step_times(self, n: int) -> list[float] | None:
        if not self.cuda or n <= 0:
            return None
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(n)]
        for start, end in events:
            start.record()
            self._step()
            end.record()
        self.sync()
        return [start.elapsed_time(end) * 1e-3 for start, end in events]

    def check(self) -> dict[str, Any]:
        info: dict[str, Any] = {"state_tensors_per_param": self.n_states}
        if self.scaler is not None:   # a skipped step would leave the scale below 1
            info["grad_scale"] = float(self.scaler.get_scale())
        return info

    def close(self) -> None:
        self.sync()
        del self.opt, self.params, self.grad_src, self.scaler
        gc.collect()
        if self.cuda:
            torch.cuda.empty_cache()


def time_rounds(variants: list[Variant], n_steps: int, rounds: int) -> dict[str, dict[str, list[float]]]:
    """Interleaved rounds of ``n_steps`` host-timed steps; per variant the per-step time (s) of each round and
    the per-step time the host spent issuing them (before the final synchronisation)."""
    out: dict[str, dict[str, list[float]]] = {v.name: {"step": [], "issue": []} for v in variants}
    for _ in range(rounds):
        for v in variants:
            v.refill()
            v.sync()
            step = v.step
            t0 = time.perf_counter()
            for _ in range(n_steps):
                step()
            t1 = time.perf_counter()
            v.sync()
            t2 = time.perf_counter()
            out[v.name]["step"].append((t2 - t0) / n_steps)
            out[v.name]["issue"].append((t1 - t0) / n_steps)
    return out


def probe_step_time(v: Variant, n: int) -> float:
    v.sync()
    t0 = time.perf_counter()
    for _ in range(n):
        v.step()
    v.sync()
    return (time.perf_counter() - t0) / n


# -- copy bandwidth ------------------------------------------------------------------------------------------
def torch_copy_bandwidth(nbytes: int, device: str, rounds: int = 5, per_round: int = 10) -> dict[str, float]:
    """``dst.copy_(src)`` on ``device``; GB/s = 2 * nbytes (read + write) / time, median over rounds."""
    dev = torch.device(device)
    src = torch.empty(nbytes // BYTES_PER_FLOAT, dtype=torch.float32, device=dev).uniform_()
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    torch.cuda.synchronize(dev)
    samples = []
    for _ in range(rounds):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(per_round):
            dst.copy_(src)
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1e-3 / per_round)
    del src, dst
    torch.cuda.empty_cache()
    t = statistics.median(samples)
    return {"bytes_per_copy": 2 * nbytes, "time_us": t * 1e6, "gbps": 2 * nbytes / t / 1e9}


def slangpy_copy_bandwidth(nbytes: int, rounds: int = 5, per_round: int = 10) -> dict[str, Any]:
    """SlangPy ``copy_buffer`` on sopt's device, timed with GPU timestamps when available (else the host clock)."""
    device = sdev.get_device()
    usage = spy.BufferUsage.shader_resource | spy.BufferUsage.copy_source | spy.BufferUsage.copy_destination
    src = device.create_buffer(size=nbytes, usage=usage)
    dst = device.create_buffer(size=nbytes, usage=usage)
    encoder = device.create_command_encoder()
    encoder.clear_buffer(src)
    encoder.copy_buffer(dst, 0, src, 0, nbytes)
    device.submit_command_buffer(encoder.finish())
    device.wait()
    stamps = device.has_feature(spy.Feature.timestamp_query)
    pool = device.create_query_pool(type=spy.QueryType.timestamp, count=2) if stamps else None
    samples = []
    for _ in range(rounds):
        encoder = device.create_command_encoder()
        if pool is not None:
            encoder.write_timestamp(pool, 0)
        for _ in range(per_round):
            encoder.copy_buffer(dst, 0, src, 0, nbytes)
        if pool is not None:
            encoder.write_timestamp(pool, 1)
        t0 = time.perf_counter()
        device.submit_command_buffer(encoder.finish())
        device.wait()
        elapsed = time.perf_counter() - t0
        if pool is not None:
            a, b = pool.get_timestamp_results(0, 2)
            elapsed = b - a
        samples.append(elapsed / per_round)
    del src, dst, pool
    gc.collect()
    t = statistics.median(samples)
    return {"bytes_per_copy": 2 * nbytes, "time_us": t * 1e6, "gbps": 2 * nbytes / t / 1e9,
            "clock": "gpu timestamps" if stamps else "host"}


# -- environment ---------------------------------------------------------------------------------------------
def torch_status(requested: str, disabled: bool) -> tuple[str | None, str]:
    """(torch device to use or None, a line explaining it)."""
    if disabled:
        return None, "torch: disabled (--no-torch)"
    if torch is None:
        return None, f"torch: not importable ({_TORCH_IMPORT_ERROR})"
    if requested == "cuda" and not torch.cuda.is_available():
        return None, (f"torch {torch.__version__}: no CUDA device, torch columns n/a "
                      "(--torch-device cpu times torch's CPU kernels instead)")
    return requested, f"torch {torch.__version__} on {requested}"


def git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(_REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, timeout=10)
        return out.stdout.strip() or None
    except Exception:
        return None


# -- the run -------------------------------------------------------------------------------------------------
VARIANT_NAMES = ("sopt", "sopt_scan", "sopt_nochk", "torch", "torch_zero", "torch_skip")
VARIANT_LABELS = {"sopt": "sopt", "sopt_scan": "scan", "sopt_nochk": "nochk", "torch": "torch",
                  "torch_zero": "torch+zero", "torch_skip": "torch+skip"}

# The three comparisons, a few sentences each: in the header lines and the JSON's meta (see also the docstring).
COMPARISONS = {
    "bare_step": (
        "bare step: sopt's step vs torch's opt.step() alone (speedup = torch us / sopt us). "
        "torch does less work here: its step leaves the gradients in place, while sopt's step also writes zero "
        "into every gradient (4 bytes/parameter more)."),
    "same_end_state": (
        "same end state: sopt's step vs torch's opt.step() + opt.zero_grad(set_to_none=False), a memset of the "
        "gradients (speedup vs same end state = torch+zero us / sopt us); both end with the parameters updated "
        "and the gradients zero, ready for the next backward to accumulate into. "
        "With torch's default zero_grad(set_to_none=True) the gradients are freed instead and the next backward "
        "allocates and writes fresh ones, a cost outside this benchmark."),
    "same_work": (
        "same work: sopt's default (and scan) step, which skips a step whose gradients hold a NaN/Inf, vs torch's "
        "way of doing that with a fused optimiser: GradScaler(init_scale=1) step + update, then "
        "zero_grad(set_to_none=False) (speedup vs same work = torch+skip us / sopt us); sopt nochk's same work is "
        "torch+zero."),
}


@dataclass
class Row:
    optimizer: str
    size: str
    n_tensors: int
    n_params: int
    n_steps: int = 0
    rounds: int = 0
    gpu_steps: int = 0
    bytes_per_element: dict[str, int] = field(default_factory=dict)
    variants: dict[str, dict[str, Any]] = field(default_factory=dict)
    copy_gbps: float | None = None
    error: dict[str, str] = field(default_factory=dict)

    def host_us(self, name: str) -> float | None:
        v = self.variants.get(name)
        return v["host"]["median_us"] if v else None

    def gpu_us(self, name: str) -> float | None:
        v = self.variants.get(name)
        return v["gpu"]["median_us"] if v and v.get("gpu") else None

    def gbps(self, name: str) -> float | None:
        v = self.variants.get(name)
        return v["gbps"] if v else None

    def pct_copy(self, name: str) -> float | None:
        g = self.gbps(name)
        return 100.0 * g / self.copy_gbps if g is not None and self.copy_gbps else None

    def speedup(self, name: str, reference: str = "torch") -> float | None:
        """reference host time / ``name``'s host time (> 1: ``name`` faster). ``reference="torch"`` is the
        bare-step comparison, ``"torch_zero"`` the same-end-state one."""
        mine, theirs = self.host_us(name), self.host_us(reference)
        return theirs / mine if mine and theirs else None

    def to_json(self) -> dict[str, Any]:
        return {"optimizer": self.optimizer, "size": self.size, "n_tensors": self.n_tensors, "n_params": self.n_params,
                "n_steps_per_round": self.n_steps, "rounds": self.rounds, "gpu_timed_steps": self.gpu_steps,
                "bytes_per_element": self.bytes_per_element, "variants": self.variants, "copy_gbps": self.copy_gbps,
                "pct_of_copy": {n: self.pct_copy(n) for n in VARIANT_NAMES},
                "speedup_vs_torch": {n: self.speedup(n, "torch") for n in ("sopt", "sopt_scan", "sopt_nochk")},
                "speedup_vs_torch_zero": {n: self.speedup(n, "torch_zero")
                                          for n in ("sopt", "sopt_scan", "sopt_nochk")},
                "speedup_vs_torch_skip": {n: self.speedup(n, "torch_skip") for n in ("sopt", "sopt_scan")},
                "errors": self.error}


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def run_config(spec: OptimizerSpec, model: SizeSpec, args: argparse.Namespace, torch_device: str | None,
               copy_gbps: float | None) -> Row:
    row = Row(spec.label, model.label, len(model.sizes), model.n_params, copy_gbps=copy_gbps)
    variants: list[Variant] = []
    try:
        for name in SOPT_OPTIONS:
            variants.append(SoptVariant(spec, model, name, args.seed, args.poll_every))
        if torch_device is not None:
            for name in ("torch", "torch_zero", "torch_skip"):
                try:
                    variants.append(TorchVariant(spec, model, torch_device, args.seed, name=name))
                except Exception as exc:  # e.g. fused=True unsupported for this optimiser/device in this torch
                    row.error[name] = f"{type(exc).__name__}: {exc}".splitlines()[0]
                    log(f"  {name} failed: {row.error[name]}")
        # warm-up: compilation, lazy state, caches
        for v in variants:
            v.refill()
            for _ in range(args.warmup):
                v.step()
            v.sync()
        probe = max(3, min(args.steps, 20))
        fastest = min(probe_step_time(v, probe) for v in variants)
        n = max(args.steps, math.ceil(args.min_time / max(fastest, 1e-9)))
        n = min(n, args.max_steps)
        row.n_steps, row.rounds = n, args.rounds
        log(f"  {spec.label} {model.label}: {n} steps x {args.rounds} rounds per variant (fastest probe "
            f"{fastest * 1e6:.1f} us/step)")
        timed = time_rounds(variants, n, args.rounds)
        n_gpu = min(args.gpu_steps, n)
        row.gpu_steps = n_gpu
        for v in variants:
            v.refill()
            v.sync()
            try:
                gpu = v.gpu_step_times(n_gpu)
            except Exception as exc:  # a backend without working timestamps: keep the host-clock results
                gpu = None
                row.error[f"{v.name}_gpu_timing"] = f"{type(exc).__name__}: {exc}".splitlines()[0]
            host = summarize(timed[v.name]["step"])
            row.variants[v.name] = {
                "host": host, "host_rounds_us": [t * 1e6 for t in timed[v.name]["step"]],
                "host_issue_us": statistics.median(timed[v.name]["issue"]) * 1e6,
                "gpu": summarize(gpu) if gpu else None,
                "bytes_per_step": v.bytes_per_step,
                "gbps": v.bytes_per_step / (host["median_us"] * 1e-6) / 1e9,
                "gbps_gpu": v.bytes_per_step / (summarize(gpu)["median_us"] * 1e-6) / 1e9 if gpu else None,
                **v.check(),
            }
        n_states = next(v.n_states for v in variants if isinstance(v, SoptVariant))
        row.bytes_per_element = bytes_per_element(n_states)
        for torch_v in (v for v in variants if isinstance(v, TorchVariant)):
            if torch_v.n_states != n_states:
                row.error[f"{torch_v.name}_state_mismatch"] = (f"{torch_v.name} keeps {torch_v.n_states} state "
                                                               f"tensors, sopt {n_states}")
                row.bytes_per_element[torch_v.name] = bytes_per_element(torch_v.n_states or 0)[torch_v.name]
    finally:
        for v in variants:
            v.close()
        variants.clear()
        gc.collect()
    return row


# -- output --------------------------------------------------------------------------------------------------
# A column: (group label or "", column label, value of a row, format). Consecutive columns with the same group
# label get one group header spanning them. ".2f" values are speed-ups and get an "x".
Column = tuple[str, str, Callable[[Row], Any], str]

_KEY_COLUMNS: list[Column] = [
    ("", "optimizer", lambda r: r.optimizer, "s"),
    ("", "size", lambda r: r.size, "s"),
]


def _per_variant(group: str, get: Callable[[Row, str], Any], fmt: str) -> list[Column]:
    return [(group, VARIANT_LABELS[n], (lambda r, n=n: get(r, n)), fmt) for n in VARIANT_NAMES]


# Table 1: times, microseconds per step.
TIME_COLUMNS: list[Column] = _KEY_COLUMNS + [
    ("", "params", lambda r: r.n_params, "d"),
    ("", "steps", lambda r: f"{r.n_steps}x{r.rounds}", "s"),
    *_per_variant("host clock, us/step", Row.host_us, ".1f"),
    *_per_variant("GPU only, us/step", Row.gpu_us, ".1f"),
]

# Table 2: bandwidths and their share of the copy bandwidth.
RATE_COLUMNS: list[Column] = _KEY_COLUMNS + [
    *_per_variant("GB/s", Row.gbps, ".1f"),
    ("", "copy GB/s", lambda r: r.copy_gbps, ".1f"),
    *_per_variant("% of copy", Row.pct_copy, ".1f"),
]

# Table 3: speed-ups from the host-clock times, the three comparisons.
SPEEDUP_COLUMNS: list[Column] = _KEY_COLUMNS + [
    ("bare step", "sopt", lambda r: r.speedup("sopt", "torch"), ".2f"),
    ("bare step", "scan", lambda r: r.speedup("sopt_scan", "torch"), ".2f"),
    ("bare step", "nochk", lambda r: r.speedup("sopt_nochk", "torch"), ".2f"),
    ("same end state", "sopt", lambda r: r.speedup("sopt", "torch_zero"), ".2f"),
    ("same end state", "scan", lambda r: r.speedup("sopt_scan", "torch_zero"), ".2f"),
    ("same end state", "nochk", lambda r: r.speedup("sopt_nochk", "torch_zero"), ".2f"),
    ("same work", "sopt", lambda r: r.speedup("sopt", "torch_skip"), ".2f"),
    ("same work", "scan", lambda r: r.speedup("sopt_scan", "torch_skip"), ".2f"),
    ("same work", "nochk", lambda r: r.speedup("sopt_nochk", "torch_zero"), ".2f"),
]


def format_table(rows: list[Row], columns: list[Column]) -> str:
    def cell(value: Any, fmt: str) -> str:
        if value is None:
            return "n/a"
        if fmt.endswith("f") and not math.isfinite(value):
            return "n/a"
        return format(value, fmt) + ("x" if fmt == ".2f" else "")

    sep = "  "
    cells = [[name for _, name, _, _ in columns]] + [[cell(get(r), fmt) for _, _, get, fmt in columns] for r in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    # spans of consecutive columns sharing a group label; widen a span's columns (evenly) when the label is longer
    spans: list[tuple[str, int, int]] = []  # (label, first column, last column)
    for i, (group, _, _, _) in enumerate(columns):
        if group and spans and spans[-1][0] == group and spans[-1][2] == i - 1:
            spans[-1] = (group, spans[-1][1], i)
        elif group:
            spans.append((group, i, i))
    for label, first, last in spans:
        span = sum(widths[first:last + 1]) + len(sep) * (last - first)
        extra = max(0, len(label) + 6 - span)  # room for "-- label --"
        for j in range(first, last + 1):
            widths[j] += extra // (last - first + 1) + (1 if j - first < extra % (last - first + 1) else 0)
    group_parts = []
    i = 0
    while i < len(columns):
        span_here = next((sp for sp in spans if sp[1] == i), None)
        if span_here is None:
            group_parts.append(" " * widths[i])
            i += 1
            continue
        label, first, last = span_here
        span = sum(widths[first:last + 1]) + len(sep) * (last - first)
        group_parts.append(f" {label} ".center(span, "-"))
        i = last + 1
    lines = [sep.join(group_parts).rstrip()] if spans else []
    for k, line in enumerate(cells):
        parts = [c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(line, widths))]
        lines.append(sep.join(parts))
        if k == 0:
            lines.append(sep.join("-" * w for w in widths))
    return "\n".join(lines)


def format_tables(rows: list[Row]) -> str:
    """Three tables, each narrow enough for a terminal: times, bandwidths, speed-ups."""
    return "\n\n".join([
        "step time, us per step (sopt = defaults, double-buffered check; scan = double_buffer=False; "
        "nochk = skip_nonfinite=False; "
        "torch+zero = torch fused step + zero_grad(set_to_none=False); "
        "torch+skip = torch+zero with GradScaler(init_scale=1)'s non-finite skip)\n" + format_table(rows, TIME_COLUMNS),
        "bandwidth: GB/s = bytes counted for the variant / host-clock time; % of copy = GB/s / copy GB/s\n"
        + format_table(rows, RATE_COLUMNS),
        "speedup (host-clock times, > 1: sopt faster): bare step = torch / sopt; "
        "same end state = torch+zero / sopt; same work = torch+skip / sopt (nochk: torch+zero / nochk)\n"
        + format_table(rows, SPEEDUP_COLUMNS),
    ])


def header_lines(meta: dict[str, Any]) -> list[str]:
    lines = [
        f"sopt optimiser step benchmark  {meta['date']}  sopt {meta['sopt_version']} (git {meta['git_commit']})",
        f"sopt device: {meta['sopt_adapter']} [{meta['sopt_backend']}, {meta['sopt_api']}]   "
        f"torch device: {meta['torch_device_name'] or 'n/a'}",
        f"versions: python {meta['python']}, slangpy {meta['slangpy_version']}, torch {meta['torch_version'] or 'n/a'}, "
        f"numpy {meta['numpy_version']}",
        meta["torch_note"],
    ]
    copy = meta["copy"]
    parts = []
    if copy.get("torch"):
        parts.append(f"torch copy_ {copy['torch']['gbps']:.1f} GB/s")
    if copy.get("slangpy"):
        parts.append(f"slangpy copy_buffer {copy['slangpy']['gbps']:.1f} GB/s ({copy['slangpy']['clock']})")
    lines.append(f"copy limit ({copy['mib']} MiB buffers, read+write counted): "
                 + ("; ".join(parts) or "n/a") + f"  -> 'copy GB/s' column = {copy['limit_source']}")
    lines.append("bytes counted per parameter per step (float32): "
                 + "; ".join(f"{label}: sopt {b['sopt']}, sopt scan {b['sopt_scan']}, sopt nochk {b['sopt_nochk']}, "
                             f"torch {b['torch']}, "
                             f"torch+zero {b.get('torch_zero', 'n/a')}, torch+skip {b.get('torch_skip', 'n/a')}"
                             for label, b in meta["bytes_per_element"].items()))
    lines.append("  torch fused reads p,g,states and writes p,states; torch+zero also writes zero to each gradient "
                 "(zero_grad(set_to_none=False)); torch+skip also reads and writes each gradient in GradScaler's "
                 "non-finite check; sopt also writes zero to each gradient; sopt scan also reads g in the "
                 "non-finite scan pass (sopt default checks g as its update reads it)")
    lines.append("timing: host clock = median over rounds of (N back-to-back steps + 1 sync) / N; GPU only = "
                 "median per step of GPU timestamps (sopt) / CUDA events (torch); GB/s and % of copy from host times")
    lines.append("three comparisons (speedup > 1: sopt faster):")
    lines.extend("  " + text for text in meta["comparisons"].values())
    tick = meta.get("sopt_timestamp_tick_ns")
    if tick and tick >= 1000:
        lines.append(f"note: sopt's GPU timestamps tick every {tick / 1000:g} us on this backend; "
                     "the JSON has the mean per step too")
    return lines


def build_meta(args: argparse.Namespace, torch_device: str | None, torch_note: str) -> dict[str, Any]:
    device = sdev.get_device()
    freq = device.info.timestamp_frequency
    torch_name = None
    if torch_device == "cuda":
        torch_name = torch.cuda.get_device_name(torch.device("cuda"))
    elif torch_device is not None:
        torch_name = f"{platform.processor() or platform.machine()} (CPU)"
    return {
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "sopt_version": getattr(sopt, "__version__", "?"),
        "git_commit": git_commit(),
        "sopt_adapter": device.info.adapter_name,
        "sopt_backend": sdev.device_kind(),
        "sopt_api": device.info.api_name,
        "sopt_timestamp_tick_ns": 1e9 / freq if freq else None,
        "torch_device": torch_device,
        "torch_device_name": torch_name,
        "torch_version": torch.__version__ if torch is not None else None,
        "torch_note": torch_note,
        "comparisons": dict(COMPARISONS),
        "slangpy_version": getattr(spy, "__version__", "?"),
        "numpy_version": np.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "args": {k: v for k, v in vars(args).items()},
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--optimizers", default="sgd,adam,adamw",
                    help=f"comma-separated, from {','.join(OPTIMIZERS)} (default: all)")
    ap.add_argument("--sizes", default=None,
                    help="comma-separated: element counts of one tensor (1M = 2**20) and/or "
                         "mixed[:COUNT[:MIN:MAX]] (default: 1M,16M,64M,mixed = mixed:100:1K:1M)")
    ap.add_argument("--steps", type=int, default=None, help="minimum timed steps per round (default 200)")
    ap.add_argument("--min-time", type=float, default=None,
                    help="a round lasts at least this many seconds for the fastest variant (default 0.2)")
    ap.add_argument("--max-steps", type=int, default=100_000, help="cap on steps per round (default 100000)")
    ap.add_argument("--rounds", type=int, default=None, help="timed rounds per variant (default 5)")
    ap.add_argument("--warmup", type=int, default=None, help="untimed steps first (default 20)")
    ap.add_argument("--gpu-steps", type=int, default=None,
                    help="steps timed one by one on the GPU (timestamps / CUDA events); 0: skip (default 500)")
    ap.add_argument("--copy-mib", type=int, default=None, help="copy-bandwidth buffer size in MiB (default 1024)")
    ap.add_argument("--poll-every", type=int, default=None,
                    help="sopt's poll_every (host reads of the skipped-step count); default: sopt's own default")
    ap.add_argument("--seed", type=int, default=0, help="seed of the mixed sizes and the random data")
    ap.add_argument("--torch-device", default="cuda", choices=("cuda", "cpu"),
                    help="where torch runs (default cuda; cpu only to exercise the code path)")
    ap.add_argument("--no-torch", action="store_true", help="time sopt only")
    ap.add_argument("--json", metavar="PATH", default=None, help="also write the results as JSON to PATH")
    ap.add_argument("--quick", action="store_true",
                    help="smoke test: sizes 64K,mixed:10:1K:16K, few steps, 16 MiB copy")
    args = ap.parse_args(argv)
    quick = {"sizes": "64K,mixed:10:1K:16K", "steps": 10, "min_time": 0.0, "rounds": 2, "warmup": 2,
             "gpu_steps": 5, "copy_mib": 16}
    full = {"sizes": "1M,16M,64M,mixed", "steps": 200, "min_time": 0.2, "rounds": 5, "warmup": 20,
            "gpu_steps": 500, "copy_mib": 1024}
    for key, value in (quick if args.quick else full).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    for key in ("steps", "rounds", "copy_mib", "max_steps"):
        if getattr(args, key) < 1:
            ap.error(f"--{key.replace('_', '-')} must be >= 1")
    for key in ("warmup", "gpu_steps"):
        if getattr(args, key) < 0:
            ap.error(f"--{key.replace('_', '-')} must be >= 0")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        specs = [OPTIMIZERS[k.strip().lower()] for k in args.optimizers.split(",") if k.strip()]
    except KeyError as exc:
        raise SystemExit(f"unknown optimizer {exc}; choose from {', '.join(OPTIMIZERS)}") from None
    try:
        models = [parse_size(t, args.seed) for t in args.sizes.split(",") if t.strip()]
    except ValueError as exc:
        raise SystemExit(str(exc)) from None

    torch_device, torch_note = torch_status(args.torch_device, args.no_torch)
    log(f"device: {sdev.get_device().info.adapter_name} ({sdev.device_kind()}); {torch_note}")
    meta = build_meta(args, torch_device, torch_note)

    copy: dict[str, Any] = {"mib": args.copy_mib}
    log("measuring copy bandwidth ...")
    copy["slangpy"] = slangpy_copy_bandwidth(args.copy_mib * MIB)
    if torch_device == "cuda":
        copy["torch"] = torch_copy_bandwidth(args.copy_mib * MIB, torch_device)
        copy["limit_source"] = "torch copy_"
    else:
        copy["limit_source"] = "slangpy copy_buffer (torch not on CUDA)"
    limit = (copy.get("torch") or copy["slangpy"])["gbps"]
    meta["copy"] = copy

    rows: list[Row] = []
    for spec in specs:
        for model in models:
            rows.append(run_config(spec, model, args, torch_device, limit))
    meta["bytes_per_element"] = {}
    for r in rows:
        meta["bytes_per_element"].setdefault(r.optimizer, r.bytes_per_element)

    text = "\n".join(header_lines(meta)) + "\n\n" + format_tables(rows)
    errors = [f"{r.optimizer} {r.size}: {k}: {v}" for r in rows for k, v in r.error.items()]
    if errors:
        text += "\n\nproblems:\n" + "\n".join("  " + e for e in errors)
    print(text, flush=True)
    if args.json:
        path = pathlib.Path(args.json)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"meta": meta, "results": [r.to_json() for r in rows]}, indent=2) + "\n")
        log(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
