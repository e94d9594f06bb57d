"""TensorCoreMLP (half-operand tensor-core MMAs) against FullyFusedMLP (float32) on CUDA: accuracy and speed.

Issue 21 part 1's network: 32 inputs (a hash grid's 16 levels x 2 features) -> 2 hidden layers of 64 ReLU -> 3
outputs. Both networks get the same float32 parameters.

Accuracy (n = 2^14, inputs uniform in [-1, 1], dL/dy = N(0, 1) / n as from a mean loss): the relative error
max|tc - ff| / max|ff| of the outputs y, of each layer's weight and bias gradients and of dL/dx. Half operands
round to 2^-11 relative, so expect ~1e-3 on y and a few 1e-3 on the gradients.

Speed, for n = 2^14, 2^18, 2^20: ms per forward (training mode, saving activations) and per forward + backward
(with dL/dx, as under a hash grid) of each network, one command buffer per call as Trainer records them,
wall clock over the repetitions with the GPU synchronised at both ends (so host time per call is included:
it matters at 2^14 only), both networks timed in this one run.

    SOPT_DEVICE=cuda python3 benchmarks/tensor_core_mlp_check.py [--batches 14,18,20] [--reps 30]

Prints one accuracy table and one timing table; exits 1 if the output or the output layer's gradients differ by more
than 5e-2 (wrong, not just half). The hidden layers' gradients and dL/dx are printed but not judged here: a ReLU unit
within ~1e-3 of its kink can switch between half and float32 and move those by a few percent (measured on the H100:
2-3e-2 and 0.15); tests/nn/test_tensor_core_mlp.py checks them against a float64 backward through the kernel's own
saved activations.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np
import slangpy as spy

from sopt.runtime import device as dev
from sopt.nn.fully_fused_mlp import FullyFusedMLP
from sopt.nn.tensor_core_mlp import TensorCoreMLP
from sopt.nn.vjp import vjp

IN, HIDDEN, LAYERS, OUT = 32, 64, 2, 3


def rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a - b).max() / max(float(np.abs(b).max()), 1e-30))


def run(m, x: spy.Tensor, backward: bool) -> spy.Tensor:
    encoder = dev.get_device().create_command_encoder()
    y = m.forward(x, encoder)
    if backward:
        m.backward(x, y, encoder)
    dev.submit(encoder)
    return y


def accuracy(ff: FullyFusedMLP, tc: TensorCoreMLP, n: int, rng: np.random.Generator) -> float:
    x_np = rng.uniform(-1, 1, (n, IN)).astype(np.float32)
    dy_np = (rng.standard_normal((n, OUT)) / n).astype(np.float32)
    (y_ff, dx_ff, g_ff), (y_tc, dx_tc, g_tc) = (vjp(m, x_np, dy_np) for m in (ff, tc))
    rows = [("y", rel(y_tc, y_ff))]
    for j in range(len(ff.layers)):   # vjp's gradients are keyed per layer ("0.weight", "0.bias", ...)
        (w_tc, b_tc), (w_ff, b_ff) = ((g[f"{j}.weight"], g[f"{j}.bias"]) for g in (g_tc, g_ff))
        rows += [(f"dL/dW_{j}", rel(w_tc, w_ff)), (f"dL/db_{j}", rel(b_tc, b_ff))]
    rows.append(("dL/dx", rel(dx_tc, dx_ff)))
    print(f"accuracy at n = {n} (relative to FullyFusedMLP float32, max|diff| / max|ff|):")
    for name, e in rows:
        print(f"  {name:10s} {e:.2e}")
    last = len(ff.layers) - 1
    judged = ("y", f"dL/dW_{last}", f"dL/db_{last}")
    return max(e for name, e in rows if name in judged)


def time_calls(m, x: spy.Tensor, backward: bool, reps: int) -> float:
    """ms per call (forward, or forward + backward), wall clock with the GPU synchronised at both ends."""
    for _ in range(3):
        run(m, x, backward)
    dev.synchronize()
    t = time.perf_counter()
    for _ in range(reps):
        run(m, x, backward)
    dev.synchronize()
    return (time.perf_counter() - t) / reps * 1e3


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", default="14,18,20", help="log2 batch sizes to time")
    parser.add_argument("--reps", type=int, default=30, help="timed calls per batch and network")
    args = parser.parse_args()
    if dev.device_kind() != "cuda":
        print("tensor_core_mlp_check needs CUDA (set SOPT_DEVICE=cuda on an NVIDIA GPU)", file=sys.stderr)
        return 2
    device = dev.get_device()
    print(f"device: {device.info.adapter_name}; network {IN} -> {LAYERS} x {HIDDEN} ReLU -> {OUT}")
    rng = np.random.default_rng(0)
    ff = FullyFusedMLP(IN, OUT, hidden_features=HIDDEN, hidden_layers=LAYERS, seed=0)
    tc = TensorCoreMLP(IN, OUT, hidden_features=HIDDEN, hidden_layers=LAYERS, seed=0)
    tc.params.load(ff.params.numpy())
    t0 = time.perf_counter()
    worst = accuracy(ff, tc, 1 << 14, rng)
    print(f"(first calls, compiling included: {time.perf_counter() - t0:.1f} s)")
    print(f"\n{'n':>8s} {'ff fwd ms':>10s} {'tc fwd ms':>10s} {'x':>6s} {'ff f+b ms':>10s} {'tc f+b ms':>10s} {'x':>6s}")
    for log_n in (int(b) for b in args.batches.split(",")):
        n = 1 << log_n
        x = spy.Tensor.from_numpy(device, rng.uniform(-1, 1, (n, IN)).astype(np.float32)).with_grads(zero=True)
        times = {}
        for name, m in (("ff", ff), ("tc", tc)):
            y = m.forward(x)
            y.grad.copy_from_numpy(np.full((n, OUT), 1.0 / n, np.float32))
            times[name] = (time_calls(m, x, False, args.reps), time_calls(m, x, True, args.reps))
        (ff_f, ff_fb), (tc_f, tc_fb) = times["ff"], times["tc"]
        print(f"{'2^' + str(log_n):>8s} {ff_f:10.3f} {tc_f:10.3f} {ff_f / tc_f:6.2f} {ff_fb:10.3f} {tc_fb:10.3f} "
              f"{ff_fb / tc_fb:6.2f}")
    if worst > 5e-2:
        print(f"FAIL: the output or the output layer's gradients differ by {worst:.2e}, more than half precision "
              "explains", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
