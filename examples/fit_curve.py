"""Fit a cubic to noisy samples with Adam: a Parameter, a differentiable Slang function, .bwds, opt.step().

Run: python examples/fit_curve.py   (prints the fitted coefficients next to the true ones)
"""

from __future__ import annotations

import pathlib

import numpy as np
import slangpy as spy

import sopt

TRUE = np.array([0.5, -1.0, -2.0, 1.0])  # y = 0.5 x^3 - x^2 - 2x + 1


def fit_cubic(steps: int = 300, n: int = 256, seed: int = 0) -> tuple[np.ndarray, float]:
    """Coefficients fitted to ``n`` noisy samples of TRUE on [-2, 2], and the final mean squared error."""
    device = sopt.get_device()
    module = spy.Module.load_from_file(device, str(pathlib.Path(__file__).with_name("fit_curve.slang")))
    rng = np.random.default_rng(seed)
    x = rng.uniform(-2, 2, n).astype(np.float32)
    y = (np.polyval(TRUE, x) + rng.normal(0, 0.05, n)).astype(np.float32)
    xs, ys = spy.Tensor.from_numpy(device, x), spy.Tensor.from_numpy(device, y)
    coeffs = sopt.Parameter(np.zeros(4), name="coeffs")
    opt = sopt.optim.Adam([coeffs], lr=0.05)
    errors = spy.Tensor.empty(device, (n,), "float").with_grads()
    errors.grad.copy_from_numpy(np.ones(n, np.float32))  # dLoss/d(error_i) = 1: the loss is their sum
    for _ in range(steps):
        args = dict(coeffs=coeffs.tensor, x=xs, y=ys, inv_count=1.0 / n, _result=errors)
        module.cubic_squared_error.bwds(**args)   # gradient of the MSE into coeffs.grad
        opt.step()                                # Adam update; the gradient is zeroed as it is consumed
    module.cubic_squared_error(coeffs=coeffs.tensor, x=xs, y=ys, inv_count=1.0 / n, _result=errors)
    return coeffs.numpy(), float(errors.to_numpy().sum())


if __name__ == "__main__":
    fitted, mse = fit_cubic()
    print(f"device: {sopt.device_kind()} ({sopt.get_device().info.adapter_name})")
    print("true   coefficients:", TRUE)
    print("fitted coefficients:", np.round(fitted, 3))
    print(f"final MSE: {mse:.5f}  (noise variance 0.0025)")
