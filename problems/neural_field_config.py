"""What the neural-field problems' configs (neural_field_image, neural_sdf, neural_radiance) share: the sizes an
``encoding`` + ``network`` pair implies and the checks of them only the two sections together decide.

A problem's schema subclasses :class:`NeuralFieldConfig` instead of ``ProblemConfig`` and states its network's
widths as class constants; its own fields (``encoding``, ``network`` and ``deterministic`` among them, with the
problem's defaults) stay in its own class, so ``sopt config`` lists them in the problem's order.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import Field

from sopt.experiments.problem import ProblemConfig
from sopt.nn.fully_fused_mlp import MAX_WIDTH
from sopt.nn.hashgrid import MAX_BYTE_ELEMENTS, MAX_FIXED_ENTRIES, grid_levels
from sopt.nn.tensor_core_mlp import MAX_INPUT as TENSOR_CORE_MAX_INPUT, cuda_only_reason, cuda_unavailable

MAX_ELEMENTS = 2**31 - 1   # SlangPy tensor indices are 32-bit: no per-batch tensor may hold more floats


def deterministic_field() -> Any:
    """The ``deterministic`` key every neural-field problem has (declared in each, at its place in the schema)."""
    return Field(False, description="bit-identical runs: the layers' and the hash grid's gradient sums in a fixed "
                                    "order (slower)")


class NeuralFieldConfig(ProblemConfig):
    """A problem config with ``encoding`` (Frequency, HashGrid, Identity), ``network`` (MLP, FullyFusedMLP,
    TensorCoreMLP) and ``deterministic`` fields, for a network from ``in_features`` coordinates to ``out_features``
    values."""

    in_features: ClassVar[int]      # coordinates per sample (the encoding's input)
    out_features: ClassVar[int]     # the network's outputs per sample
    output_floats: ClassVar[int]    # floats per sample the output tensor takes (out_features, or padded to 4)
    if TYPE_CHECKING:   # the subclass's fields (declared there, so they keep the problem's order and defaults)
        encoding: Any
        network: Any
        deterministic: bool

    def _encoding_width(self) -> int:
        """Features the encoding gives per sample: 2 F in_features (Frequency), levels x features (HashGrid), or
        in_features (Identity)."""
        enc = self.encoding
        if enc.otype == "Frequency":
            return self.in_features * 2 * enc.n_frequencies
        if enc.otype == "HashGrid":
            return enc.n_levels * enc.n_features_per_level
        return self.in_features

    def _table_entries(self) -> int:
        """Floats in the hash grid's table (0 without a HashGrid encoding)."""
        enc = self.encoding
        if enc.otype != "HashGrid":
            return 0
        levels = grid_levels(self.in_features, enc.n_levels, enc.log2_hashmap_size, enc.base_resolution,
                             enc.per_level_scale)
        return (levels[-1].offset + levels[-1].size) * enc.n_features_per_level

    def _widest(self) -> int:
        """Floats per sample of the widest per-batch tensor (FullyFusedMLP saves every layer's pre-activation;
        TensorCoreMLP's deltas are L H + O16 halves a sample, O16 = out_features rounded up to 16, in rows padded
        to 64 samples)."""
        net = self.network
        if net.otype == "FullyFusedMLP":
            net_width = net.n_neurons * net.n_hidden_layers + self.output_floats
        elif net.otype == "TensorCoreMLP":
            net_width = -(-(net.n_neurons * net.n_hidden_layers + _align16(self.out_features)) // 2)
        else:
            net_width = net.n_neurons
        return max(self._encoding_width(), net_width, self.output_floats)

    def _network_floats(self) -> int:
        """Floats per sample the network's layers keep through a training step: every hidden layer before and after
        its activation (MLP, FullyFusedMLP: 2 L H), or TensorCoreMLP's L hidden layers of H halves, L H + O16
        halves of deltas and K0 halves of layer 0's inputs (L H + (O16 + K0) / 2, K0 = the encoded width rounded
        up to 16; its rows padded to 64 samples add at most 63 samples' worth)."""
        net = self.network
        if net.otype == "TensorCoreMLP":
            return (net.n_neurons * net.n_hidden_layers + _align16(self.out_features) // 2
                    + _align16(self._encoding_width()) // 2)
        return 2 * net.n_neurons * net.n_hidden_layers

    def _parameter_count(self) -> int:
        """Trainable floats: the hash table's entries (HashGrid) and the network's weights and biases, layers of
        widths encoding -> n_neurons (n_hidden_layers times) -> out_features: sum of (in + 1) x out."""
        net = self.network
        widths = [self._encoding_width()] + [net.n_neurons] * net.n_hidden_layers + [self.out_features]
        return self._table_entries() + sum((a + 1) * b for a, b in zip(widths, widths[1:]))

    def _network_errors(self) -> list[tuple[tuple[str, ...], Any, str]]:
        """The (dotted key, value, message) errors of :func:`problems.limits.refuse` for the encoding and
        network together: a hash table larger than 32-bit indices (or, deterministic, the fixed-point sums) hold,
        an encoding wider than FullyFusedMLP or TensorCoreMLP takes, a TensorCoreMLP where the device will not be
        CUDA (known before any device exists: sopt.nn.tensor_core_mlp.cuda_unavailable)."""
        errors: list[tuple[tuple[str, ...], Any, str]] = []
        enc, net = self.encoding, self.network
        if enc.otype == "HashGrid":
            entries = self._table_entries()
            limit = MAX_FIXED_ENTRIES if self.deterministic else MAX_BYTE_ELEMENTS   # 32-bit byte offsets
            if entries > limit:
                errors.append((("encoding", "log2_hashmap_size"), enc.log2_hashmap_size,
                               f"the table would hold {entries} floats, more than {limit}"
                               f"{' (deterministic sums)' if self.deterministic else ''}; lower it or n_levels"))
            if enc.gradient_precision == "float16" and self.deterministic:
                errors.append((("encoding", "gradient_precision"), enc.gradient_precision,
                               "float16 sums are not deterministic; use float32 with deterministic=true"))
            if enc.gradient_precision == "float16" and enc.n_features_per_level % 2:
                errors.append((("encoding", "n_features_per_level"), enc.n_features_per_level,
                               "gradient_precision float16 sums pairs of features: it must be even"))
        enc_width = self._encoding_width()
        limit = {"FullyFusedMLP": MAX_WIDTH, "TensorCoreMLP": TENSOR_CORE_MAX_INPUT}.get(net.otype)
        if limit is not None and enc_width > limit:
            key = {"Frequency": "n_frequencies", "HashGrid": "n_levels"}.get(enc.otype, "otype")
            errors.append((("encoding", key), getattr(enc, key),
                           f"the encoding gives {enc_width} features; {net.otype} takes at most {limit}"))
        if net.otype == "TensorCoreMLP":
            why = cuda_unavailable()
            if why is not None:
                errors.append((("network", "otype"), net.otype, cuda_only_reason(why)))
        return errors


def _align16(n: int) -> int:
    """n rounded up to a multiple of 16 (TensorCoreMLP's tiles)."""
    return -(-n // 16) * 16
