"""Configuration of a fitting problem: pydantic v2 schemas, JSON files merged over the defaults, one-line errors.

Every problem's config is a :class:`FitConfig` subclass (its ``true`` and ``init`` sections, and any keys of its
own). All models derive from :class:`StrictModel`: unknown keys are errors, types are strict (``"0.01"`` is no
float, ``"no"`` or ``0`` no bool, ``1.0`` no int; an int is a float), floats are finite, numbers carry bounds
(``Field(ge=..., le=...)``) and every field has a one-line description with its unit. ``Schema.model_json_schema()``
documents a problem's config in full.

The ``optimizer`` and ``schedule`` sections are neural_field_image's tiny-cuda-nn style (an ``otype`` and its
keys) and are built by its ``build_optimizer`` / ``build_scheduler``. A user config (a JSON object, e.g. from
``--config FILE``) is merged over the defaults: a section updates the default's entries, unless it names another
``otype``, which replaces the section. Duplicate JSON keys are errors.

Every problem found in a config becomes one line of a :class:`ConfigError`: the dotted key, the value, and what
is allowed (``config optimizer.learnig_rate = 0.1: unknown key; did you mean 'learning_rate'? allowed: ...``).
"""

from __future__ import annotations

import copy
import difflib
import json
import os
import pathlib
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator


class ConfigError(ValueError):
    """A config that does not validate; ``lines``: one line per problem (``str()`` joins them)."""

    def __init__(self, lines: list[str]) -> None:
        self.lines = [" ".join(str(line).split()) for line in lines]   # each one line, whatever the input held
        super().__init__("\n".join(self.lines))


