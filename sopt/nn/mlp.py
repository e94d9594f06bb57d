"""MLP builder configured by plain values and tiny-cuda-nn style dicts, and the encoding configs it accepts."""

from __future__ import annotations

import math
from typing import Any, Literal

import numpy as np
from pydantic import Field

from sopt.nn import init
from sopt.config.registry import ComponentConfig, build, register
from sopt.config.schema import StrictModel
from sopt.nn.activation import Activation, ActivationName, LeakyReLU, ReLU, Sine, activation_name, make_activation
from sopt.nn.frequency import FrequencyEncoding
from sopt.nn.hashgrid import HashGridEncoding
from sopt.nn.linear import Linear, init_linear_
from sopt.nn.module import Module
from sopt.nn.seeding import derive_seed
from sopt.nn.sequential import Sequential
from sopt.utils.validation import as_float32_array, check_bool, check_int

# tiny-cuda-nn key -> constructor argument, per encoding
_FREQUENCY_KEYS = {"n_frequencies": "n_freqs", "n_freqs": "n_freqs"}
_HASHGRID_KEYS = {"n_levels": "n_levels", "n_features_per_level": "n_features", "n_features": "n_features",
                  "log2_hashmap_size": "log2_table_size", "log2_table_size": "log2_table_size",
                  "base_resolution": "base_resolution", "per_level_scale": "per_level_scale", "seed": "seed",
                  "deterministic": "deterministic"}


def make_encoding(spec: Any, in_dims: int, seed: int = 0, deterministic: bool = False) -> Module:
    """An encoding module for ``in_dims`` inputs from a config dict (or a Module, returned as is).

    ``{"otype": "Frequency", "n_frequencies": 6}`` -> FrequencyEncoding (``n_freqs`` also accepted);
    ``{"otype": "HashGrid", "n_levels": 16, "n_features_per_level": 2, "log2_hashmap_size": 19,
    "base_resolution": 16, "per_level_scale": 2.0}`` -> HashGridEncoding (also ``"otype": "Grid"`` with
    ``"type": "Hash"``, the constructor's own names, and ``"interpolation": "Linear"``). Omitted keys take
    the constructor's defaults; ``seed`` and ``deterministic`` (HashGrid's fixed-order table gradient; the
    frequency encoding has no reduction) default to the ones given here.
    """
    if isinstance(spec, Module):
        if spec.in_features is not None and spec.in_features != in_dims:
            raise ValueError(f"encoding {spec!r} takes {spec.in_features} features, the MLP's in_features is {in_dims}")
        return spec
    if not isinstance(spec, dict) or "otype" not in spec:
        raise ValueError(f"encoding must be None, a Module or a dict with an 'otype' entry, got {spec!r}")
    options = {k: v for k, v in spec.items() if k != "otype"}
    if not isinstance(spec["otype"], str):
        raise ValueError(f"encoding otype must be a string ('Frequency', 'HashGrid' or 'Grid'), got {spec['otype']!r}")
    otype = spec["otype"].lower()
    if otype == "frequency":
        return FrequencyEncoding(in_dims, **_rename(options, _FREQUENCY_KEYS, "Frequency"))
    if otype in ("hashgrid", "grid"):
        grid_type = options.pop("type", "Hash")
        if not isinstance(grid_type, str) or grid_type.lower() != "hash":
            raise ValueError(f"encoding Grid: only type 'Hash' is supported, got {grid_type!r}")
        interpolation = options.pop("interpolation", "Linear")
        if not isinstance(interpolation, str) or interpolation.lower() != "linear":
            raise ValueError(f"encoding HashGrid: only 'Linear' interpolation is supported, got {interpolation!r}")
        kwargs = {"seed": seed, "deterministic": deterministic, **_rename(options, _HASHGRID_KEYS, "HashGrid")}
        return HashGridEncoding(in_dims, **kwargs)
    raise ValueError(f"unknown encoding otype {spec['otype']!r}; allowed: 'Frequency', 'HashGrid' ('Grid')")


def _rename(options: dict[str, Any], keys: dict[str, str], otype: str) -> dict[str, Any]:
    unknown = sorted(set(options) - set(keys))
    if unknown:
        raise ValueError(f"encoding {otype}: unknown option(s) {unknown}; allowed: {sorted(keys)}")
    return {keys[k]: v for k, v in options.items()}


