"""The model of a neural-field-image config: its encoding and network sections, composed (sopt.config.registry)."""

from __future__ import annotations

from sopt import nn
from sopt.config.registry import build
from problems.neural_field_image.config import IN_FEATURES, OUT_FEATURES, NeuralFieldImageConfig


def build_model(config: NeuralFieldImageConfig) -> nn.Module:
    """encoding + network sections -> a model from (x, y) to RGB, seeded with ``config.seed``.

    ``MLP``: sopt.nn.MLP with the encoding as module 0 (none for an Identity encoding that changes nothing).
    ``FullyFusedMLP``: a Frequency encoding is fused into it (one kernel per pass), any other encoding runs
    before it in a Sequential; ``TensorCoreMLP`` (CUDA only) the same. ``deterministic`` goes to every layer with a reduction.
    """
    if not isinstance(config, NeuralFieldImageConfig):
        raise ValueError(f"build_model needs a NeuralFieldImageConfig, got {type(config).__name__}")
    det, seed = config.deterministic, config.seed
    encoding = config.encoding
    if encoding.otype == "Identity" and encoding.scale == 1.0 and encoding.offset == 0.0:
        encoding = None   # y = x: no module, no dispatch
    network = config.network
    if encoding is not None and network.otype in ("FullyFusedMLP", "TensorCoreMLP") and encoding.otype != "Frequency":
        enc = build("encoding", encoding, IN_FEATURES, seed=seed, deterministic=det)
        return nn.Sequential(enc, build("network", network, enc.out_features, OUT_FEATURES, seed=seed,
                                        deterministic=det))
    return build("network", network, IN_FEATURES, OUT_FEATURES, encoding=encoding, seed=seed, deterministic=det)
