"""sopt.nn: differentiable layers, activations and encodings on the GPU, following the Module contract
(sopt/nn/module.py); kernels in slang_lib/nn/. Encodings (Frequency, HashGrid, Identity) and networks (MLP,
FullyFusedMLP) are registered in the ``"encoding"`` / ``"network"`` families of :mod:`sopt.config.registry`."""

from sopt.nn.activation import (Activation, LeakyReLU, ReLU, Sigmoid, SiLU, Sine, Softplus, Tanh,
                                make_activation)
from sopt.nn.frequency import FrequencyConfig, FrequencyEncoding
from sopt.nn.fully_fused_mlp import FullyFusedMLP, FullyFusedMLPConfig
from sopt.nn.gradcheck import GradcheckEntry, GradcheckError, GradcheckResult, gradcheck
from sopt.nn.hashgrid import HashGridConfig, HashGridEncoding
from sopt.nn.identity import IdentityConfig, IdentityEncoding
from sopt.nn.linear import Linear
from sopt.nn.mlp import MLP, MLPConfig, make_encoding
from sopt.nn.module import Module
from sopt.nn.sequential import Sequential
from sopt.nn.vjp import vjp

__all__ = [
    "Activation", "FrequencyConfig", "FrequencyEncoding", "FullyFusedMLP", "FullyFusedMLPConfig", "GradcheckEntry",
    "GradcheckError", "GradcheckResult", "HashGridConfig", "HashGridEncoding", "IdentityConfig", "IdentityEncoding",
    "LeakyReLU", "Linear", "MLP", "MLPConfig", "Module", "ReLU", "Sequential", "SiLU", "Sigmoid", "Sine", "Softplus", "Tanh",
    "gradcheck", "make_activation", "make_encoding", "vjp",
]
