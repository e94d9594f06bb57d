"""Config schemas: strict pydantic v2 models, tiny-cuda-nn-style merging, and one-line errors.

Every config model derives from :class:`StrictModel`: unknown keys are errors, types are strict (``"0.01"`` is no
float, ``"no"`` or ``0`` no bool, ``1.0`` no int; an int is a float), floats are finite, numbers carry bounds
(``Field(ge=..., le=...)``) and every field has a one-line description with its unit.

A user config (from a TOML or JSON file, :mod:`sopt.config.files`) is merged over a schema's defaults
(:func:`merge`): a section updates the default's entries, unless it names another ``otype``, which replaces the
section. :func:`validate` turns every problem pydantic finds into one line of a :class:`ConfigError`: the dotted
key, the value, and what is allowed (``config optimizer.learnig_rate = 0.1: unknown key; did you mean
'learning_rate'? allowed: ...``).
"""

from __future__ import annotations

import copy
import difflib
import json
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError

from sopt.utils.nesting import text_depth
from sopt.utils.validation import float32_problem

M = TypeVar("M", bound=BaseModel)


MAX_LINE_CHARS = 1000   # an error line longer than this (a huge key or value echoed) keeps its start and its end


def _one_line(text: str) -> str:
    """``text`` as one printable line of at most MAX_LINE_CHARS: whitespace runs (newlines included) become one
    space, other control characters (NUL, ESC: a terminal would act on them) their escapes."""
    line = " ".join(text.split())
    if not line.isprintable():
        line = "".join(c if c.isprintable() else c.encode("unicode_escape", "backslashreplace").decode("ascii")
                       for c in line)
    if len(line) > MAX_LINE_CHARS:
        cut = len(line) - MAX_LINE_CHARS
        line = f"{line[:MAX_LINE_CHARS // 2]} ...({cut} characters left out)... {line[-MAX_LINE_CHARS // 2:]}"
    return line


class ConfigError(ValueError):
    """A config that does not validate; ``lines``: one line per problem (``str()`` joins them)."""

    def __init__(self, lines: list[str]) -> None:
        self.lines = [_one_line(str(line)) for line in lines]   # each one short line, whatever the input held
        super().__init__("\n".join(self.lines))


