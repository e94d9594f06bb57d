"""Module: the uniform interface of sopt's differentiable building blocks (layers, activations, encodings,
containers, and later physics simulators), and of anything the Trainer drives.

Data flows as SlangPy tensors on the GPU, batch first: ``x`` has shape ``(N, in_features)``, float32.

Contract:
- ``forward(x, encoder=None) -> y``: records (or, without an encoder, submits) the dispatches computing
  ``y`` of shape ``(N, out_features)``. ``y`` carries a gradient buffer (``y.grad``) of its shape and strides. The
  module may reuse ``y``'s storage between calls with the same N (no allocation per step). ``y`` is row-major
  unless the module has an ``output_layout`` set to "column_major" (see ``preferred_input_layout``).
- ``backward(x, y, encoder=None)``: given ``dL/dy`` in ``y.grad``, accumulates ``dL/dparam`` into every
  Parameter's gradient and, when ``x`` carries a gradient buffer, writes ``dL/dx`` into ``x.grad``
  (overwriting it, so no clearing dispatch is needed). ``x`` and ``y`` are those of the same ``forward``
  call. sopt.nn's layers implement it as ``.bwds`` of a differentiable Slang function computing the
  forward pass (one whose primal has no side effects, so Slang's re-run of the primal keeps only what
  the derivatives read), plus the reductions their parameter gradients need.
- ``parameters()``: the Parameters, in a fixed order; ``named_parameters()``: (name, Parameter) pairs.
- ``state_dict()`` / ``load_state_dict(sd, strict=True)``: torch's, with float32 numpy arrays; keys are
  ``named_parameters()``'s. One name per parameter: FullyFusedMLP and TensorCoreMLP keep every layer in one
  flat Parameter for their kernels, and name each layer's weight and bias as an MLP does (``"0.weight"``,
  ``"0.bias"``, ...), as windows of it (sopt.autodiff.parameter_window), everywhere a parameter is named.
- ``in_features`` / ``out_features``: the sizes of the last dimension in and out; None for a module that
  accepts any size and preserves it (the element-wise activations).

On a ``sopt.Tape`` (``with tape: y = module(x)``) each call is recorded with its own output, so a module may
be called any number of times per step; the tape runs ``backward`` for each call in reverse.

Bad input (wrong feature count, a dtype other than float32, a non-2D batch) raises ValueError naming what
was expected and what came, before any GPU work (sopt.nn.batch.as_batch).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING, Any, Iterator, Mapping, NamedTuple

import numpy as np
import slangpy as spy

from sopt.nn.batch import as_batch
from sopt.autodiff.parameter import Parameter
from sopt.autodiff.tape import current_tape
from sopt.utils.validation import as_float32_array, check_bool

if TYPE_CHECKING:
    from sopt.autodiff.tape import Tape


def _recorded(encoder: spy.CommandEncoder) -> None:
    """The forward of a module call was recorded by ``forward`` itself before ``Tape.record``."""


class IncompatibleKeys(NamedTuple):
    """What ``load_state_dict(..., strict=False)`` skipped (torch's ``_IncompatibleKeys``)."""

    missing_keys: list[str]
    unexpected_keys: list[str]


class Module:
    in_features: int | None
    out_features: int | None
    training: bool = True   # torch's flag: modules that save activations for backward only do so while training
    # The layout of the (N, in_features) input this module reads best: "row_major" (each sample's features
    # contiguous) or "column_major" (each feature's N values contiguous: sopt.nn.batch.column_major). Sequential
    # has the module before it write that layout where it can (an encoding's `output_layout`), as tiny-cuda-nn asks
    # an encoding for its network's preferred input layout.
    preferred_input_layout: str = "row_major"

    def train(self, mode: bool = True) -> "Module":
        """Training mode (``mode``) or evaluation mode; returns the module, as torch's ``train`` does."""
        self.training = mode
        return self

    def eval(self) -> "Module":
        """Evaluation mode: ``train(False)``."""
        return self.train(False)

    def forward(self, x: spy.Tensor, encoder: spy.CommandEncoder | None = None) -> spy.Tensor:
        raise NotImplementedError

    def backward(self, x: spy.Tensor, y: spy.Tensor, encoder: spy.CommandEncoder | None = None) -> None:
        raise NotImplementedError

    def named_parameters(self) -> Iterator[tuple[str, Parameter]]:
        return iter(())

    def parameters(self) -> list[Parameter]:
        return [p for _, p in self.named_parameters()]

    def storage_parameters(self) -> list[Parameter]:
        """The Parameters holding this module's values, whose versions a tape checks: ``parameters()``, or for a
        module whose parameters are windows of one flat Parameter, that Parameter."""
        return self.parameters()

    def state_dict(self) -> "OrderedDict[str, np.ndarray]":
        """Host float32 copies of the parameters by name (torch's ``Module.state_dict``); keys as
        ``named_parameters()``. Waits for the GPU."""
        return OrderedDict((name, p.numpy()) for name, p in self.named_parameters())

    def load_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True) -> IncompatibleKeys:
        """Copy ``state_dict``'s arrays into the parameters (torch semantics).

        Every entry is checked before anything changes: keys this module lacks (unexpected) and keys it has
        that ``state_dict`` lacks (missing) are errors when ``strict``; a wrong shape or a value that is not a
        finite float32 array is always one. All of them are reported in one ValueError. Returns the missing
        and unexpected keys (empty when ``strict``).
        """
        who = f"{type(self).__name__}.load_state_dict"
        strict = check_bool(strict, f"{who} strict")
        if not isinstance(state_dict, Mapping):
            raise ValueError(f"{who}: expected a mapping of parameter name -> array (a state_dict()), got "
                             f"{type(state_dict).__name__}")
        shapes = {name: value.shape for name, value in self.state_dict().items()}
        missing = [k for k in shapes if k not in state_dict]
        unexpected = [str(k) for k in state_dict if k not in shapes]
        problems, values = [], {}
        if strict and missing:
            problems.append(f"missing keys {missing}")
        if strict and unexpected:
            problems.append(f"unexpected keys {unexpected}")
        for name, shape in shapes.items():
            if name in state_dict:
                try:
                    values[name] = as_float32_array(state_dict[name], repr(name), shape)
                except ValueError as e:
                    problems.append(str(e))
        if problems:
            raise ValueError(f"{who}: {'; '.join(problems)} (expected keys and shapes: {shapes})")
        self._load_state(values)
        return IncompatibleKeys(missing if not strict else [], unexpected if not strict else [])

    def _load_state(self, values: dict[str, np.ndarray]) -> None:
        """Write checked float32 ``values`` (a subset of ``state_dict()``'s keys and shapes) into the parameters."""
        for name, p in self.named_parameters():
            if name in values:
                p.load(values[name])

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
        # a duck-typed model (the Trainer's contract: forward, backward, parameters) has no storage_parameters
        params = self.storage_parameters() if isinstance(self, Module) else list(self.parameters())
        tape.record(type(self).__name__, _recorded, lambda enc, redirect: self.backward(redirect[0], y, enc),
                    reads=[x], writes=[y], write_grads=[x], params=params)
        return y
