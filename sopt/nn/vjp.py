"""vjp: a module's output and vector-Jacobian products, numpy in and out (for tests and debugging)."""

from __future__ import annotations

from typing import Any

import numpy as np
import slangpy as spy

from sopt.runtime.device import get_device
from sopt.nn.batch import write_batch
from sopt.nn.module import Module
from sopt.autodiff.parameter import Parameter
from sopt.utils.validation import as_float32_array


def unique_parameters(module: Module) -> list[tuple[str, Parameter]]:
    """``module.named_parameters()`` with a Parameter reached under several names listed once (first name)."""
    seen: set[int] = set()
    out = []
    for name, p in module.named_parameters():
        if id(p) not in seen:
            seen.add(id(p))
            out.append((name, p))
    return out


def forward_numpy(module: Module, x: Any) -> np.ndarray:
    """``module(x)`` for a host batch ``x`` (converted to float32), as a float32 numpy array (waits for the GPU)."""
    x32 = _batch(module, x)
    y = module.forward(spy.Tensor.from_numpy(get_device(), x32))
    return y.to_numpy().reshape(tuple(y.shape)).copy()


def vjp(module: Module, x: Any, dy: Any) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    """``(y, dx, grads)``: ``y = module(x)``, ``dx = dy^T dy/dx`` and ``grads[name] = dy^T dy/dparam``.

    ``x`` (N, in_features) and ``dy`` (N, out_features) are any finite float arrays, converted to float32;
    outputs are float32 numpy arrays. Side effects: none on the parameters. Each parameter's gradient is
    saved, zeroed, filled by the backward pass, read, and restored to the saved value, so calling vjp
    between a training step's backward and its optimiser step leaves that step's gradients intact.
    The module's per-N output buffer is overwritten, as by any forward call. Waits for the GPU.
    """
    x32 = _batch(module, x)
    device = get_device()
    xt = spy.Tensor.from_numpy(device, x32).with_grads(zero=True)
    y = module.forward(xt)
    dy32 = as_float32_array(dy, "vjp dy", tuple(y.shape))
    params = unique_parameters(module)
    saved = [p.grad_numpy() for _, p in params]
    try:
        for _, p in params:
            p.zero_grad()
        write_batch(y.grad, dy32)
        module.backward(xt, y)
        y_out = y.to_numpy().reshape(tuple(y.shape)).copy()
        dx = xt.grad.to_numpy().reshape(x32.shape).copy()
        grads = {name: p.grad_numpy() for name, p in params}
    finally:
        for (_, p), g in zip(params, saved):
            p.set_grad(g)
    return y_out, dx, grads


def _batch(module: Module, x: Any) -> np.ndarray:
    x32 = as_float32_array(x, "x")
    if x32.ndim != 2:
        raise ValueError(f"x must have shape (N, features), got shape {x32.shape}")
    if module.in_features is not None and x32.shape[1] != module.in_features:
        raise ValueError(f"x has {x32.shape[1]} features, {type(module).__name__} expects {module.in_features}")
    return x32