class MLPConfig(ComponentConfig):
    """A multilayer perceptron of fused Linear layers (tiny-cuda-nn's keys; sopt.nn.MLP)."""

    otype: Literal["MLP"] = "MLP"
    n_neurons: int = Field(64, ge=1, le=4096, description="width of every hidden layer (features)")
    n_hidden_layers: int = Field(2, ge=0, le=64, description="hidden layers (0: one Linear from input to output)")
    activation: ActivationName = Field("ReLU", description="activation after every hidden layer")
    output_activation: ActivationName = Field("None", description="activation after the output layer")


@register("network", "MLP", MLPConfig)
class MLP(Sequential):
    """[encoding ->] Linear -> act -> ... -> Linear -> output_act, as a Sequential of fused Linear layers.

    ``hidden_layers`` hidden layers of width ``hidden_features`` (tiny-cuda-nn's ``n_hidden_layers`` /
    ``n_neurons``): ``hidden_layers + 1`` Linear layers, every hidden one followed by ``activation`` and the
    last by ``output_activation``, each activation fused into its Linear (one kernel per layer). With
    ``hidden_layers = 0`` it is a single Linear. Activations are given as for ``make_activation`` (names,
    ``{"otype": ...}`` dicts, instances); ``encoding`` as for ``make_encoding``.

    Parameters are named like a Sequential: with an encoding it is module 0 (``"0.table"``) and the
    Linears follow (``"1.weight"``, ``"1.bias"``, ...); without one the Linears start at 0.

    Initialisation, from independent streams derived from ``seed``:
    - ReLU / LeakyReLU networks: each Linear followed by that activation gets Kaiming-uniform weights
      (fan_in, gain sqrt(2 / (1 + slope^2))) and zero biases (He et al. 2015); the output layer keeps
      torch's default.
    - Sine networks (SIREN, Sitzmann et al. 2020): first Linear W ~ U(-1/in, 1/in), every other Linear
      (output included) W ~ U(-sqrt(6/in)/w0, sqrt(6/in)/w0); biases keep torch's default.
    - otherwise torch.nn.Linear's default (see Linear).

    ``deterministic=True``: bit-identical gradients run to run, for every Linear and a HashGrid encoding
    built from a dict (one that sets ``"deterministic"`` itself keeps its value); see Linear and
    HashGridEncoding.
    """

    def __init__(self, in_features: int, out_features: int, hidden_features: int, hidden_layers: int,
                 activation: Any = "relu", output_activation: Any = None, encoding: Any = None, bias: bool = True,
                 seed: int = 0, deterministic: bool = False) -> None:
        deterministic = check_bool(deterministic, "MLP deterministic")
        in_features = check_int(in_features, "MLP in_features", low=1)
        out_features = check_int(out_features, "MLP out_features", low=1)
        hidden_features = check_int(hidden_features, "MLP hidden_features", low=1)
        hidden_layers = check_int(hidden_layers, "MLP hidden_layers", low=0)
        bias = check_bool(bias, "MLP bias")
        seed = check_int(seed, "MLP seed", low=0)
        act = make_activation(activation, "MLP activation")
        out_act = make_activation(output_activation, "MLP output_activation")
        modules: list[Module] = []
        width = in_features
        if encoding is not None:
            enc = make_encoding(encoding, in_features, seed=derive_seed(seed, 0), deterministic=deterministic)
            modules.append(enc)
            width = enc.out_features
        widths = [width] + [hidden_features] * hidden_layers + [out_features]
        linears = [Linear(widths[k], widths[k + 1], bias=bias, seed=derive_seed(seed, k + 1),
                          activation=act if k < hidden_layers else out_act, deterministic=deterministic)
                   for k in range(hidden_layers + 1)]
        for layer, (w, b) in zip(linears, initial_layer_weights(widths, act, out_act, bias, seed)):
            layer.weight.load(w)
            if layer.bias is not None:
                layer.bias.load(b)
        super().__init__(*modules, *linears)
        self.encoding = modules[0] if modules else None
        self.layers = tuple(linears)
        self.hidden_features, self.hidden_layers, self.bias = hidden_features, hidden_layers, bias
        self.activation, self.output_activation = act, out_act

    @classmethod
    def from_config(cls, config: MLPConfig, in_features: int, out_features: int, *, encoding: Any = None,
                    seed: int = 0, deterministic: bool = False) -> "MLP":
        """The MLP of ``config`` from ``in_features`` to ``out_features``. ``encoding``: None, an encoding config
        (built here for ``in_features`` inputs with the seed the MLP derives for it), or anything the constructor
        takes (a Module, a dict). ``seed`` draws the weights; ``deterministic`` as the constructor."""
        if isinstance(encoding, StrictModel):
            encoding = build("encoding", encoding, in_features, seed=derive_seed(seed, 0), deterministic=deterministic)
        return cls(in_features, out_features, hidden_features=config.n_neurons, hidden_layers=config.n_hidden_layers,
                   activation=config.activation, output_activation=config.output_activation, encoding=encoding,
                   seed=seed, deterministic=deterministic)

    def to_config(self) -> MLPConfig:
        """The network's config (the encoding is a section of its own: ``self.encoding.to_config()``; the seed
        and ``deterministic`` are build arguments). ValueError for an MLP a config cannot describe (no bias, an
        activation with non-default options)."""
        if not self.bias:
            raise ValueError("MLP.to_config: bias=False has no config key (a config's MLP has biases)")
        return MLPConfig(n_neurons=self.hidden_features, n_hidden_layers=self.hidden_layers,
                         activation=activation_name(self.activation, "MLP.to_config activation"),
                         output_activation=activation_name(self.output_activation, "MLP.to_config output_activation"))