class StrictModel(BaseModel):
    """Base of every config model: unknown keys forbidden, strict types, finite floats, frozen values, and every
    float (also inside lists, tuples and dicts) 0 or a normal float32: the kernels read them as float32, where
    ``learning_rate = 1e-50`` would be 0 and ``3.5e38`` Inf (:func:`sopt.utils.validation.float32_problem`)."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False, frozen=True,
                              validate_default=True)

    @field_validator("*", mode="after")
    @classmethod
    def _normal_float32(cls, value: Any, info: ValidationInfo) -> Any:
        # after each field's own type and bounds: its error line names the dotted key (schema._describe)
        stack = [value]
        while stack:
            item = stack.pop()
            if isinstance(item, float):
                problem = float32_problem(item, str(info.field_name))
                if problem is not None:
                    message = problem if item is value else f"its element {item!r}: {problem}"
                    raise PydanticCustomError("float32", "{message}", {"message": message})
            elif isinstance(item, (list, tuple)):
                stack.extend(reversed(item))   # the first offending element is the one reported
            elif isinstance(item, dict):
                stack.extend(reversed(list(item.values())))
        return value


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


# -- nesting: bounded before anything recursive (the parsers included) sees the data ------------------------------
MAX_DEPTH = 32   # levels of sections, arrays and inline tables, the top level included; the deepest schema has 4
def depth_problem(depth: int, what: str) -> str | None:
    """The line saying that ``what`` (a config, an override, a value) nests ``depth`` levels, too many; None when
    ``depth`` is at most MAX_DEPTH."""
    if depth <= MAX_DEPTH:
        return None
    return (f"{what} is nested {depth} levels deep; at most {MAX_DEPTH} levels (sections, arrays and inline tables, "
            "the top level included)")


def check_depth(depth: int, what: str) -> None:
    """ConfigError when ``depth`` exceeds MAX_DEPTH (:func:`depth_problem`)."""
    problem = depth_problem(depth, what)
    if problem is not None:
        raise ConfigError([problem])


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def parse_json(text: str, source: str) -> dict[str, Any]:
    """A JSON object from ``text`` (``source`` names it in errors); ConfigError for invalid JSON, NaN/Infinity,
    duplicate keys, a top level that is not an object or nesting deeper than MAX_DEPTH."""
    check_depth(text_depth(text), f"config {source}")
    try:
        raw = json.loads(text, object_pairs_hook=_Pairs, parse_constant=_reject_constant)
    except (json.JSONDecodeError, ValueError) as exc:
        raise ConfigError([f"config {source} is not valid JSON: {exc}"]) from None
    data = _dedupe(raw, "", source)
    if not isinstance(data, dict):
        raise ConfigError([f"config {source} must hold a JSON object {{...}}, got {type(data).__name__}"])
    return data


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


def short(value: Any, limit: int = 60) -> str:
    """``value`` as an error line shows it: JSON for sections, arrays, booleans and null, else repr; cut to ``limit``
    characters (a huge value or key is recognisable from its start)."""
    text = json.dumps(value) if isinstance(value, (dict, list, bool, type(None))) else repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


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
        return f"config {where} = {short(error['input'])}: unknown key{hint} allowed: {', '.join(allowed)}"
    parent, names = _model_at(schema, loc, data)
    if not loc and kind in ("value_error", "assertion_error"):   # a model validator of the whole config: its
        reason = str(error.get("ctx", {}).get("error", error["msg"]))   # message, once, without the config dumped
        return reason if reason.startswith("config ") else f"config: {reason}"
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
        return f"config {where} = {short(error['input'])}: must be a section (a JSON object {{...}})"
    message = error["msg"]
    message = message[0].lower() + message[1:]
    message = message.replace("input should be", "must be")
    field = _field_at(schema, loc, data)
    described = f" ({field.description})" if field is not None and field.description else ""
    return f"config {where} = {short(error['input'])}: {message}{described}"


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


def validate(schema: type[M], data: dict[str, Any]) -> M:
    """``data`` (the merged dict) as an instance of ``schema``; ConfigError with one line per problem."""
    try:
        return schema.model_validate(data)
    except ValidationError as exc:
        raise ConfigError([_describe(e, schema, data) for e in exc.errors()]) from None


def defaults(schema: type[BaseModel]) -> dict[str, Any]:
    """The default config of ``schema`` as a plain (JSON-ready) dict."""
    return schema().model_dump(mode="json")


def complete(schema: type[BaseModel], data: dict[str, Any], default: dict[str, Any] | None = None) -> dict[str, Any]:
    """``data`` (not modified) with every key it lacks set to its default: the value in ``default`` (the
    schema's default config, :func:`defaults`), or, in a section whose ``otype`` differs from the default's,
    the defaults of that otype's own model. So ``~a.b`` restores the value ``sopt config`` shows, and after
    ``optimizer.otype=SGD`` the section holds SGD's keys, which later overrides may change
    (``optimizer.momentum=0.9``). Unknown otypes and values of the wrong kind are left for :func:`validate`."""
    default = defaults(schema) if default is None else default
    out = copy.deepcopy(data)
    for key, field in schema.model_fields.items():
        if key not in out:
            if key in default:
                out[key] = copy.deepcopy(default[key])
            continue
        value = out[key]
        if not isinstance(value, dict):
            continue
        base = default.get(key)
        members = _union_members(field)
        if members:
            model = next((m for m in members if m.model_fields["otype"].default == value.get("otype")), None)
            if model is not None and not (isinstance(base, dict) and base.get("otype") == value.get("otype")):
                try:
                    base = model().model_dump(mode="json")
                except ValidationError:   # a member with required keys: validate names them
                    base = {}
        else:
            model = field.annotation if isinstance(field.annotation, type) and issubclass(field.annotation,
                                                                                          BaseModel) else None
        if model is not None:
            out[key] = complete(model, value, base if isinstance(base, dict) else {})
    return out
