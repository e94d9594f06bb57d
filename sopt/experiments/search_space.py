"""The search space of ``sopt sweep``: which command-line tokens are sweep axes, their grammar, and the trials.

A token ``KEY=VALUE`` is a sweep axis when VALUE has a top-level comma (outside brackets and quotes) or is a space
function; any other token (``steps=50``, ``+a.new=1``, ``~a.b``) is a base override passed to every trial as is::

    optimizer.otype=Adam,SGD             a list: TOML literals, a bare word that is no TOML literal is a string
    model.n_neurons=range(16,65,16)      Python's range over ints, end exclusive: 16, 32, 48, 64
    optimizer.learning_rate=uniform(0.001,0.1)      a float drawn uniformly from [a, b)
    optimizer.learning_rate=loguniform(1e-4,1e-1)   exp(uniform(ln a, ln b)), 0 < a < b
    encoding.otype=choice(Frequency,Identity)       like a list

Grid search (only lists, ranges and choices, no ``--samples``) runs the cartesian product, the first key varying
slowest. Random search (any uniform/loguniform key, or ``--samples N``) draws N trials from a seeded generator:
the continuous keys from their distributions, the discrete ones uniformly from their values; the same seed gives
the same trials.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import random
import re
from typing import Any, Sequence

from sopt.config.overrides import parse_literal

SPACE_FUNCTIONS = ("range", "uniform", "loguniform", "choice")
MAX_TRIALS = 10_000     # a sweep's trials, each a run directory and a line of sweep.json: checked before enumerating
_FUNCTION = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)\((.*)\)$", re.DOTALL)
_KEY = re.compile(r"^\+?[A-Za-z_][A-Za-z0-9_\-]*(\.[A-Za-z_][A-Za-z0-9_\-]*)*$")
_BARE_STRING = re.compile(r"^[A-Za-z_][A-Za-z0-9_\-]*$")      # written without quotes


class SpaceError(ValueError):
    """A malformed sweep axis; ``str()`` is one line naming the key, the spec and what is allowed."""


@dataclasses.dataclass(frozen=True)
class Axis:
    """One swept key. ``kind``: "list" (``values`` from a comma list, range or choice) or "uniform"/"loguniform"
    (``low``, ``high``). ``key`` is the override's key as given (a leading ``+`` adds a new key); ``spec`` the
    value as given on the command line."""

    key: str
    spec: str
    kind: str
    values: tuple[Any, ...] = ()
    low: float = 0.0
    high: float = 0.0

    @property
    def name(self) -> str:
        """The dotted key without the ``+`` of an added key: the name of the parameter in sweep.json."""
        return self.key.removeprefix("+")

    @property
    def continuous(self) -> bool:
        return self.kind in ("uniform", "loguniform")

    def sample(self, rng: random.Random) -> Any:
        """One value drawn from this axis with ``rng``."""
        if self.kind == "uniform":
            return self.low + (self.high - self.low) * rng.random()
        if self.kind == "loguniform":
            return math.exp(math.log(self.low) + (math.log(self.high) - math.log(self.low)) * rng.random())
        return self.values[rng.randrange(len(self.values))]


# -- tokens --------------------------------------------------------------------------------------------------------
def split_top_level(text: str, separator: str = ",") -> list[str]:
    """``text`` split at each ``separator`` outside brackets/braces/parentheses and quoted strings."""
    parts, depth, quote, start, i = [], 0, "", 0, 0
    while i < len(text):
        c = text[i]
        if quote:
            if c == "\\" and quote == '"':
                i += 1
            elif c == quote:
                quote = ""
        elif c in "\"'":
            quote = c
        elif c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == separator and depth == 0:
            parts.append(text[start:i])
            start = i + 1
        i += 1
    parts.append(text[start:])
    return parts


def is_axis(token: str) -> bool:
    """Whether a ``KEY=VALUE`` token is a sweep axis (a top-level comma or a space function) or a base override."""
    if "=" not in token or token.startswith("~"):
        return False
    value = token.split("=", 1)[1].strip()
    return len(split_top_level(value)) > 1 or _FUNCTION.match(value) is not None


def parse_value(text: str, where: str) -> Any:
    """One value as a TOML literal (``0.1``, ``true``, ``"x"``, ``[1, 2]``); a bare word that is no TOML literal
    (``Adam``, ``relu``, ``data/img.png``) is a string: the grammar of ``sopt run``'s override values
    (sopt.config.overrides). ``where`` names the key in the error of a malformed or non-finite value."""
    text = text.strip()
    if not text:
        raise SpaceError(f"{where}: empty value; give a TOML literal or a bare word (a string as \"\")")
    try:
        return parse_literal(text)
    except ValueError as exc:
        raise SpaceError(f"{where}: {exc}") from None


def format_value(value: Any, bare: bool = True) -> str:
    """``value`` as the TOML literal that :func:`parse_value` reads back to an equal value (a top-level string that
    is a bare word stays bare when ``bare``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str):
        if bare and _BARE_STRING.match(value):
            try:
                if parse_value(value, "") == value:
                    return value
            except SpaceError:
                pass
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(format_value(v, bare=False) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k)} = {format_value(v, bare=False)}" for k, v in value.items()) + "}"
    raise TypeError(f"cannot write {value!r} ({type(value).__name__}) as a TOML literal")


