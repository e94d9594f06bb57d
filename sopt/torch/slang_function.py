"""A user's Slang function (``sopt.load_module``) called with torch tensors, under torch autograd.

::

    wave = sopt.load_module("wave.slang")              # [Differentiable] float wave(IDiffTensor<float,1> p, float x)
    p = torch.tensor([1.0, 1.0], requires_grad=True)
    y = wave.wave(p, x)                                # x a torch tensor too: y is a torch tensor
    torch.nn.functional.mse_loss(y, target).backward() # SlangPy's .bwds -> p.grad

Any call of a :class:`sopt.autodiff.slang_module.SlangFunction` with a torch tensor among its arguments comes here. The
tensors become sopt arrays (with a gradient buffer where torch wants one), the call is recorded on a sopt tape
exactly as a sopt call (so the same checks and error messages: an unbindable argument, a result that is no
float/floatN/floatRxC, ``_result=``), and the result comes back as a new torch tensor; torch's backward runs the
function's ``.bwds`` into the inputs' gradients. sopt Parameters among the arguments still receive their
gradients in sopt (``param.grad``), for a sopt optimiser.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.autograd.function import once_differentiable

from sopt.autodiff import tape as tp
from sopt.torch import arrays, placement
from sopt.torch.session import Session


class _Spec:
    def __init__(self, function: Any, args: tuple, kwargs: dict[str, Any], where: list[Any]) -> None:
        self.function, self.args, self.kwargs, self.where = function, args, kwargs, where


def call(function: Any, args: tuple, kwargs: dict[str, Any]) -> torch.Tensor:
    """``function(*args, **kwargs)`` with torch tensors among the arguments (see the module docstring)."""
    label = f"{function.module.name}.{function.name}"
    where: list[Any] = []   # argument index (int) or keyword (str) of each torch tensor
    tensors: list[torch.Tensor] = []
    for key, value in list(enumerate(args)) + list(kwargs.items()):
        if isinstance(value, torch.Tensor):
            what = f"{label} argument {key}" if isinstance(key, int) else f"{label} argument {key!r}"
            tensors.append(placement.check_tensor(value, what))
            where.append(key)
    return _SlangCall.apply(_Spec(function, args, kwargs, where), *tensors)


class _SlangCall(torch.autograd.Function):

    @staticmethod
    def forward(ctx: Any, spec: _Spec, *tensors: torch.Tensor) -> torch.Tensor:
        wants = ctx.needs_input_grad[1:]
        need = any(wants)
        session = Session()
        with session.forward() as tape:
            inputs = [arrays.new_sopt(t, w, tape.encoder) for t, w in zip(tensors, wants)]
            args, kwargs = list(spec.args), dict(spec.kwargs)
            for key, value in zip(spec.where, inputs):
                if isinstance(key, int):
                    args[key] = value
                else:
                    kwargs[key] = value
            out = spec.function(*args, **kwargs)
            seed = tp.new_tensor(tuple(out.shape), grads=False) if need else None
        y = arrays.to_torch(out)
        if not need:
            session.release()
            return y
        ctx.session, ctx.inputs, ctx.out, ctx.seed = session, inputs, out, seed
        return y

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, gy: torch.Tensor) -> tuple[Any, ...]:
        wants = ctx.needs_input_grad[1:]
        with ctx.session.backward({ctx.out: ctx.seed}) as enc:
            arrays.into_sopt(gy.to(torch.float32).contiguous(), ctx.seed, enc)
            for t, w in zip(ctx.inputs, wants):
                if w:
                    tp.clear(enc, t.grad)   # the tape adds into them
        try:
            grads = [arrays.to_torch(t.grad) if w else None for t, w in zip(ctx.inputs, wants)]
        finally:
            ctx.session.release()
        return (None, *grads)
