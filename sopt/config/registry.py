"""The component registry: families of components (optimisers, schedules, encodings, networks, losses, simulators)
chosen in a config by tiny-cuda-nn's ``otype``, each with the pydantic model of its config.

A component registers itself once, next to its definition::

    class AdamConfig(ComponentConfig):
        otype: Literal["Adam"] = "Adam"
        learning_rate: float = Field(0.05, gt=0.0, le=10.0, description="step size (parameter units)")
        ...

    @register("optimizer", "Adam", AdamConfig)
    class Adam(Optimizer):
        @classmethod
        def from_config(cls, config: AdamConfig, params) -> "Adam": ...
        def to_config(self) -> AdamConfig: ...

and from then on a problem's schema takes any optimiser with ``optimizer: union("optimizer")`` (a pydantic
discriminated union on ``otype``, so a mistyped otype is one line of :func:`sopt.config.schema.validate` with a
"did you mean"), :func:`build` makes the component from a validated config (``build("optimizer", config, params)``)
and ``sopt config`` / the docs list :func:`families` and :func:`otypes`. Components round-trip:
``type(obj).from_config(obj.to_config(), *args)`` rebuilds an equal object (same hyperparameters; same initial
weights for the same seed). ``args``/``kwargs`` are what a config cannot hold: the parameters an optimiser steps,
the optimiser and the run's length a schedule drives, a module's input and output widths and its seed, a
simulator's initial state and geometry.

Configs never execute code: an otype selects a class registered here, nothing is imported by name. sopt's own
families are filled on first use: looking one up imports the sopt modules that define its components
(:data:`PROVIDERS`; ``import sopt`` itself stays cheap). :func:`union` reads the registry when called, so a schema
defined after a user's own component registered itself sees that otype too.
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import Annotated, Any, Callable, TypeVar, Union

from pydantic import ConfigDict, Field, create_model

from sopt.config.schema import StrictModel, validate

T = TypeVar("T", bound=type)


class ComponentConfig(StrictModel):
    """Base of a registered component's config: a StrictModel whose ``otype`` is ``Literal["<otype>"]`` with that
    default. Its pydantic schema is built on first use (``defer_build``), so defining the many component configs
    costs ``import sopt`` almost nothing."""

    model_config = ConfigDict(defer_build=True)


@dataclasses.dataclass(frozen=True)
class Entry:
    """One registered component: its family, otype, class and config model."""

    family: str
    otype: str
    component: type
    config: type[StrictModel]


_REGISTRY: dict[str, dict[str, Entry]] = {}
_SECTIONS: dict[str, type[StrictModel]] = {}   # family -> a one-field model validating a dict of that family

# sopt's families and the modules whose import registers their components, in the order their otypes are listed
# (a fixed list: no name from a config; the packages' own __init__s import nothing until a name is used)
PROVIDERS: dict[str, tuple[str, ...]] = {
    "optimizer": ("sopt.optim.adagrad", "sopt.optim.adam", "sopt.optim.adamw", "sopt.optim.lion", "sopt.optim.rmsprop",
                  "sopt.optim.sgd"),
    "schedule": ("sopt.optim.lr_scheduler.constant", "sopt.optim.lr_scheduler.exponential",
                 "sopt.optim.lr_scheduler.step", "sopt.optim.lr_scheduler.warmup_cosine"),
    "encoding": ("sopt.nn.frequency", "sopt.nn.hashgrid", "sopt.nn.identity"),
    "network": ("sopt.nn.mlp", "sopt.nn.fully_fused_mlp", "sopt.nn.tensor_core_mlp"),
    "loss": ("sopt.losses.regression",),
    "simulator": ("sopt.sim.diffusion2d", "sopt.sim.nbody", "sopt.sim.projectile", "sopt.sim.spring_system",
                  "sopt.sim.wave2d"),
}
_LOADED: set[str] = set()


def _load(family: str) -> None:
    """Import the sopt modules that register ``family``'s components (once; a no-op for other families), and list
    sopt's components in PROVIDERS' order whichever was imported first (a problem importing sopt.sim.projectile
    registers Projectile before the family loads), any others after them in registration order."""
    if family in _LOADED:
        return
    modules = PROVIDERS.get(family, ())
    for module in modules:
        importlib.import_module(module)
    entries = _REGISTRY.get(family)
    if entries and modules:
        rank = {module: i for i, module in enumerate(modules)}
        ordered = sorted(entries.values(), key=lambda e: rank.get(e.component.__module__, len(modules)))
        entries.clear()
        entries.update((e.otype, e) for e in ordered)
        _SECTIONS.pop(family, None)
    _LOADED.add(family)


def register(family: str, otype: str, config: type[StrictModel]) -> Callable[[T], T]:
    """Class decorator: register the decorated class as ``otype`` of ``family`` with its ``config`` model.

    The class implements ``from_config(cls, config, *args, **kwargs)`` (a classmethod) and ``to_config(self)``.
    ``config`` must be a StrictModel whose ``otype`` field defaults to ``otype``. ValueError for an otype
    registered twice in a family, a config without that ``otype`` default, or a class lacking the two methods.
    The class gets ``config_class`` (its config model) and ``otype``.
    """
    if not isinstance(family, str) or not family.isidentifier():
        raise ValueError(f"register: family must be an identifier string, got {family!r}")
    if not isinstance(otype, str) or not otype:
        raise ValueError(f"register: otype must be a non-empty string, got {otype!r}")
    if not (isinstance(config, type) and issubclass(config, StrictModel)):
        raise ValueError(f"register({family!r}, {otype!r}): config must be a StrictModel subclass, got {config!r}")
    field = config.model_fields.get("otype")
    if field is None or field.default != otype:
        raise ValueError(f"register({family!r}, {otype!r}): {config.__name__} must declare "
                         f"otype: Literal[{otype!r}] = {otype!r}")

    def decorate(cls: T) -> T:
        for method in ("from_config", "to_config"):
            if not callable(getattr(cls, method, None)):
                raise ValueError(f"register({family!r}, {otype!r}): {cls.__name__} has no {method} method")
        entries = _REGISTRY.setdefault(family, {})
        old = entries.get(otype)
        if old is not None and (old.component.__qualname__, old.component.__module__) != \
                (cls.__qualname__, cls.__module__):
            raise ValueError(f"register: otype {otype!r} of family {family!r} is already {old.component.__module__}."
                             f"{old.component.__qualname__}")
        entries[otype] = Entry(family, otype, cls, config)
        _SECTIONS.pop(family, None)
        cls.config_class = config   # type: ignore[attr-defined]
        cls.otype = otype           # type: ignore[attr-defined]
        return cls

    return decorate


def families() -> list[str]:
    """The registered families (sopt's and any registered since), sorted."""
    for family in PROVIDERS:
        _load(family)
    return sorted(_REGISTRY)


def _family(family: str) -> dict[str, Entry]:
    _load(family)   # once per family
    entries = _REGISTRY.get(family)
    if entries is None:
        raise ValueError(f"unknown component family {family!r}; registered: {', '.join(families())}")
    return entries


def otypes(family: str) -> list[str]:
    """The otypes registered in ``family``, in registration order."""
    return list(_family(family))


def entry(family: str, otype: str) -> Entry:
    """The registration of ``otype`` in ``family`` (ValueError naming the allowed otypes otherwise)."""
    entries = _family(family)
    if otype not in entries:
        raise ValueError(f"unknown {family} otype {otype!r}; allowed: {', '.join(entries)}")
    return entries[otype]


def union(family: str) -> Any:
    """The pydantic type of a ``family`` section: ``Annotated[Union[configs...], Field(discriminator="otype")]``
    (a family of one otype gives its config model itself)."""
    configs = tuple(e.config for e in _family(family).values())
    if len(configs) == 1:
        return configs[0]
    return Annotated[Union[configs], Field(discriminator="otype")]  # type: ignore[valid-type]


def section_model(family: str) -> type[StrictModel]:
    """A model with the one field ``<family>: union(family)``: validates a section given as a dict, so its errors
    read ``config optimizer.learning_rate = ...``."""
    model = _SECTIONS.get(family)
    if model is None:
        model = create_model(f"{family.capitalize()}Section", __base__=StrictModel,
                             **{family: (union(family), ...)})  # type: ignore[call-overload]
        _SECTIONS[family] = model
    return model


def as_config(family: str, config: StrictModel | dict[str, Any]) -> StrictModel:
    """``config`` as a validated config model of ``family``: a model instance is checked to belong to the family; a
    dict (``{"otype": "Adam", ...}``) is validated (ConfigError, one line per problem)."""
    if isinstance(config, dict):
        return getattr(validate(section_model(family), {family: config}), family)
    if not isinstance(config, StrictModel) or "otype" not in type(config).model_fields:
        raise ValueError(f"{family} config must be a registered config model or a dict with an 'otype', "
                         f"got {type(config).__name__}")
    registered = entry(family, config.otype).config   # type: ignore[attr-defined]
    if not isinstance(config, registered):
        raise ValueError(f"{family} config {type(config).__name__} is not the registered {registered.__name__} of "
                         f"otype {config.otype!r}")   # type: ignore[attr-defined]
    return config


def build(family: str, config: StrictModel | dict[str, Any], *args: Any, **kwargs: Any) -> Any:
    """The component of ``family`` that ``config`` names (a config model, or a dict validated first):
    ``component.from_config(config, *args, **kwargs)``."""
    config = as_config(family, config)
    return entry(family, config.otype).component.from_config(config, *args, **kwargs)   # type: ignore[attr-defined]
