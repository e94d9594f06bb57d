"""Config files: TOML (comments, a user's favourite) and JSON (tiny-cuda-nn style) in; TOML out, written atomically.

A file's format is its suffix: ``.toml`` or ``.json``. Both parsers reject duplicate keys; TOML has no null, so a
written config leaves out every key whose value is None (each such key's default is None: reading the file back
gives the same config). Every problem is a :class:`~sopt.config.schema.ConfigError` line naming the file.
"""

from __future__ import annotations

import errno
import math
import os
import pathlib
import tomllib
from typing import Any

import tomli_w

from sopt.utils import atomic_write
from sopt.utils.regular_file import FileTooLargeError, NotRegularFileError, name_problem, read_bytes
from sopt.config.schema import ConfigError, check_depth, parse_json, short
from sopt.utils.nesting import text_depth, value_depth

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
    and integers of over 4300 digits included), nesting deeper than MAX_DEPTH and nan/inf values."""
    check_depth(text_depth(text, top=1), f"config {source}")   # before tomllib, which recurses on brackets
    try:
        data = tomllib.loads(text)
    except ValueError as exc:   # TOMLDecodeError, or int()'s refusal of a huge integer
        raise ConfigError([f"config {source} is not valid TOML: {exc}"]) from None
    check_depth(value_depth(data), f"config {source}")   # dotted keys (a.b.c = 1) nest without brackets
    _check_finite(data, "", source)
    return data


MAX_CONFIG_BYTES = 4 * 1024 * 1024   # a config is a few KiB; the limit keeps a wrong file from filling memory
SHOWN_PATH_CHARS = 300   # an error line shows at most this much of a file name
def _open_error(file: pathlib.Path, exc: OSError) -> str:
    """Why ``file`` could not be opened or examined, in words (after 'config file NAME')."""
    if exc.errno == errno.ENOENT:
        if file.is_symlink():
            return f"is a broken symbolic link (to {os.readlink(file)!r})"
        return "does not exist"
    if exc.errno == errno.ENAMETOOLONG:   # within NAME_MAX and PATH_MAX, but this filesystem allows less
        return "has a name too long for this filesystem"
    if exc.errno == errno.ELOOP:
        return "is a loop of symbolic links"
    return f"cannot be opened: {exc.strerror or exc}"


def read_text(path: str | os.PathLike[str], expected: str = "a .toml or .json file") -> str:
    """The UTF-8 text of the config file at ``path``: only a regular file (a link to one included) of at most
    MAX_CONFIG_BYTES is read, so a FIFO, a device such as /dev/zero, a folder or a huge file is one ConfigError line
    at once, never a hang or a full memory. ``expected`` ends the line of a missing or wrong file."""
    name = short(str(path), SHOWN_PATH_CHARS)
    if str(path) == "":
        raise ConfigError([f"config file '': empty path; name {expected}"])
    problem = name_problem(path)
    if problem is not None:
        raise ConfigError([f"config file {name} {problem}; expected {expected}"])
    file = pathlib.Path(path)
    try:
        data = read_bytes(file, MAX_CONFIG_BYTES)
    except NotRegularFileError as exc:
        raise ConfigError([f"config file {name} is {exc.kind}; expected {expected}"]) from None
    except FileTooLargeError as exc:
        raise ConfigError([f"config file {name} is {exc.size} bytes or more; at most {MAX_CONFIG_BYTES} bytes "
                           f"({MAX_CONFIG_BYTES // 2**20} MiB) are read"]) from None
    except OSError as exc:
        raise ConfigError([f"config file {name} {_open_error(file, exc)}; expected {expected}"]) from None
    try:
        return data.decode("utf-8-sig")   # a byte order mark (some Windows editors write one) is no content
    except UnicodeDecodeError as exc:
        raise ConfigError([f"config file {name} cannot be read as UTF-8 text: {exc}"]) from None


def read_json_file(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The JSON object in the file at ``path`` whatever its suffix; ConfigError when it is missing, no regular
    file, too large, unreadable or invalid (:func:`sopt.config.files.read_text`)."""
    return parse_json(read_text(path, "a JSON file"), f"file {str(path)!r}")


def read_config_file(path: str | os.PathLike[str]) -> tuple[str, dict[str, Any]]:
    """(text, config) of the ``.toml`` or ``.json`` file at ``path``: the text as read (:func:`read_text`) and
    the nested dict it holds; ConfigError when the file is missing, no regular file, too large, unreadable, of
    another suffix or invalid."""
    text = read_text(path)   # first: a FIFO or a folder is said to be one, whatever its suffix
    suffix = pathlib.Path(path).suffix.lower()
    if suffix not in FORMATS:
        raise ConfigError([f"config file {str(path)!r} has suffix {pathlib.Path(path).suffix!r}; allowed: "
                           f"{', '.join(FORMATS)}"])
    source = f"file {str(path)!r}"
    return text, parse_toml(text, source) if suffix == ".toml" else parse_json(text, source)


def read_config(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The config (a nested dict) in the ``.toml`` or ``.json`` file at ``path`` (:func:`read_config_file`)."""
    return read_config_file(path)[1]


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
    (:func:`sopt.utils.atomic_write.write_text`): a reader (or a crash) never sees half a file, the old file stays until
    the new one is whole, and a link at ``path`` is replaced rather than written through."""
    atomic_write.write_text(path, text)
