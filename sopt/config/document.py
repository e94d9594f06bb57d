"""A config as documented TOML: every key with its one-line description, type and bounds as a comment above it
(what ``sopt config PROBLEM`` prints; ``sopt run`` accepts the text as it is).

Keys whose value is None are written commented out (TOML has no null; leaving the key out gives None). A section
chosen by ``otype`` lists the other otypes of its family.
"""

from __future__ import annotations

import types
import typing
from typing import Any

import tomli_w
from annotated_types import Ge, Gt, Le, Lt
from pydantic import BaseModel
from pydantic.fields import FieldInfo


def _literal(value: Any) -> str:
    return tomli_w.dumps({"v": value}).strip()[len("v = "):]


def _bounds(field: FieldInfo) -> str:
    parts = []
    for m in field.metadata:
        for cls, sign, attr in ((Ge, ">=", "ge"), (Gt, ">", "gt"), (Le, "<=", "le"), (Lt, "<", "lt")):
            if isinstance(m, cls):
                bound = getattr(m, attr)
                parts.append(f"{sign} {bound}" if isinstance(bound, int) else f"{sign} {bound:g}")
    return ", ".join(parts)


def _type_name(annotation: Any) -> str:
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return " | ".join(repr(a) for a in typing.get_args(annotation))
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(annotation)
        optional = " (optional)" if type(None) in args else ""
        return " | ".join(_type_name(a) for a in args if a is not type(None)) + optional
    if origin is list:
        args = typing.get_args(annotation)
        return f"list of {_type_name(args[0])}" if args else "list"
    return getattr(annotation, "__name__", str(annotation))


def _comment(field: FieldInfo) -> str:
    if field.description is None and typing.get_origin(field.annotation) is typing.Literal:
        return "# the kind (otype) of this section"
    bits = [field.description or ""]
    kind = _type_name(field.annotation)
    bounds = _bounds(field)
    bits.append(f"[{kind}{'; ' + bounds if bounds else ''}]")
    return "# " + " ".join(b for b in bits if b)


def _otype_choices(field: FieldInfo) -> list[str]:
    choices: list[str] = []
    for arg in typing.get_args(field.annotation) or ():
        for inner in typing.get_args(arg) or (arg,):
            if isinstance(inner, type) and issubclass(inner, BaseModel) and "otype" in inner.model_fields:
                choices.append(str(inner.model_fields["otype"].default))
    return choices


def document(model: BaseModel, header: str = "") -> str:
    """``model`` (a config instance) as TOML with a comment above every key."""
    lines: list[str] = [f"# {line}" if line else "#" for line in header.splitlines()]
    _emit(model, [], lines, None)
    return "\n".join(lines).strip() + "\n"


def _emit(model: BaseModel, path: list[str], lines: list[str], section_field: FieldInfo | None) -> None:
    fields = type(model).model_fields
    sections = [(k, f) for k, f in fields.items() if isinstance(getattr(model, k), BaseModel)]
    if path:
        lines.append("")
        if section_field is not None:
            if section_field.description:
                lines.append(f"# {section_field.description}")
            choices = _otype_choices(section_field)
            if choices:
                lines.append(f"# otype: one of {', '.join(choices)} (each has its own keys; changing otype resets them)")
        lines.append(f"[{'.'.join(path)}]")
    for key, field in fields.items():
        value = getattr(model, key)
        if isinstance(value, BaseModel):
            continue
        lines.append(_comment(field))
        dumped = model.model_dump(mode="json")[key]
        if dumped is None:
            lines.append(f"# {key} =   (unset)")
        else:
            lines.append(f"{key} = {_literal(dumped)}")
    for key, field in sections:
        _emit(getattr(model, key), path + [key], lines, field)
