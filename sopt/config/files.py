"""Config files: TOML (comments, a user's favourite) and JSON (tiny-cuda-nn style) in; TOML out, written atomically.

A file's format is its suffix: ``.toml`` or ``.json``. Both parsers reject duplicate keys; TOML has no null, so a
written config leaves out every key whose value is None (each such key's default is None: reading the file back
gives the same config). Every problem is a :class:`~sopt.config.schema.ConfigError` line naming the file.
"""

from __future__ import annotations

import math
import os
import pathlib
import tomllib
from typing import Any

import tomli_w

from sopt import atomic_write
from sopt.config.schema import ConfigError, parse_json

FORMATS = (".toml", ".json")


def _check_finite(value: Any, path: str, source: str) -> None:
    """TOML allows nan and inf literals; a config never means them."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError([f"config {path} = {value!r} in {source}: must be a finite number"])
    if isinstance(value, dict):
        for key, item in value.items():
            _check_finite(item, f"{path}.{key}" if path else key, source)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _check_finite(item, f"{path}[{i}]", source)


def parse_toml(text: str, source: str) -> dict[str, Any]:
    """The table in TOML ``text`` (``source`` names it in errors); ConfigError for invalid TOML (duplicate keys
    included) and for nan/inf values."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError([f"config {source} is not valid TOML: {exc}"]) from None
    _check_finite(data, "", source)
    return data


def read_config(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The config (a nested dict) in the ``.toml`` or ``.json`` file at ``path``; ConfigError when the file is
    missing, a folder, unreadable, of another suffix or invalid."""
    file = pathlib.Path(path)
    if str(path) == "":
        raise ConfigError(["config file '': empty path; name a .toml or .json file"])
    if not file.exists():
        raise ConfigError([f"config file {str(file)!r} does not exist; expected a .toml or .json file"])
    if file.is_dir():
        raise ConfigError([f"config file {str(file)!r} is a folder; expected a .toml or .json file"])
    suffix = file.suffix.lower()
    if suffix not in FORMATS:
        raise ConfigError([f"config file {str(file)!r} has suffix {file.suffix!r}; allowed: {', '.join(FORMATS)}"])
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError([f"config file {str(file)!r} cannot be read as UTF-8 text: {exc}"]) from None
    source = f"file {str(file)!r}"
    return parse_toml(text, source) if suffix == ".toml" else parse_json(text, source)


def without_none(data: Any) -> Any:
    """``data`` with every None-valued key left out (TOML has no null)."""
    if isinstance(data, dict):
        return {k: without_none(v) for k, v in data.items() if v is not None}
    if isinstance(data, list):
        return [without_none(v) for v in data]
    return data


def dumps_toml(data: dict[str, Any]) -> str:
    """``data`` as TOML text, None values left out; scalars before sections, as tomli_w orders them."""
    return tomli_w.dumps(without_none(data))


def write_atomic(path: str | os.PathLike[str], text: str) -> None:
    """``text`` into ``path`` through a fresh temporary file in the same folder and a rename
    (:func:`sopt.atomic_write.write_text`): a reader (or a crash) never sees half a file, the old file stays until
    the new one is whole, and a link at ``path`` is replaced rather than written through."""
    atomic_write.write_text(path, text)


def write_toml(path: str | os.PathLike[str], data: dict[str, Any]) -> None:
    """``data`` as TOML at ``path``, atomically (:func:`write_atomic`)."""
    write_atomic(path, dumps_toml(data))