class _HostArray:
    """A host array standing in for a Parameter in sopt.nn.init's initialisers (they use only ``shape`` and
    ``load``): initial weights without GPU buffers."""

    def __init__(self, shape: tuple[int, ...]) -> None:
        self.shape = shape
        self.array = np.zeros(shape, np.float32)

    def load(self, array: Any) -> None:
        self.array = as_float32_array(array, "initial weights", self.shape)


def initial_layer_weights(widths: list[int], activation: Activation | None, output_activation: Activation | None,
                          bias: bool, seed: int) -> list[tuple[np.ndarray, np.ndarray | None]]:
    """(W (out, in), b (out,) or None) of every layer of an MLP with layer widths ``widths`` (input, hidden...,
    output), initialised as MLP documents: torch.nn.Linear's default (init_linear_, seed
    ``derive_seed(seed, k + 1)`` for layer k), then the Kaiming / SIREN re-initialisation for ``activation``.
    MLP and FullyFusedMLP both take their initial weights from here, so the same seed gives the same network."""
    layers = []
    for k in range(len(widths) - 1):
        weight = _HostArray((widths[k + 1], widths[k]))
        b = _HostArray((widths[k + 1],)) if bias else None
        init_linear_(weight, b, derive_seed(seed, k + 1))   # type: ignore[arg-type]  # a host stand-in
        layer_act = activation if k < len(widths) - 2 else output_activation
        _initialise(weight, b, layer_act, first=k == 0, hidden=activation, seed=derive_seed(seed, k + 1, 7))
        layers.append((weight.array, b.array if b is not None else None))
    return layers


def _initialise(weight: _HostArray, bias: _HostArray | None, layer_act: Activation | None, first: bool,
                hidden: Activation | None, seed: int) -> None:
    """Re-initialise a layer (activation ``layer_act``) of an MLP whose hidden activation is ``hidden`` (see MLP)."""
    if isinstance(hidden, Sine):
        n_in = weight.shape[1]
        bound = 1.0 / n_in if first else math.sqrt(6.0 / n_in) / hidden.w0
        init.uniform_(weight, -bound, bound, seed=seed)   # type: ignore[arg-type]
    elif isinstance(hidden, (ReLU, LeakyReLU)) and layer_act is hidden:
        slope = hidden.slope if isinstance(hidden, LeakyReLU) else 0.0
        init.kaiming_uniform_(weight, a=slope, nonlinearity="leaky_relu", seed=seed)   # type: ignore[arg-type]
        if bias is not None:
            init.zeros_(bias)   # type: ignore[arg-type]
