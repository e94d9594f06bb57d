"""Initialisers, in place on a Parameter, with torch.nn.init's names and conventions, each seeded.

For a weight of shape ``(out_features, in_features, *receptive)``: ``fan_in = in_features * prod(receptive)``,
``fan_out = out_features * prod(receptive)``. Every function draws from ``numpy.random.default_rng(seed)``,
so the same seed gives the same values on every device.
"""

from __future__ import annotations

import math

import numpy as np

from sopt.autodiff.parameter import Parameter
from sopt.utils.validation import check_choice, check_float, check_int

_GAINS = {"linear": 1.0, "identity": 1.0, "sigmoid": 1.0, "tanh": 5.0 / 3.0, "relu": math.sqrt(2.0), "selu": 0.75}


def calculate_gain(nonlinearity: str, param: float | None = None) -> float:
    """Recommended gain for ``nonlinearity`` (torch.nn.init.calculate_gain)."""
    check_choice(nonlinearity, "nonlinearity", sorted([*_GAINS, "leaky_relu"]))
    if nonlinearity == "leaky_relu":
        slope = 0.01 if param is None else check_float(param, "negative slope (a)")
        return math.sqrt(2.0 / (1.0 + slope**2))
    return _GAINS[nonlinearity]


def fan_in_and_fan_out(shape: tuple[int, ...]) -> tuple[int, int]:
    """(fan_in, fan_out) of a weight of ``shape``; needs at least 2 dimensions."""
    if len(shape) < 2:
        raise ValueError(f"fan in/out needs a parameter with >= 2 dimensions, got shape {shape}")
    receptive = int(np.prod(shape[2:])) if len(shape) > 2 else 1
    return shape[1] * receptive, shape[0] * receptive


def _fan(shape: tuple[int, ...], mode: str) -> int:
    check_choice(mode, "mode", ("fan_in", "fan_out"))
    fan_in, fan_out = fan_in_and_fan_out(shape)
    return fan_in if mode == "fan_in" else fan_out


def constant_(param: Parameter, value: float) -> Parameter:
    param.load(np.full(param.shape, check_float(value, "value"), dtype=np.float32))
    return param


def zeros_(param: Parameter) -> Parameter:
    return constant_(param, 0.0)


def ones_(param: Parameter) -> Parameter:
    return constant_(param, 1.0)


def uniform_(param: Parameter, a: float = 0.0, b: float = 1.0, seed: int = 0) -> Parameter:
    """Values ~ U(a, b)."""
    if not check_float(a, "a") <= check_float(b, "b"):
        raise ValueError(f"uniform_ needs a <= b, got a={a}, b={b}")
    param.load(np.random.default_rng(check_int(seed, "seed", low=0)).uniform(a, b, size=param.shape))
    return param


def normal_(param: Parameter, mean: float = 0.0, std: float = 1.0, seed: int = 0) -> Parameter:
    """Values ~ N(mean, std^2)."""
    std = check_float(std, "std", low=0.0)
    rng = np.random.default_rng(check_int(seed, "seed", low=0))
    param.load(rng.normal(check_float(mean, "mean"), std, size=param.shape))
    return param


def xavier_uniform_(param: Parameter, gain: float = 1.0, seed: int = 0) -> Parameter:
    """U(-a, a) with a = gain * sqrt(6 / (fan_in + fan_out))."""
    fan_in, fan_out = fan_in_and_fan_out(param.shape)
    bound = check_float(gain, "gain") * math.sqrt(6.0 / (fan_in + fan_out))
    return uniform_(param, -bound, bound, seed)


def xavier_normal_(param: Parameter, gain: float = 1.0, seed: int = 0) -> Parameter:
    """N(0, std^2) with std = gain * sqrt(2 / (fan_in + fan_out))."""
    fan_in, fan_out = fan_in_and_fan_out(param.shape)
    return normal_(param, 0.0, check_float(gain, "gain") * math.sqrt(2.0 / (fan_in + fan_out)), seed)


def kaiming_uniform_(param: Parameter, a: float = 0.0, mode: str = "fan_in", nonlinearity: str = "leaky_relu",
                     seed: int = 0) -> Parameter:
    """U(-b, b) with b = gain * sqrt(3 / fan) (He et al. 2015)."""
    bound = calculate_gain(nonlinearity, check_float(a, "a")) * math.sqrt(3.0 / _fan(param.shape, mode))
    return uniform_(param, -bound, bound, seed)


def kaiming_normal_(param: Parameter, a: float = 0.0, mode: str = "fan_in", nonlinearity: str = "leaky_relu",
                    seed: int = 0) -> Parameter:
    """N(0, std^2) with std = gain / sqrt(fan) (He et al. 2015)."""
    std = calculate_gain(nonlinearity, check_float(a, "a")) / math.sqrt(_fan(param.shape, mode))
    return normal_(param, 0.0, std, seed)
