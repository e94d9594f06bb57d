"""sopt.nn: differentiable layers, activations and encodings on the GPU, following the Module contract
(sopt/nn/module.py); kernels in slang_lib/nn/."""

from sopt.nn.activation import (Activation, LeakyReLU, ReLU, Sigmoid, SiLU, Sine, Softplus, Tanh,
                                make_activation)
from sopt.nn.frequency import FrequencyEncoding
from sopt.nn.fully_fused_mlp import FullyFusedMLP
from sopt.nn.gradcheck import GradcheckEntry, GradcheckError, GradcheckResult, gradcheck
from sopt.nn.hashgrid import HashGridEncoding
from sopt.nn.linear import Linear
from sopt.nn.mlp import MLP, make_encoding
from sopt.nn.module import Module
from sopt.nn.sequential import Sequential
from sopt.nn.vjp import vjp

__all__ = [
    "Activation", "FrequencyEncoding", "FullyFusedMLP", "GradcheckEntry", "GradcheckError", "GradcheckResult", "HashGridEncoding",
    "LeakyReLU", "Linear", "MLP", "Module", "ReLU", "Sequential", "SiLU", "Sigmoid", "Sine", "Softplus", "Tanh",
    "gradcheck", "make_activation", "make_encoding", "vjp",
]