class StrictModel(BaseModel):
    """Base of every config model: unknown keys forbidden, strict types, finite floats, frozen values."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False, frozen=True,
                              validate_default=True)


# -- optimiser and schedule sections (neural_field_image's layout; built by its build_optimizer/scheduler) ------
class AdamConfig(StrictModel):
    """Adam (torch.optim.Adam's rule) on the normalised parameters (see sopt.problems.fitting.scaled_parameter)."""

    otype: Literal["Adam"] = "Adam"
    learning_rate: float = Field(0.05, gt=0.0, le=10.0, description="step size in normalised units (1 = one scale)")
    beta1: float = Field(0.9, ge=0.0, lt=1.0, description="first-moment decay")
    beta2: float = Field(0.99, ge=0.0, lt=1.0, description="second-moment decay")
    epsilon: float = Field(1e-8, gt=0.0, description="added to the root of the second moment")
    weight_decay: float = Field(0.0, ge=0.0, description="L2 penalty on the normalised parameters")
    max_grad_norm: float | None = Field(None, gt=0.0, description="clip the global gradient norm to this (None: off)")


class AdamWConfig(AdamConfig):
    """AdamW: Adam with decoupled weight decay."""

    otype: Literal["AdamW"] = "AdamW"   # type: ignore[assignment]
    weight_decay: float = Field(1e-2, ge=0.0, description="decoupled weight decay (per step, times the lr)")


class SGDConfig(StrictModel):
    """SGD with optional (Nesterov) momentum."""

    otype: Literal["SGD"] = "SGD"
    learning_rate: float = Field(0.01, gt=0.0, le=10.0, description="step size in normalised units")
    momentum: float = Field(0.0, ge=0.0, lt=1.0, description="momentum factor")
    nesterov: bool = Field(False, description="Nesterov momentum (needs momentum > 0)")
    weight_decay: float = Field(0.0, ge=0.0, description="L2 penalty on the normalised parameters")
    max_grad_norm: float | None = Field(None, gt=0.0, description="clip the global gradient norm to this (None: off)")

    @model_validator(mode="after")
    def _nesterov_needs_momentum(self) -> "SGDConfig":
        if self.nesterov and self.momentum <= 0.0:
            raise ValueError("nesterov needs momentum > 0")
        return self


OptimizerConfig = Annotated[Union[AdamConfig, AdamWConfig, SGDConfig], Field(discriminator="otype")]


class ConstantSchedule(StrictModel):
    """The learning rate stays at the optimizer's."""

    otype: Literal["Constant"] = "Constant"


class WarmupCosineSchedule(StrictModel):
    """Linear warmup, then cosine decay to final_lr_factor times the learning rate at the last step."""

    otype: Literal["WarmupCosine"] = "WarmupCosine"
    warmup_steps: int = Field(0, ge=0, description="steps of linear warmup (steps)")
    final_lr_factor: float = Field(0.01, ge=0.0, le=1.0, description="final lr / initial lr")


class StepSchedule(StrictModel):
    """The learning rate times gamma every step_size steps."""

    otype: Literal["Step"] = "Step"
    step_size: int | None = Field(None, ge=1, description="steps between decays (None: a third of the run)")
    gamma: float = Field(0.1, gt=0.0, le=1.0, description="decay factor")


class ExponentialSchedule(StrictModel):
    """The learning rate times gamma every step."""

    otype: Literal["Exponential"] = "Exponential"
    gamma: float = Field(0.999, gt=0.0, le=1.0, description="decay factor per step")


ScheduleConfig = Annotated[Union[ConstantSchedule, WarmupCosineSchedule, StepSchedule, ExponentialSchedule],
                           Field(discriminator="otype")]


class FitConfig(StrictModel):
    """Keys every fitting problem has. A problem's schema subclasses it and declares ``true`` and ``init`` (a
    StrictModel of its parameters, with the documented ranges as bounds on ``true``) and its own keys."""

    true: StrictModel = Field(default_factory=StrictModel, description="the true parameter values (make the data)")
    init: StrictModel = Field(default_factory=StrictModel, description="the initial guess of the fit")
    noise_std: float = Field(0.0, ge=0.0, description="std of the Gaussian noise added to the observations "
                                                      "(their unit; 0: noise-free)")
    optimizer: OptimizerConfig = Field(default_factory=AdamConfig, description="optimiser, tiny-cuda-nn style")
    schedule: ScheduleConfig = Field(default_factory=WarmupCosineSchedule, description="learning-rate schedule")
    steps: int = Field(300, ge=1, le=10_000_000, description="optimiser steps")
    seed: int = Field(0, ge=0, le=2**32 - 1, description="seed of the observation noise and of any random start")
    log_every: int = Field(10, ge=1, description="steps between metrics records (each waits for the GPU)")
    checkpoint_every: int = Field(100, ge=1, description="steps between checkpoints")

    def builder_dict(self) -> dict[str, Any]:
        """The ``optimizer``/``schedule``/``steps`` dict neural_field_image's builders read (None keys dropped, so
        their defaults apply)."""
        return {"optimizer": self.optimizer.model_dump(exclude_none=True),
                "schedule": self.schedule.model_dump(exclude_none=True), "steps": self.steps}


# -- merging and parsing -------------------------------------------------------------------------------------------
def merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """``override`` over ``base`` (neither modified): nested dicts merge key by key, except a section whose
    ``otype`` changes, which ``override`` replaces whole; any other value replaces the base's."""
    merged = copy.deepcopy(base)
    for key, value in override.items():
        old = merged.get(key)
        if isinstance(old, dict) and isinstance(value, dict):
            if "otype" in value and value["otype"] != old.get("otype"):
                merged[key] = copy.deepcopy(value)
            else:
                merged[key] = merge(old, value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


class _Pairs(list):
    """A JSON object as its (key, value) pairs, so duplicates can be reported with their dotted path."""


def _dedupe(value: Any, path: str, source: str) -> Any:
    if isinstance(value, _Pairs):
        out: dict[str, Any] = {}
        for key, item in value:
            where = f"{path}.{key}" if path else key
            if key in out:
                raise ConfigError([f"config {where}: duplicate key in {source}; give each key once"])
            out[key] = _dedupe(item, where, source)
        return out
    if isinstance(value, list):
        return [_dedupe(v, f"{path}[{i}]", source) for i, v in enumerate(value)]
    return value


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def parse_json(text: str, source: str) -> dict[str, Any]:
    """A JSON object from ``text`` (``source`` names it in errors); ConfigError for invalid JSON, NaN/Infinity,
    duplicate keys or a top level that is not an object."""
    try:
        raw = json.loads(text, object_pairs_hook=_Pairs, parse_constant=_reject_constant)
    except (json.JSONDecodeError, ValueError) as exc:
        raise ConfigError([f"config {source} is not valid JSON: {exc}"]) from None
    data = _dedupe(raw, "", source)
    if not isinstance(data, dict):
        raise ConfigError([f"config {source} must hold a JSON object {{...}}, got {type(data).__name__}"])
    return data


def read_json_file(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The JSON object in the file at ``path`` (ConfigError when missing, a folder, unreadable or invalid)."""
    file = pathlib.Path(path)
    if not file.exists():
        raise ConfigError([f"config file {str(file)!r} does not exist; expected a JSON file"])
    if file.is_dir():
        raise ConfigError([f"config file {str(file)!r} is a folder; expected a JSON file"])
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError([f"config file {str(file)!r} cannot be read as UTF-8 text: {exc}"]) from None
    return parse_json(text, f"file {str(file)!r}")


# -- validation errors as one line each ------------------------------------------------------------------------------
def _model_at(schema: type[BaseModel], loc: tuple[Any, ...], data: Any) -> tuple[type[BaseModel] | None, list[str]]:
    """The model class holding the field at ``loc`` (an extra key's parent), and the dotted key without pydantic's
    union tags (``('optimizer', 'Adam', 'lr')`` -> ``optimizer.lr``)."""
    model: Any = schema
    names: list[str] = []
    i = 0
    while i < len(loc):
        part = loc[i]
        names.append(str(part))
        sub = data.get(part) if isinstance(data, dict) else None
        field = model.model_fields.get(part) if isinstance(model, type) and issubclass(model, BaseModel) else None
        data = sub
        i += 1
        if field is None:
            model = None
            continue
        model = field.annotation
        choices = _union_members(field)
        if choices:
            tag = data.get("otype") if isinstance(data, dict) else None
            if i < len(loc) and loc[i] == tag:
                i += 1   # pydantic's union tag in the location
            model = next((m for m in choices if m.model_fields["otype"].default == tag), None)
    parent = model if isinstance(model, type) and issubclass(model, BaseModel) else None
    return parent, names


def _union_members(field: Any) -> list[type[BaseModel]]:
    args = getattr(field.annotation, "__args__", ())
    return [a for a in args if isinstance(a, type) and issubclass(a, BaseModel) and "otype" in a.model_fields]


def _short(value: Any) -> str:
    text = json.dumps(value) if isinstance(value, (dict, list, bool, type(None))) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _describe(error: dict[str, Any], schema: type[BaseModel], data: dict[str, Any]) -> str:
    loc = tuple(error["loc"])
    kind = error["type"]
    if kind == "extra_forbidden":
        parent, names = _model_at(schema, loc[:-1], data)
        key = str(loc[-1])
        allowed = sorted(parent.model_fields) if parent is not None else []
        where = ".".join(names + [key])
        near = difflib.get_close_matches(key, allowed, n=1)
        hint = f"; did you mean {near[0]!r}?" if near else ""
        return f"config {where} = {_short(error['input'])}: unknown key{hint} allowed: {', '.join(allowed)}"
    parent, names = _model_at(schema, loc, data)
    where = ".".join(names) or "(top level)"
    if kind in ("union_tag_invalid", "union_tag_not_found"):
        field = _field_at(schema, loc, data)
        tags = [m.model_fields["otype"].default for m in _union_members(field)] if field is not None else []
        tag = error["input"].get("otype") if isinstance(error["input"], dict) else None
        near = difflib.get_close_matches(str(tag), tags, n=1) if tag is not None else []
        hint = f"; did you mean {near[0]!r}?" if near else ""
        got = f"otype {tag!r}" if kind == "union_tag_invalid" else "no otype"
        return f"config {where}.otype: {got}{hint} allowed: {', '.join(tags)}"
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        return f"config {where} = {_short(error['input'])}: must be a section (a JSON object {{...}})"
    message = error["msg"]
    message = message[0].lower() + message[1:]
    message = message.replace("input should be", "must be")
    field = _field_at(schema, loc, data)
    described = f" ({field.description})" if field is not None and field.description else ""
    return f"config {where} = {_short(error['input'])}: {message}{described}"


def _field_at(schema: type[BaseModel], loc: tuple[Any, ...], data: Any) -> Any:
    """The pydantic FieldInfo at ``loc`` (union tags skipped), or None."""
    if not loc:
        return None
    parent, _ = _model_at(schema, loc[:-1], data)
    last = loc[-1]
    if parent is None:
        return None
    if last not in parent.model_fields:   # a union tag was the last element
        parent, _ = _model_at(schema, loc[:-2], data)
        last = loc[-2] if len(loc) >= 2 else last
    return parent.model_fields.get(last) if parent is not None else None


def validate(schema: type[FitConfig], data: dict[str, Any]) -> FitConfig:
    """``data`` (the merged dict) as an instance of ``schema``; ConfigError with one line per problem."""
    try:
        return schema.model_validate(data)
    except ValidationError as exc:
        raise ConfigError([_describe(e, schema, data) for e in exc.errors()]) from None


def defaults(schema: type[FitConfig]) -> dict[str, Any]:
    """The default config of ``schema`` as a plain (JSON-ready) dict."""
    return schema().model_dump(mode="json")


def load_config(schema: type[FitConfig], path: str | os.PathLike[str] | None = None,
                overrides: dict[str, Any] | None = None) -> FitConfig:
    """The defaults of ``schema``, with the JSON file at ``path`` and then ``overrides`` (a nested dict, e.g.
    ``{"steps": 50}`` from ``--steps``) merged over them, validated. ConfigError (one line per problem)."""
    data = defaults(schema)
    if path is not None:
        data = merge(data, read_json_file(path))
    if overrides:
        data = merge(data, overrides)
    return validate(schema, data)
