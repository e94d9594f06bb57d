"""Module: the uniform interface of sopt's differentiable building blocks (layers, activations, encodings,
containers, and later physics simulators), and of anything the Trainer drives.

Data flows as SlangPy tensors on the GPU, batch first: ``x`` has shape ``(N, in_features)``, float32.

Contract:
- ``forward(x, encoder=None) -> y``: records (or, without an encoder, submits) the dispatches computing
  ``y`` of shape ``(N, out_features)``. ``y`` carries a gradient buffer (``y.grad``) of its shape. The module
  may reuse ``y``'s storage between calls with the same N (no allocation per step).
- ``backward(x, y, encoder=None)``: given ``dL/dy`` in ``y.grad``, accumulates ``dL/dparam`` into every
  Parameter's gradient and, when ``x`` carries a gradient buffer, writes ``dL/dx`` into ``x.grad``
  (overwriting it, so no clearing dispatch is needed). ``x`` and ``y`` are those of the same ``forward``
  call. sopt.nn's layers implement it as ``.bwds`` of a differentiable Slang function computing the
  forward pass (one whose primal has no side effects, so Slang's re-run of the primal keeps only what
  the derivatives read), plus the reductions their parameter gradients need.
- ``parameters()``: the Parameters, in a fixed order; ``named_parameters()``: (name, Parameter) pairs.
- ``in_features`` / ``out_features``: the sizes of the last dimension in and out; None for a module that
  accepts any size and preserves it (the element-wise activations).

On a ``sopt.Tape`` (``with tape: y = module(x)``) each call is recorded with its own output, so a module may
be called any number of times per step; the tape runs ``backward`` for each call in reverse.

Bad input (wrong feature count, a dtype other than float32, a non-2D batch) raises ValueError naming what
was expected and what came, before any GPU work (sopt.nn.batch.as_batch).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterator

import numpy as np
import slangpy as spy

from sopt.nn.batch import as_batch
from sopt.parameter import Parameter
from sopt.tape import current_tape

if TYPE_CHECKING:
    from sopt.tape import Tape


def _recorded(encoder: spy.CommandEncoder) -> None:
    """The forward of a module call was recorded by ``forward`` itself before ``Tape.record``."""


class Module:
    in_features: int | None
    out_features: int | None

    def forward(self, x: spy.Tensor, encoder: spy.CommandEncoder | None = None) -> spy.Tensor:
        raise NotImplementedError

    def backward(self, x: spy.Tensor, y: spy.Tensor, encoder: spy.CommandEncoder | None = None) -> None:
        raise NotImplementedError

    def named_parameters(self) -> Iterator[tuple[str, Parameter]]:
        return iter(())

    def parameters(self) -> list[Parameter]:
        return [p for _, p in self.named_parameters()]

    def __call__(self, x: Any, encoder: spy.CommandEncoder | None = None) -> spy.Tensor:
        """``forward(x, encoder)``; while a ``sopt.Tape`` records, the call is recorded on it (see tape_forward)."""
        tape = current_tape()
        if tape is None:
            return self.forward(x, encoder)
        if encoder is not None and encoder is not tape.encoder:
            raise ValueError(f"{type(self).__name__}: called with an encoder inside 'with tape:'; the tape records "
                             "into its own encoder")
        return self.tape_forward(tape, x)

    def tape_forward(self, tape: "Tape", x: Any) -> spy.Tensor:
        """Record one call on ``tape``: ``forward`` now (its output from the tape's pool), ``backward(x, y)``
        at ``tape.backward`` (dL/dx written into x's gradient, or redirected by the tape when x has other
        consumers). Containers override it to record their children's calls instead."""
        if isinstance(x, np.ndarray):
            x = as_batch(x, getattr(self, "in_features", None), type(self).__name__)
        y = self.forward(x, tape.encoder)
        tape.record(type(self).__name__, _recorded, lambda enc, redirect: self.backward(redirect[0], y, enc),
                    reads=[x], writes=[y], write_grads=[x], params=self.parameters())
        return y