def _numbers(args: list[str], key: str, spec: str, want_int: bool) -> list[Any]:
    out = []
    for arg in args:
        value = parse_value(arg, f"sweep key {key} = {spec}")
        if want_int and (isinstance(value, bool) or not isinstance(value, int)):
            raise SpaceError(f"sweep key {key} = {spec}: range takes integers, got {arg.strip()!r}")
        if not want_int and (isinstance(value, bool) or not isinstance(value, (int, float))
                             or not math.isfinite(value)):
            raise SpaceError(f"sweep key {key} = {spec}: bounds must be finite numbers, got {arg.strip()!r}")
        out.append(value)
    return out


def parse_axis(token: str) -> Axis:
    """A ``KEY=SPEC`` token (see the module docstring) as an :class:`Axis`; :class:`SpaceError` names the key."""
    key, spec = (part.strip() for part in token.split("=", 1))
    if not _KEY.match(key):
        raise SpaceError(f"sweep key {key!r} in {token!r}: not a dotted key (like optimizer.learning_rate)")
    where = f"sweep key {key} = {spec}"
    call = _FUNCTION.match(spec)
    if call is None:
        items = split_top_level(spec)
        _check_count(len(items), where)
        return Axis(key, spec, "list", _distinct([parse_value(item, where) for item in items], where))
    function, inner = call.group(1), call.group(2)
    args = split_top_level(inner) if inner.strip() else []
    if function == "range":
        if not 1 <= len(args) <= 3:
            raise SpaceError(f"{where}: range takes (stop), (start, stop) or (start, stop, step) integers, "
                             f"got {len(args)} arguments")
        bounds = _numbers(args, key, spec, want_int=True)
        if len(bounds) == 3 and bounds[2] == 0:
            raise SpaceError(f"{where}: range step must not be 0")
        values = range(*bounds)
        if not values:
            raise SpaceError(f"{where}: the range is empty (the end is exclusive, as in Python)")
        _check_count((values.stop - values.start + values.step - (1 if values.step > 0 else -1)) // values.step,
                     where)      # len() of a range past sys.maxsize raises
        return Axis(key, spec, "list", tuple(values))
    if function in ("uniform", "loguniform"):
        if len(args) != 2:
            raise SpaceError(f"{where}: {function} takes two bounds (a, b), got {len(args)} arguments")
        low, high = _numbers(args, key, spec, want_int=False)
        if not low < high:
            raise SpaceError(f"{where}: {function} needs a < b, got a = {low}, b = {high}")
        if function == "loguniform" and low <= 0:
            raise SpaceError(f"{where}: loguniform needs 0 < a < b, got a = {low}")
        return Axis(key, spec, function, low=float(low), high=float(high))
    if function == "choice":
        if not args:
            raise SpaceError(f"{where}: choice needs at least one value")
        _check_count(len(args), where)
        return Axis(key, spec, "list", _distinct([parse_value(a, where) for a in args], where))
    raise SpaceError(f"{where}: unknown space function {function!r}; allowed: {', '.join(SPACE_FUNCTIONS)} "
                     f"(quote a string value that looks like a call)")


