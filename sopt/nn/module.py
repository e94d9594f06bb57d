"""Module: the uniform interface of sopt's differentiable building blocks (layers, activations, encodings,
containers, and later physics simulators), and of anything the Trainer drives.

Data flows as SlangPy tensors on the GPU, batch first: ``x`` has shape ``(N, in_features)``, float32.

Contract:
- ``forward(x, encoder=None) -> y``: records (or, without an encoder, submits) the dispatches computing
  ``y`` of shape ``(N, out_features)``. ``y`` carries a gradient buffer (``y.grad``) of its shape. The module
  may reuse ``y``'s storage between calls with the same N (no allocation per step).
- ``backward(x, y, encoder=None)``: given ``dL/dy`` in ``y.grad``, accumulates ``dL/dparam`` into every
  Parameter's gradient and, when ``x`` carries a gradient buffer, writes ``dL/dx`` into ``x.grad``
  (overwriting it, so no clearing dispatch is needed). It is ``.bwds`` of the forward kernel.
- ``parameters()``: the Parameters, in a fixed order; ``named_parameters()``: (name, Parameter) pairs.
- ``in_features`` / ``out_features``: the sizes of the last dimension in and out.
"""

from __future__ import annotations

from typing import Iterator

import slangpy as spy

from sopt.parameter import Parameter


class Module:
    in_features: int
    out_features: int

    def forward(self, x: spy.Tensor, encoder: spy.CommandEncoder | None = None) -> spy.Tensor:
        raise NotImplementedError

    def backward(self, x: spy.Tensor, y: spy.Tensor, encoder: spy.CommandEncoder | None = None) -> None:
        raise NotImplementedError

    def named_parameters(self) -> Iterator[tuple[str, Parameter]]:
        return iter(())

    def parameters(self) -> list[Parameter]:
        return [p for _, p in self.named_parameters()]

    def __call__(self, x: spy.Tensor, encoder: spy.CommandEncoder | None = None) -> spy.Tensor:
        return self.forward(x, encoder)
