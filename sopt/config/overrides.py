"""Command-line overrides in Hydra's grammar: ``a.b=1`` (change a key), ``+a.new=1`` (add one), ``~a.b`` (remove one,
so its default applies).

Values are TOML literals (``0.1``, ``true``, ``"text"``, ``[1, 2]``, ``{k = 1}``); a bare word that is no TOML
literal (``SGD``, ``ReLU``, a path ``/data/photo.jpg`` or ``./photo.jpg``) is that string. A ``=`` key must
already be in the config (else it is a typo: the error suggests the nearest key), a ``+`` key must not be. Applying an override to a section that changes its
``otype`` drops the section's other keys, as a config file naming another otype would: ``optimizer.otype=SGD``
gives SGD's defaults. Every problem is one :class:`~sopt.config.schema.ConfigError` line naming the override.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import math
import re
import tomllib
from typing import Any, Literal

from sopt.config.schema import ConfigError, check_depth, depth_problem, short
from sopt.utils.nesting import text_depth, value_depth

MAX_OVERRIDE_CHARS = 128 * 1024   # the longest word Linux passes on a command line (MAX_ARG_STRLEN)
SHOWN_CHARS = 100   # an error line shows at most this much of an override, a key or a value
_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
# a bare word: a name (SGD, a/b-c.d) or a path (/data/x.jpg, ./x, ../x), as Hydra takes them unquoted
_BARE = re.compile(r"^(?:[A-Za-z_]|/|\.\.?/)[A-Za-z0-9_.\-/+]*$")
REMOVED = object()   # the value of a ``~key`` override


@dataclasses.dataclass(frozen=True)
class Override:
    """One parsed override: ``op`` "set" (``a.b=v``), "add" (``+a.b=v``) or "remove" (``~a.b``)."""

    text: str
    op: Literal["set", "add", "remove"]
    key: tuple[str, ...]
    value: Any = None

    @property
    def dotted(self) -> str:
        return ".".join(self.key)

    @property
    def shown(self) -> str:
        """The override as error lines quote it (cut to SHOWN_CHARS)."""
        return short(self.text, SHOWN_CHARS)


def parse_literal(text: str) -> Any:
    """The TOML literal ``text`` (a bare word that is none: that string): the value grammar of overrides and of
    sweep axes. ValueError saying why otherwise (no TOML literal nor bare word, a non-finite number, or nesting
    deeper than MAX_DEPTH, checked before tomllib, which recurses on brackets, sees the text)."""
    shown = short(text, SHOWN_CHARS)
    _refuse_deep(text_depth(text), shown)   # before tomllib, which recurses on brackets
    try:
        value = tomllib.loads(f"v = {text}")["v"]
    except ValueError:   # TOMLDecodeError, or int()'s refusal of a huge integer
        if _BARE.match(text):
            return text
        raise ValueError(f"value {shown} is not a TOML literal (numbers, true/false, \"strings\", [arrays], "
                         "{tables}) nor a bare word") from None
    _refuse_deep(value_depth(value), shown)   # an inline table's dotted keys ({a.b.c = 1}) nest without brackets
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"value {shown} must be a finite number")
    return value


def _refuse_deep(depth: int, shown: str) -> None:
    problem = depth_problem(depth, f"value {shown}")
    if problem is not None:
        raise ValueError(problem)


def parse_value(text: str, where: str) -> Any:
    """The TOML literal ``text`` (a bare word: that string); ConfigError naming ``where`` otherwise."""
    try:
        return parse_literal(text)
    except ValueError as exc:
        raise ConfigError([f"override {where}: {exc}"]) from None


def parse_override(text: str) -> Override:
    """``text`` (one command-line word) as an :class:`Override`; ConfigError for a bad grammar, a word longer than
    MAX_OVERRIDE_CHARS, or a key and value nested deeper than MAX_DEPTH."""
    shown = short(text, SHOWN_CHARS)
    if len(text) > MAX_OVERRIDE_CHARS:
        raise ConfigError([f"override {shown} is {len(text)} characters long; at most {MAX_OVERRIDE_CHARS}"])
    if text.startswith("~"):
        key = text[1:]
        if "=" in key:
            raise ConfigError([f"override {shown}: ~KEY removes a key and takes no value (write ~{key.split('=')[0]})"])
        if not _KEY.match(key):
            raise ConfigError([f"override {shown}: {short(key, SHOWN_CHARS)} is not a dotted key like a.b"])
        check_depth(len(key.split(".")), f"override {shown}")
        return Override(text, "remove", tuple(key.split(".")))
    op: Literal["set", "add"] = "add" if text.startswith("+") else "set"
    body = text[1:] if op == "add" else text
    if "=" not in body:
        raise ConfigError([f"override {shown}: expected KEY=VALUE, +KEY=VALUE or ~KEY"])
    key, raw = body.split("=", 1)
    if not _KEY.match(key):
        raise ConfigError([f"override {shown}: {short(key, SHOWN_CHARS)} is not a dotted key like a.b"])
    if raw == "":
        raise ConfigError([f"override {shown}: no value after '='; give one (a string as \"\")"])
    keys = tuple(key.split("."))
    check_depth(len(keys), f"override {shown}")   # before the value is parsed
    value = parse_value(raw, shown)
    check_depth(len(keys) + value_depth(value), f"override {shown}")   # what the config holds once applied
    return Override(text, op, keys, value)


def _suggest(key: str, options: list[str]) -> str:
    near = difflib.get_close_matches(key, options, n=1)
    return f"; did you mean {near[0]!r}?" if near else ""


def apply_override(data: dict[str, Any], override: Override) -> dict[str, Any]:
    """``data`` (not modified) with ``override`` applied; ConfigError when its key is missing (``=``, ``~``) or
    present (``+``), or a parent is not a section."""
    out = copy.deepcopy(data)
    node: Any = out
    for i, part in enumerate(override.key[:-1]):
        where = ".".join(override.key[: i + 1])
        if not isinstance(node, dict):
            raise ConfigError([f"override {override.shown}: {'.'.join(override.key[:i])} is not a section"])
        if part not in node:
            if override.op == "add":
                node[part] = {}
            else:
                raise ConfigError([f"override {override.shown}: no key {where!r}{_suggest(part, sorted(node))} "
                                   f"allowed here: {', '.join(sorted(node))}"])
        node = node[part]
    last = override.key[-1]
    if not isinstance(node, dict):
        raise ConfigError([f"override {override.shown}: {'.'.join(override.key[:-1])} is not a section"])
    if override.op == "add":
        if last in node:
            raise ConfigError([f"override {override.shown}: key {override.dotted!r} exists; change it with "
                               f"{override.text[1:]}"])
        node[last] = override.value
    elif last not in node:
        hint = _suggest(last, sorted(node))
        how = "" if override.op == "remove" else f" (add a new key with +{override.text})"
        raise ConfigError([f"override {override.shown}: no key {override.dotted!r}{hint}{how} allowed here: "
                           f"{', '.join(sorted(node)) or '(none)'}"])
    elif override.op == "remove":
        del node[last]
    elif last == "otype" and node.get("otype") != override.value:
        node.clear()   # another family member: its own keys and defaults
        node["otype"] = override.value
    else:
        node[last] = override.value
    return out


def apply_overrides(data: dict[str, Any], texts: list[str]) -> dict[str, Any]:
    """``data`` with every override in ``texts`` applied in order (each one command-line word)."""
    for text in texts:
        data = apply_override(data, parse_override(text))
    return data
