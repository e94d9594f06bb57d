"""Identity encoding, tiny-cuda-nn's ``"Identity"``: the input scaled and shifted (kernels: slang_lib/nn/identity.slang)."""

from __future__ import annotations

from typing import Any, Iterator, Literal

import slangpy as spy
from pydantic import Field

from sopt.config.registry import ComponentConfig, register
from sopt.nn.batch import BatchBuffers, as_batch, batch_grad, batch_in, check_output, has_grad
from sopt.runtime.kernel import Function, launch
from sopt.nn.module import Module
from sopt.autodiff.parameter import Parameter
from sopt.utils.validation import check_float, check_int


class IdentityConfig(ComponentConfig):
    """The coordinates themselves, scaled and shifted: y = scale * x + offset."""

    otype: Literal["Identity"] = "Identity"
    scale: float = Field(1.0, ge=-1e6, le=1e6, description="factor on every input (output units per input unit)")
    offset: float = Field(0.0, ge=-1e6, le=1e6, description="added after scaling (output units)")


@register("encoding", "Identity", IdentityConfig)
class IdentityEncoding(Module):
    """``x (N, in_dims) -> y = scale * x + offset`` (N, in_dims), one thread per element; no parameters.
    Backward writes dL/dx = scale * dL/dy into ``x.grad`` when x carries one."""

    def __init__(self, in_dims: int, scale: float = 1.0, offset: float = 0.0) -> None:
        self.in_dims = check_int(in_dims, "IdentityEncoding in_dims", low=1)
        self.scale = check_float(scale, "IdentityEncoding scale")
        self.offset = check_float(offset, "IdentityEncoding offset")
        self.in_features = self.out_features = self.in_dims
        self._forward_fn = Function("nn/identity", "identity_forward")
        self._backprop_fn = Function("nn/identity", "identity_backprop").backward
        self._buffers = BatchBuffers()

    @classmethod
    def from_config(cls, config: IdentityConfig, in_dims: int, *, seed: int = 0,
                    deterministic: bool = False) -> "IdentityEncoding":
        """The encoding of ``config`` for ``in_dims`` inputs (``seed``, ``deterministic``: unused, no parameters)."""
        return cls(in_dims, scale=config.scale, offset=config.offset)

    def to_config(self) -> IdentityConfig:
        return IdentityConfig(scale=self.scale, offset=self.offset)

    def named_parameters(self) -> Iterator[tuple[str, Parameter]]:
        return iter(())

    def forward(self, x: Any, encoder: spy.CommandEncoder | None = None) -> spy.Tensor:
        x = as_batch(x, self.in_features, "IdentityEncoding")
        n = x.shape[0]
        y = self._buffers.get("y", n, self.out_features, grads=True)
        launch(self._forward_fn, encoder, t=spy.grid((n, self.in_dims)), x=batch_in(x, False),
               p=spy.float2(self.scale, self.offset), y=y)
        return y

    def backward(self, x: Any, y: spy.Tensor, encoder: spy.CommandEncoder | None = None) -> None:
        x = as_batch(x, self.in_features, "IdentityEncoding")
        n = x.shape[0]
        check_output(y, n, self.out_features, "IdentityEncoding")
        if has_grad(x):
            launch(self._backprop_fn, encoder, t=spy.grid((n, self.in_dims)), x=batch_in(x, True),
                   p=spy.float2(self.scale, self.offset), y=batch_grad(y))

    def __repr__(self) -> str:
        return f"IdentityEncoding(in_dims={self.in_dims}, scale={self.scale}, offset={self.offset})"
