"""Linear layer ``y = act(x W^T + b)`` with an optional fused activation (kernels: slang_lib/nn/linear.slang)."""

from __future__ import annotations

import math
from typing import Any, Iterator

import numpy as np
import slangpy as spy

from sopt.nn import init
from sopt.nn.activation import Activation, make_activation, slang_activation
from sopt.nn.batch import BatchBuffers, as_batch, batch_grad, batch_in, check_output, has_grad
from sopt.runtime.kernel import Function, dummy, launch
from sopt.nn.module import Module
from sopt.nn.seeding import derive_seed
from sopt.autodiff.parameter import Parameter
from sopt.utils.validation import check_bool, check_int

_MODULE = "nn/linear"
TILE = 4                # weight-gradient block per thread, TILE x TILE (linear.slang's TILE)
ROWS_PER_CHUNK = 512    # batch rows one weight-gradient thread sums before its atomic add
GROUP_THREADS = 256     # threads per group of the weight-gradient kernel (blocks of one chunk share a group)


def init_linear_(weight: Parameter, bias: Parameter | None, seed: int) -> None:
    """torch.nn.Linear's default initialisation of ``weight`` (out, in) and ``bias`` (out,), in place:
    W ~ kaiming_uniform(a=sqrt(5)) = U(-1/sqrt(in), 1/sqrt(in)), b ~ U(-1/sqrt(in), 1/sqrt(in)), from
    independent streams derived from ``seed``. (Anything with sopt.nn.init's ``shape`` and ``load`` will do:
    sopt.nn.mlp.initial_layer_weights initialises host arrays with it.)"""
    init.kaiming_uniform_(weight, a=math.sqrt(5.0), seed=derive_seed(seed, 0))
    if bias is not None:
        bound = 1.0 / math.sqrt(weight.shape[1])
        init.uniform_(bias, -bound, bound, seed=derive_seed(seed, 1))


