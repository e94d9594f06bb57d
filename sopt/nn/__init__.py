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


__getattr__, __dir__ = lazy_exports(__name__)

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
