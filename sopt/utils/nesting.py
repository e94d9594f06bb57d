"""How deeply TOML or JSON text, or a parsed value, nests: found without recursion.

Python's parsers (tomllib, json) and any code that walks a nested value recurse, and raise RecursionError some
hundreds of levels down; configs and checkpoint metadata come from users, so their depth is measured first,
linearly, and bounded by the reader (``sopt.config.schema.MAX_DEPTH``, ``sopt.train.checkpoint``'s own bound).
"""

from __future__ import annotations

import itertools
import re
from typing import Any

# what TOML or JSON text holds besides its nesting: strings (escapes included) and comments, skipped whole
_NOT_NESTING = re.compile(r'"""[^"\\]*(?:(?:\\.|"(?!""))[^"\\]*)*"""|' r"'''.*?'''|"
                          r'"[^"\\\n]*(?:\\.[^"\\\n]*)*"|' r"'[^'\n]*'|#[^\n]*", re.DOTALL)
_NOT_BRACKETS = re.compile(r"[^\[\]{}]+")
_BRACKET_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


def text_depth(text: str, top: int = 0) -> int:
    """How deep the brackets of TOML or JSON ``text`` nest (strings and comments skipped), plus ``top`` (1 for TOML,
    whose top-level table has no brackets). Linear and without recursion: it runs before the parsers, which recurse
    (tomllib and json raise RecursionError some hundreds of levels down). A closing bracket too many only lowers
    the count: the parsers stop at it, before anything nested after it."""
    brackets = _NOT_BRACKETS.sub("", _NOT_NESTING.sub("", text))
    return max(0, max(itertools.accumulate(map(_BRACKET_STEP.__getitem__, brackets)), default=0)) + top


def value_depth(value: Any) -> int:
    """Levels of dicts and lists in ``value`` (0 for a scalar), found without recursion: TOML's dotted keys
    (``a.b.c = 1``) nest tables without a bracket."""
    deepest = 0
    stack = [(value, 1)]
    while stack:
        item, level = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is not None:
            deepest = max(deepest, level)
            stack.extend((child, level + 1) for child in children)
    return deepest
