"""What a problem's config is checked for beyond each key's own bounds, as errors that name the dotted key.

A problem's schema validator calls :func:`refuse` for a value that only the keys together rule out (an unstable
time step, a size the machine cannot hold), so the error reads like a bound's (``config dt = 0.01: ...``) and
comes from config validation, before ``sopt run`` creates the device or the run directory.

**Memory.** Each problem's config has ``memory_estimate() -> int``: the bytes its sizes need (host numpy arrays
and device buffers, a formula documented on the method, rounded up rather than down), and its validator calls
:func:`check_memory`, which refuses a config needing more than :func:`memory_limit`: the host's available
memory (lavapipe's device memory is host memory), or the smallest CUDA device's memory where a CUDA driver
reports less. So a size that cannot fit is one line at once instead of minutes of allocation ending in a
MemoryError or a hang.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic_core import InitErrorDetails, PydanticCustomError

from sopt.runtime.device import cuda_memory_total, host_memory_available

GIB = 2 ** 30
FLOAT = 4   # bytes of a float32 (device buffers) or an int32
DOUBLE = 8  # bytes of a float64 (host arrays)


def refuse(model: BaseModel, errors: list[tuple[tuple[str, ...], Any, str]]) -> None:
    """Raise one pydantic ValidationError holding every ``(dotted key as a tuple, value, message)`` of ``errors``
    (each becomes a ``config KEY = VALUE: MESSAGE`` line); nothing when ``errors`` is empty."""
    if errors:
        raise ValidationError.from_exception_data(type(model).__name__, [
            InitErrorDetails(type=PydanticCustomError("config", message), loc=loc, input=value)
            for loc, value, message in errors])


def memory_limit() -> tuple[int, str]:
    """(bytes, what they are): the most memory a config may need here (see the module docstring)."""
    host = host_memory_available()
    cuda = cuda_memory_total()
    if cuda is not None and cuda < host:
        return cuda, "memory of the CUDA device"
    return host, "host memory available"


def check_memory(model: BaseModel, key: str, estimate: int, formula: str) -> None:
    """Refuse ``model`` (naming ``key``, the size that drives the estimate) when ``estimate`` bytes (from
    ``formula``, the sizes spelled out) exceed :func:`memory_limit`."""
    limit, what = memory_limit()
    if estimate > limit:
        refuse(model, [((key,), getattr(model, key), f"the config needs about {estimate / GIB:.3g} GiB ({formula}), "
                                                     f"more than the {limit / GIB:.3g} GiB of {what}; lower it")])


def rollout_states(model: BaseModel, steps: int) -> int:
    """The most states a rollout of ``steps`` steps holds at once within ``model.rollout_budget`` (None: all
    steps + 1; sopt.sim.rollout's plan); a budget too small for the steps is refused naming rollout_budget
    (rollout() would refuse it only at the first training step, after the run directory exists)."""
    from sopt.sim import plan
    budget = getattr(model, "rollout_budget", None)
    try:
        return plan(steps, budget).peak_states
    except ValueError as exc:
        refuse(model, [(("rollout_budget",), budget, str(exc))])
        raise   # not reached: refuse raised
