"""sopt.nn: differentiable layers, activations and encodings on the GPU, following the Module contract
(sopt/nn/module.py); kernels in slang_lib/nn/. Encodings (Frequency, HashGrid, Identity) and networks (MLP,
FullyFusedMLP) are registered in the ``"encoding"`` / ``"network"`` families of :mod:`sopt.config.registry`.

Names load on first use (:mod:`sopt.utils.lazy_exports`): ``from sopt.nn.module import Module`` (the Trainer's) imports
no layer."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sopt.utils.lazy_exports import lazy_exports
# names of their own module's name: imported here, as the module's first import makes sopt.nn.<name> the module
from sopt.nn.gradcheck import gradcheck
from sopt.nn.vjp import vjp

_EXPORTS = {
    "Activation": "sopt.nn.activation", "LeakyReLU": "sopt.nn.activation", "ReLU": "sopt.nn.activation",
    "Sigmoid": "sopt.nn.activation", "SiLU": "sopt.nn.activation", "Sine": "sopt.nn.activation",
    "Softplus": "sopt.nn.activation", "Tanh": "sopt.nn.activation", "make_activation": "sopt.nn.activation",
    "FrequencyConfig": "sopt.nn.frequency", "FrequencyEncoding": "sopt.nn.frequency",
    "FullyFusedMLP": "sopt.nn.fully_fused_mlp", "FullyFusedMLPConfig": "sopt.nn.fully_fused_mlp",
    "GradcheckEntry": "sopt.nn.gradcheck", "GradcheckError": "sopt.nn.gradcheck",
    "GradcheckResult": "sopt.nn.gradcheck", "HashGridConfig": "sopt.nn.hashgrid",
    "HashGridEncoding": "sopt.nn.hashgrid", "IdentityConfig": "sopt.nn.identity",
    "IdentityEncoding": "sopt.nn.identity", "Linear": "sopt.nn.linear", "MLP": "sopt.nn.mlp",
    "MLPConfig": "sopt.nn.mlp", "make_encoding": "sopt.nn.mlp", "Module": "sopt.nn.module",
    "Sequential": "sopt.nn.sequential", "init": "sopt.nn.init",
}

__all__ = sorted([*_EXPORTS, "gradcheck", "vjp"])
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

if TYPE_CHECKING:
    from sopt.nn.activation import (Activation, LeakyReLU, ReLU, Sigmoid, SiLU, Sine, Softplus, Tanh,
                                    make_activation)
    from sopt.nn.frequency import FrequencyConfig, FrequencyEncoding
    from sopt.nn.fully_fused_mlp import FullyFusedMLP, FullyFusedMLPConfig
    from sopt.nn.gradcheck import GradcheckEntry, GradcheckError, GradcheckResult
    from sopt.nn.hashgrid import HashGridConfig, HashGridEncoding
    from sopt.nn.identity import IdentityConfig, IdentityEncoding
    from sopt.nn.linear import Linear
    from sopt.nn.mlp import MLP, MLPConfig, make_encoding
    from sopt.nn.module import Module
    from sopt.nn.sequential import Sequential