class Linear(Module):
    """``y = act(x W^T + b)`` over a batch: x (N, in_features) -> y (N, out_features), float32.

    Parameters: ``weight`` (out_features, in_features) and ``bias`` (out_features,), initialised as
    torch.nn.Linear: W ~ kaiming_uniform(a=sqrt(5)) = U(-1/sqrt(in), 1/sqrt(in)), b ~ U(-1/sqrt(in), 1/sqrt(in)),
    from independent streams derived from ``seed``.

    ``activation``: an activation fused after the affine map, computed in the same kernel (None, a name
    such as ``"relu"``, a dict ``{"otype": ..., ...}`` or an Activation instance; see ``make_activation``).

    GPU work: forward is one dispatch (a thread per sample). Backward is at most two: the ``.bwds`` of the
    per-sample function (a hand-written derivative: per output, one load of the weight row serves the
    recomputed z = W x + b and dL/dx; the activation's derivative comes from Slang's autodiff), which
    writes dL/dx (when x has a gradient buffer) and, with an activation, dL/dz into a per-N buffer
    (skipped when neither is needed); then the weight and bias gradients as a
    reduction over the batch (a thread per 4x4 block of (W | b) and chunk of 512 rows, one atomic add per
    weight per chunk). Gradients accumulate into ``weight.grad`` / ``bias.grad``; their sum order over
    chunks is not fixed, so results can differ in the last bits between runs when N > 512.

    ``deterministic=True`` fixes that order: when N > 512 each chunk stores its block in a scratch tensor
    ((chunks, out_features * (in_features + 1)) floats, kept per batch size like the output) and a second
    dispatch sums the chunks in index order into the gradients, so they are bit-identical run to run.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, seed: int = 0,
                 activation: Any = None, deterministic: bool = False) -> None:
        self.deterministic = check_bool(deterministic, "Linear deterministic")
        self.in_features = check_int(in_features, "Linear in_features", low=1)
        self.out_features = check_int(out_features, "Linear out_features", low=1)
        bias = check_bool(bias, "Linear bias")
        seed = check_int(seed, "Linear seed", low=0)
        self.activation: Activation | None = make_activation(activation, "Linear activation")
        self.weight = Parameter(np.zeros((self.out_features, self.in_features), np.float32), name="weight")
        self.bias: Parameter | None = None
        if bias:
            self.bias = Parameter(np.zeros(self.out_features, np.float32), name="bias")
        init_linear_(self.weight, self.bias, seed)
        act = slang_activation(self.activation)[0]
        sizes = f"{self.in_features},{self.out_features}"
        self._forward_fn = Function(_MODULE, "linear_forward", sizes, act)
        self._backprop_fn = Function(_MODULE, "linear_backprop", sizes, act).backward
        self._tiles = (-(-self.out_features // TILE), -(-(self.in_features + int(bias)) // TILE))
        rows = max(1, min(self._tiles[0], GROUP_THREADS // self._tiles[1]))
        group = (1, rows, self._tiles[1]) if self._tiles[1] <= GROUP_THREADS else (1, 1, GROUP_THREADS)
        self._weight_grad_fn = Function(_MODULE, "linear_weight_grad", sizes, group_shape=group)
        if self.deterministic:
            self._partial_fn = Function(_MODULE, "linear_weight_grad_partial", sizes, group_shape=group)
            self._reduce_fn = Function(_MODULE, "linear_partials_reduce", sizes)
        self._buffers = BatchBuffers()

    def named_parameters(self) -> Iterator[tuple[str, Parameter]]:
        yield "weight", self.weight
        if self.bias is not None:
            yield "bias", self.bias

    @property
    def _act_params(self) -> spy.float2:
        return spy.float2(*slang_activation(self.activation)[1])

    def _weights(self, dz: spy.Tensor | None) -> dict[str, Any]:
        """The ``LinearWeights`` of linear.slang (parameter tensors fetched now: they move into an optimiser's arena)."""
        return {"weight": self.weight.values, "bias": self.bias.values if self.bias is not None else dummy(1),
                "has_bias": int(self.bias is not None), "dz": dz if dz is not None else dummy(2),
                "write_dz": int(dz is not None)}

    def forward(self, x: Any, encoder: spy.CommandEncoder | None = None) -> spy.Tensor:
        """y (N, out_features) for x (N, in_features); y carries a gradient buffer and is reused for the same N."""
        x = as_batch(x, self.in_features, "Linear")
        n = x.shape[0]
        y = self._buffers.get("y", n, self.out_features, grads=True)
        launch(self._forward_fn, encoder, n=spy.grid((n,)), x=batch_in(x, False), w=self._weights(None),
               act=self._act_params, y=y)
        return y

    def backward(self, x: Any, y: spy.Tensor, encoder: spy.CommandEncoder | None = None) -> None:
        """Accumulate dL/dW, dL/db from dL/dy in ``y.grad``; write dL/dx into ``x.grad`` when x has one."""
        x = as_batch(x, self.in_features, "Linear")
        n = x.shape[0]
        check_output(y, n, self.out_features, "Linear")
        want_dx = has_grad(x)
        # Without an activation dL/dz = dL/dy: the weight gradient reads y.grad directly.
        dz = self._buffers.get("dz", n, self.out_features) if self.activation is not None else None
        if dz is not None or want_dx:
            launch(self._backprop_fn, encoder, n=spy.grid((n,)), x=batch_in(x, want_dx), w=self._weights(dz),
                   act=self._act_params, y=batch_grad(y))
        chunks = -(-n // ROWS_PER_CHUNK)
        has_bias = int(self.bias is not None)
        bias_grad = self.bias.grad if self.bias is not None else dummy(1)
        dz_or_dy = dz if dz is not None else y.grad
        if self.deterministic and chunks > 1:   # one chunk: one atomic add per weight, already order-free
            cols = self.in_features + has_bias
            partial = self._buffers.get("partial", n, self.out_features * cols, rows=chunks)
            launch(self._partial_fn, encoder, t=spy.grid((chunks, *self._tiles)), x=x, dz=dz_or_dy, n_rows=n,
                   rows_per_chunk=ROWS_PER_CHUNK, has_bias=has_bias, partial=partial)
            launch(self._reduce_fn, encoder, t=spy.grid((self.out_features, cols)), partial=partial, n_chunks=chunks,
                   has_bias=has_bias, grad_weight=self.weight.grad, grad_bias=bias_grad)
            return
        launch(self._weight_grad_fn, encoder, t=spy.grid((chunks, *self._tiles)), x=x, dz=dz_or_dy, n_rows=n,
               rows_per_chunk=ROWS_PER_CHUNK, has_bias=has_bias, grad_weight=self.weight.grad, grad_bias=bias_grad)

    def __repr__(self) -> str:
        act = f", activation={self.activation!r}" if self.activation is not None else ""
        det = ", deterministic=True" if self.deterministic else ""
        return (f"Linear(in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}{act}{det})")