def _check_count(count: int, where: str) -> None:
    if count > MAX_TRIALS:
        raise SpaceError(f"{where}: {count} values; a sweep has at most {MAX_TRIALS} trials")


def _distinct(values: list[Any], where: str) -> tuple[Any, ...]:
    seen: set[tuple[str, str]] = set()        # by type and literal: one pass, not a comparison of every pair
    for value in values:
        key = (type(value).__name__, format_value(value))
        if key in seen:
            raise SpaceError(f"{where}: the value {format_value(value)} is given twice")
        seen.add(key)
    return tuple(values)


# -- the space -----------------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class SearchSpace:
    """The sweep axes and base overrides of a command line, and how trials are drawn from them."""

    axes: tuple[Axis, ...]
    base_overrides: tuple[str, ...]
    samples: int | None = None
    seed: int | None = None

    @property
    def method(self) -> str:
        """"grid" (every combination) or "random" (``samples`` seeded draws)."""
        return "random" if self.samples is not None else "grid"

    @property
    def grid_size(self) -> int:
        return math.prod(len(a.values) for a in self.axes)

    def describe(self) -> str:
        """e.g. ``grid 2 x 3 = 6 trials`` or ``random search, 20 samples, seed 0``."""
        if self.method == "grid":
            sizes = " x ".join(str(len(a.values)) for a in self.axes)
            return f"grid {sizes} = {self.grid_size} trials"
        return f"random search, {self.samples} samples, seed {self.seed}"

    def trials(self) -> list[dict[str, Any]]:
        """The parameters of each trial in order: ``[{axis name: value}]``."""
        if self.method == "grid":
            return [{a.name: v for a, v in zip(self.axes, combo)}
                    for combo in itertools.product(*(a.values for a in self.axes))]
        rng = random.Random(self.seed)
        return [{a.name: a.sample(rng) for a in self.axes} for _ in range(self.samples or 0)]

    def overrides(self, params: dict[str, Any]) -> list[str]:
        """A trial's overrides: ``KEY=LITERAL`` for each axis, in the axes' order."""
        return [f"{a.key}={format_value(params[a.name])}" for a in self.axes]


def parse_space(tokens: Sequence[str], samples: int | None = None, seed: int | None = None) -> SearchSpace:
    """The command line's override tokens split into sweep axes and base overrides (see the module docstring).

    ``samples``: ``--samples`` (random search); required when an axis is continuous. ``seed``: the random
    search's seed (default 0; ignored by a grid). Raises :class:`SpaceError` (one line naming the key)."""
    axes: list[Axis] = []
    base: list[str] = []
    for token in tokens:
        if is_axis(token):
            axes.append(parse_axis(token))
        else:
            base.append(token)
    if not axes:
        raise SpaceError("no sweep axes: give at least one KEY=a,b,c, KEY=range(...), KEY=choice(...), "
                         "KEY=uniform(a,b) or KEY=loguniform(a,b)")
    names: dict[str, str] = {}
    for axis in axes:
        if axis.name in names:
            raise SpaceError(f"sweep key {axis.key} is swept twice ({names[axis.name]} and {axis.spec})")
        names[axis.name] = axis.spec
    for token in base:
        key = token.split("=", 1)[0].strip().lstrip("+~")
        if key in names:
            raise SpaceError(f"sweep key {key} = {names[key]} is also a base override ({token}); give it once")
    continuous = [a.key for a in axes if a.continuous]
    if samples is not None and not 1 <= samples <= MAX_TRIALS:
        raise SpaceError(f"--samples {samples}: must be in [1, {MAX_TRIALS}]")
    grid = math.prod(len(a.values) for a in axes if not a.continuous)
    if samples is None and grid > MAX_TRIALS:          # before itertools.product enumerates them
        raise SpaceError(f"the grid {' x '.join(str(len(a.values)) for a in axes)} has {grid} trials; a sweep has at "
                         f"most {MAX_TRIALS} (sweep fewer values, or draw --samples N of them)")
    if continuous and samples is None:
        raise SpaceError(f"sweep key {continuous[0]} = {axes[[a.key for a in axes].index(continuous[0])].spec}: "
                         f"a continuous axis needs random search; add --samples N")
    if samples is None:
        seed = None
    elif seed is None:
        seed = 0
    return SearchSpace(tuple(axes), tuple(base), samples, seed)
