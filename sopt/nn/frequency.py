"""Frequency (Fourier feature / NeRF positional) encoding (kernels: slang_lib/nn/frequency.slang)."""

from __future__ import annotations

from typing import Any, Iterator, Literal

import slangpy as spy
from pydantic import Field

from sopt.config.registry import ComponentConfig, register
from sopt.config.schema import StrictModel
from sopt.nn.batch import BatchBuffers, as_batch, batch_grad, batch_in, check_output, has_grad
from sopt.runtime.kernel import Function, launch
from sopt.nn.module import Module
from sopt.autodiff.parameter import Parameter
from sopt.utils.validation import check_int

MAX_FREQUENCIES = 24   # at 2^23 pi x a float32 argument has no bits left below the period: sin/cos are noise


class FrequencyConfig(ComponentConfig):
    """sin and cos of 2^k pi x for k < n_frequencies, per input dimension (NeRF's positional encoding)."""

    otype: Literal["Frequency"] = "Frequency"
    n_frequencies: int = Field(12, ge=1, le=MAX_FREQUENCIES, description="frequencies per input dimension "
                                                                          "(output width 2 n_frequencies per input)")


@register("encoding", "Frequency", FrequencyConfig)
class FrequencyEncoding(Module):
    """``x (N, in_dims) -> y (N, in_dims * n_freqs * 2)`` with tiny-cuda-nn's ``"Frequency"`` layout::

        y[:, (d * n_freqs + k) * 2]     = sin(2^k * pi * x[:, d])
        y[:, (d * n_freqs + k) * 2 + 1] = cos(2^k * pi * x[:, d])      for d < in_dims, k < n_freqs

    i.e. per input dimension, frequencies 2^0 pi ... 2^(n_freqs-1) pi, each as a (sin, cos) pair (NeRF's
    gamma(p) without p itself: x is not included; NeRF uses x in [-1, 1], tiny-cuda-nn x in [0, 1]).
    No parameters. Backward writes dL/dx = sum_k 2^k pi (cos(.) dL/dsin - sin(.) dL/dcos) into ``x.grad``
    when x carries one, and does nothing otherwise.
    """

    def __init__(self, in_dims: int, n_freqs: int) -> None:
        self.in_dims = check_int(in_dims, "FrequencyEncoding in_dims", low=1)
        self.n_freqs = check_int(n_freqs, "FrequencyEncoding n_freqs", low=1)
        if self.n_freqs > MAX_FREQUENCIES:
            raise ValueError(f"FrequencyEncoding n_freqs must be <= {MAX_FREQUENCIES}, got {n_freqs}")
        self.in_features = self.in_dims
        self.out_features = self.in_dims * self.n_freqs * 2
        sizes = f"{self.in_dims},{self.n_freqs}"
        self._forward_fn = Function("nn/frequency", "frequency_forward", sizes)
        self._backprop_fn = Function("nn/frequency", "frequency_backprop", sizes).backward
        self._buffers = BatchBuffers()

    @classmethod
    def from_config(cls, config: FrequencyConfig, in_dims: int, *, seed: int = 0,
                    deterministic: bool = False) -> "FrequencyEncoding":
        """The encoding of ``config`` for ``in_dims`` inputs (``seed``, ``deterministic``: unused, no parameters)."""
        return cls(in_dims, config.n_frequencies)

    def to_config(self) -> FrequencyConfig:
        return FrequencyConfig(n_frequencies=self.n_freqs)

    def named_parameters(self) -> Iterator[tuple[str, Parameter]]:
        return iter(())

    def forward(self, x: Any, encoder: spy.CommandEncoder | None = None) -> spy.Tensor:
        x = as_batch(x, self.in_features, "FrequencyEncoding")
        n = x.shape[0]
        y = self._buffers.get("y", n, self.out_features, grads=True)
        launch(self._forward_fn, encoder, n=spy.grid((n,)), x=batch_in(x, False), y=y)
        return y

    def backward(self, x: Any, y: spy.Tensor, encoder: spy.CommandEncoder | None = None) -> None:
        x = as_batch(x, self.in_features, "FrequencyEncoding")
        n = x.shape[0]
        check_output(y, n, self.out_features, "FrequencyEncoding")
        if has_grad(x):
            launch(self._backprop_fn, encoder, n=spy.grid((n,)), x=batch_in(x, True), y=batch_grad(y))

    def __repr__(self) -> str:
        return f"FrequencyEncoding(in_dims={self.in_dims}, n_freqs={self.n_freqs})"


def fused_frequencies(encoding: Any, owner: str) -> int:
    """F of the Frequency encoding an MLP fuses into its first layer (FullyFusedMLP, TensorCoreMLP), 0 for None.

    ``encoding``: None, a Frequency encoding's config, or the dict ``{"otype": "Frequency", "n_frequencies": F}``
    (F defaults to 12). ValueError naming ``owner`` for another encoding's config (it goes before the MLP in a
    Sequential) or any other value."""
    if isinstance(encoding, StrictModel):
        if getattr(encoding, "otype", None) != "Frequency":
            raise ValueError(f"{owner} fuses only a Frequency encoding, got {encoding.otype!r}; put other encodings "
                             "before it in a sopt.nn.Sequential")
        encoding = encoding.model_dump()
    if encoding is None:
        return 0
    if not isinstance(encoding, dict) or encoding.get("otype") != "Frequency" or \
            set(encoding) - {"otype", "n_frequencies"}:
        raise ValueError(f"{owner}: encoding must be None or {{'otype': 'Frequency', 'n_frequencies': F}}, "
                         f"got {encoding!r}")
    return check_int(encoding.get("n_frequencies", 12), f"{owner} n_frequencies", low=1)
