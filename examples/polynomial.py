"""The SlangPy guide's polynomial example on sopt's device: y = 2x^2 + 8x - 1 and dy/dx = 4x + 8 at x = 1..4.

Run: python examples/polynomial.py   ->  y = [9, 23, 41, 63], dy/dx = [12, 16, 20, 24]
"""

from __future__ import annotations

import pathlib

import numpy as np
import slangpy as spy

import sopt


def polynomial(x_values: np.ndarray, a: float = 2.0, b: float = 8.0, c: float = -1.0) -> tuple[np.ndarray, np.ndarray]:
    """(a x^2 + b x + c, its derivative) for float32 ``x_values``, through a Slang kernel and ``.bwds``."""
    device = sopt.get_device()
    module = spy.Module.load_from_file(device, str(pathlib.Path(__file__).with_name("polynomial.slang")))
    x = spy.Tensor.from_numpy(device, np.asarray(x_values, np.float32)).with_grads(zero=True)
    result = spy.Tensor.empty(device, x.shape, "float")
    module.polynomial(idx=spy.grid(x.shape), a=a, b=b, c=c, x=x, result=result)
    result = result.with_grads()
    result.grad.copy_from_numpy(np.ones(x.shape, np.float32))
    module.polynomial.bwds(idx=spy.grid(x.shape), a=a, b=b, c=c, x=x, result=result)
    return result.to_numpy(), x.grad.to_numpy()


if __name__ == "__main__":
    y, dy = polynomial(np.array([1, 2, 3, 4]))
    print("y     =", y)
    print("dy/dx =", dy)
