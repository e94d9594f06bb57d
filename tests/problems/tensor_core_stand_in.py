"""A float32 stand-in for TensorCoreMLP, so that the neural-field builders' choice of modules around it is tested on
any device: ``TensorCoreMLP.from_config`` patched to record its arguments and return the FullyFusedMLP of the same
sizes, and the configs' CUDA check patched to pass."""

from __future__ import annotations

from typing import Any

import pytest

from sopt.nn.fully_fused_mlp import FullyFusedMLP
from sopt.nn.tensor_core_mlp import TensorCoreMLP
from problems import neural_field_config


def stand_in_tensor_core_mlp(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Patch TensorCoreMLP's building (see the module docstring); returns the list each build's arguments
    (in_features, out_features, encoding, seed, deterministic) are appended to."""
    calls: list[dict[str, Any]] = []

    def from_config(cls: type, config: Any, in_features: int, out_features: int, *, encoding: Any = None,
                    seed: int = 0, deterministic: bool = False) -> FullyFusedMLP:
        calls.append({"in_features": in_features, "out_features": out_features, "encoding": encoding, "seed": seed,
                      "deterministic": deterministic})
        return FullyFusedMLP(in_features, out_features, config.n_neurons, config.n_hidden_layers, seed=seed)

    monkeypatch.setattr(TensorCoreMLP, "from_config", classmethod(from_config))
    monkeypatch.setattr(neural_field_config, "cuda_unavailable", lambda: None)
    return calls
