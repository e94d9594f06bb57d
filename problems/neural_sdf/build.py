"""The model of a neural_sdf config: its encoding and network sections, composed (sopt.config.registry)."""

from __future__ import annotations

from sopt import nn
from sopt.config.registry import build
from problems.neural_sdf.config import IN_FEATURES, OUT_FEATURES, NeuralSDFConfig


def build_model(config: NeuralSDFConfig) -> nn.Module:
    """encoding + network sections -> a model from (x, y, z) in [0, 1]^3 to the signed distance, seeded with
    ``config.seed``. A FullyFusedMLP after any encoding but Frequency (which it fuses), and a TensorCoreMLP (CUDA
    only; it fuses none) after any encoding, run in a Sequential after the encoding's module; an MLP takes the
    encoding as its module 0."""
    if not isinstance(config, NeuralSDFConfig):
        raise ValueError(f"build_model needs a NeuralSDFConfig, got {type(config).__name__}")
    det, seed = config.deterministic, config.seed
    encoding, network = config.encoding, config.network
    if network.otype in ("FullyFusedMLP", "TensorCoreMLP") and encoding.otype != "Frequency":
        enc = build("encoding", encoding, IN_FEATURES, seed=seed, deterministic=det)
        return nn.Sequential(enc, build("network", network, enc.out_features, OUT_FEATURES, seed=seed,
                                        deterministic=det))
    return build("network", network, IN_FEATURES, OUT_FEATURES, encoding=encoding, seed=seed, deterministic=det)
