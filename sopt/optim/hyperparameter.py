"""Hyperparameters declared once: each optimiser lists its :class:`Hyperparameter` s, and from that one list come the
constructor's signature and checks, the param-group and ``state_dict`` keys, the registered config model (the
``AdamConfig`` that :mod:`sopt.config.registry` and ``sopt config`` use), the config <-> constructor mapping and the
fields of the update kernel's hyperparameter struct, which the host fills by name.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any, Iterable, Literal

import numpy as np
from pydantic import Field, create_model

from sopt.config.registry import ComponentConfig
from sopt.utils.validation import check_bool, check_float

Value = float | bool | tuple[float, float]


@dataclasses.dataclass(frozen=True)
class Hyperparameter:
    """One hyperparameter of an optimiser: torch's name and default, the range the constructor accepts, and the
    config key(s), default and bounds it has in a config (tiny-cuda-nn's names; ``None``: not in a config, as
    torch's ``maximize``).

    The kind follows the default: a bool is a flag, a float a number, a pair of floats (``betas``) a pair whose
    elements share the constructor range and map to two config keys and two kernel fields. The kernel struct's
    field is the config key (``beta1``) for a pair's elements and ``key`` otherwise.
    """

    key: str                                  # constructor argument and param-group key ("lr", "betas")
    default: Value                            # the constructor's default (torch's)
    doc: str | tuple[str, str]                # what it does, in which units (a pair: one per element)
    low: float | None = 0.0                   # the constructor's range (each element of a pair)
    high: float | None = None
    low_inclusive: bool = True
    high_inclusive: bool = True
    config_key: str | tuple[str, str] | None = None
    config_default: Value | None = None       # None: ``default``
    config_bounds: tuple[tuple[str, float], ...] = ()   # pydantic bounds of the config key(s): (("gt", 0.0), ...)
    # added after state_dicts were saved without it: a saved group lacking it loads, keeping the group's value
    absent_from_old_state_dicts: bool = False

    @property
    def is_pair(self) -> bool:
        return isinstance(self.default, tuple)

    @property
    def is_flag(self) -> bool:
        return isinstance(self.default, bool)

    def check(self, value: Any) -> Value:
        """``value`` checked against the declared kind and range (ValueError naming the key, torch's message),
        as Python floats, bools or a tuple."""
        if self.is_flag:
            return check_bool(value, self.key)
        bounds = dict(low=self.low, high=self.high, low_inclusive=self.low_inclusive,
                      high_inclusive=self.high_inclusive)
        if not self.is_pair:
            return check_float(value, self.key, **bounds)
        if not isinstance(value, (tuple, list, np.ndarray)) or len(value) != 2:
            raise ValueError(f"{self.key} must be a pair ({', '.join(self.config_key or ('a', 'b'))}), got {value!r}")
        return tuple(check_float(v, f"{self.key}[{i}]", **bounds) for i, v in enumerate(value))   # type: ignore[return-value]

    def kernel_fields(self, value: Value) -> dict[str, float | bool]:
        """The kernel struct's fields this hyperparameter fills, by name."""
        if self.is_pair:
            assert isinstance(self.config_key, tuple) and isinstance(value, tuple)
            return dict(zip(self.config_key, value))
        return {self.key: value}   # type: ignore[dict-item]

    def config_fields(self) -> dict[str, tuple[Any, Any]]:
        """pydantic field definitions of the config key(s), for :func:`pydantic.create_model`."""
        if self.config_key is None:
            return {}
        default = self.default if self.config_default is None else self.config_default
        kind = bool if self.is_flag else float
        if not self.is_pair:
            return {self.config_key: (kind, Field(default, description=self.doc, **dict(self.config_bounds)))}
        return {key: (kind, Field(d, description=doc, **dict(self.config_bounds)))
                for key, d, doc in zip(self.config_key, default, self.doc)}   # type: ignore[arg-type]

    def from_config(self, config: Any) -> Value:
        """The constructor's value from a config holding this hyperparameter's key(s)."""
        if isinstance(self.config_key, tuple):
            return tuple(getattr(config, k) for k in self.config_key)   # type: ignore[return-value]
        return getattr(config, self.config_key)   # type: ignore[arg-type]

    def to_config(self, value: Value) -> dict[str, Any]:
        """The config key(s) and value(s) for the constructor's ``value``."""
        if isinstance(self.config_key, tuple):
            return dict(zip(self.config_key, value))   # type: ignore[arg-type]
        return {self.config_key: value} if self.config_key is not None else {}


def replace(hyperparameters: Iterable[Hyperparameter], key: str, **changes: Any) -> tuple[Hyperparameter, ...]:
    """``hyperparameters`` with the one named ``key`` changed (AdamW: Adam's with another weight_decay)."""
    found = [h.key for h in hyperparameters]
    if key not in found:
        raise ValueError(f"no hyperparameter {key!r} to replace; declared: {found}")
    return tuple(dataclasses.replace(h, **changes) if h.key == key else h for h in hyperparameters)


# -- the declarations several optimisers share ----------------------------------------------------------------------
def learning_rate(default: float, config_default: float, unit: str) -> Hyperparameter:
    return Hyperparameter("lr", default, f"step size in {unit}, scaled by the schedule",
                          config_key="learning_rate", config_default=config_default,
                          config_bounds=(("gt", 0.0), ("le", 10.0)))


def weight_decay(default: float = 0.0, doc: str = "L2 penalty: weight_decay * p added to the gradient (gradient "
                                                  "units per parameter unit)") -> Hyperparameter:
    return Hyperparameter("weight_decay", default, doc, config_key="weight_decay",
                          config_bounds=(("ge", 0.0), ("le", 1e3)))


def betas(default: tuple[float, float], config_default: tuple[float, float], docs: tuple[str, str]) -> Hyperparameter:
    return Hyperparameter("betas", default, docs, high=1.0, high_inclusive=False, config_key=("beta1", "beta2"),
                          config_default=config_default, config_bounds=(("ge", 0.0), ("lt", 1.0)))


def epsilon(default: float, doc: str) -> Hyperparameter:
    return Hyperparameter("eps", default, doc, config_key="epsilon", config_bounds=(("gt", 0.0), ("le", 1.0)))


MAXIMIZE = Hyperparameter("maximize", False, "ascend the objective instead of descending it (torch's maximize)")


# -- options every optimiser has besides its hyperparameters ---------------------------------------------------------
OPTIONS = (
    inspect.Parameter("max_grad_norm", inspect.Parameter.KEYWORD_ONLY, default=None),
    inspect.Parameter("skip_nonfinite", inspect.Parameter.KEYWORD_ONLY, default=True),
    inspect.Parameter("double_buffer", inspect.Parameter.KEYWORD_ONLY, default=True),
    inspect.Parameter("poll_every", inspect.Parameter.KEYWORD_ONLY, default=64),
)
_OPTION_FIELDS: dict[str, tuple[Any, Any]] = {
    "max_grad_norm": (float | None, Field(None, gt=0.0, le=1e30, description="clip the global gradient 2-norm to this "
                                          "before the update (gradient units; None: no clipping)")),
    "skip_nonfinite": (bool, Field(True, description="skip (and count) a step whose gradients or result hold a "
                                                     "NaN/Inf")),
    "double_buffer": (bool, Field(True, description="keep values and state twice so a non-finite step can be undone "
                                                    "in the update itself (False: half the memory, one more read of "
                                                    "the gradients)")),
}


def signature(hyperparameters: Iterable[Hyperparameter]) -> inspect.Signature:
    """The constructor's signature: ``(params, <hyperparameters, torch's order and defaults>, *, <options>)``."""
    positional = [inspect.Parameter("params", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    positional += [inspect.Parameter(h.key, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=h.default)
                   for h in hyperparameters]
    return inspect.Signature(positional + list(OPTIONS))


def config_model(otype: str, hyperparameters: Iterable[Hyperparameter],
                 base: type[ComponentConfig] = ComponentConfig) -> type[ComponentConfig]:
    """The config model of optimiser ``otype``: ``otype``, each hyperparameter's config key(s) with its config
    default, bounds and doc, then ``max_grad_norm``, ``skip_nonfinite`` and ``double_buffer``, over ``base`` (a
    variant's config may extend its original's: AdamW's is an AdamConfig). Subclass it to give it a docstring (and
    validators)."""
    fields: dict[str, tuple[Any, Any]] = {"otype": (Literal[otype], otype)}   # type: ignore[valid-type]
    for h in hyperparameters:
        fields.update(h.config_fields())
    return create_model(f"_{otype}ConfigFields", __base__=base, **fields, **_OPTION_FIELDS)
