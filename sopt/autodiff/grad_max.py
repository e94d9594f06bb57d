"""max |dL/dy| written by the module that writes dL/dy.

A HashGridEncoding summing its table gradient in fixed point or float16 needs M = max |dL/dy| over the batch before
its atomics (it scales every term by 2^S from M), and reads all of dL/dy once for it (its pass 1). The module after
it computes dL/dy in the first place: TensorCoreMLP's deltas kernel takes the max of what it writes as it writes it,
one atomic per warp, and the pass is skipped.

The encoding's forward *requests* the max for its output's gradient (:func:`request`); the backward that is about
to write that gradient *claims* the request (:func:`claim`), which gives it the (buffer, byte offset) of a uint to
raise to the largest bit pattern of |dL/dx| (NaN and Inf above every finite value, as pass 1 takes it). Requests
are keyed by the gradient's memory, so they reach the writer through Sequential, a Tape, or any other caller.

The max covers what its writer wrote. Where more is added to that gradient afterwards (a Tape adding a second
consumer's dL/dy into it), the adder calls :func:`touched`, and the requester, which asks :func:`intact` before it
trusts the max, runs its own pass after all.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Callable

import slangpy as spy

MAX_REQUESTS = 64   # the newest requests kept (a step makes one per encoding call)

Provide = Callable[[spy.CommandEncoder], tuple[spy.Buffer, int]]
_requests: OrderedDict[tuple[int, int], Provide] = OrderedDict()
_claimed: OrderedDict[tuple[int, int], None] = OrderedDict()   # gradients whose writer raised the max, untouched since


def key(t: spy.Tensor) -> tuple[int, int]:
    """What identifies a gradient tensor's memory (its buffer's address, its offset)."""
    return (t.storage.device_address, int(t.offset))


def request(grad: spy.Tensor, provide: Provide) -> None:
    """Ask whoever next writes ``grad`` in full to write max |grad| too: ``provide(encoder)``, called by the writer
    before it records its kernel, returns the (buffer, byte offset) of the uint slot (zero by then) and notes that
    the max is on its way."""
    k = key(grad)
    _requests[k] = provide
    _requests.move_to_end(k)
    while len(_requests) > MAX_REQUESTS:
        _requests.popitem(last=False)


def claim(grad: spy.Tensor, encoder: spy.CommandEncoder) -> tuple[spy.Buffer, int] | None:
    """For a module about to overwrite all of ``grad``: the (buffer, byte offset) where to raise max |grad|'s bits,
    or None when nobody asked. The request is used up."""
    k = key(grad)
    provide = _requests.pop(k, None)
    if provide is None:
        return None
    _claimed[k] = None
    while len(_claimed) > MAX_REQUESTS:
        _claimed.popitem(last=False)
    return provide(encoder)


def touched(grad: spy.Tensor) -> None:
    """More was added to ``grad`` after its writer raised the max: the max no longer covers it."""
    _claimed.pop(key(grad), None)


def intact(grad_key: tuple[int, int]) -> bool:
    """Whether the gradient whose key is ``grad_key`` holds only what the writer that claimed its request wrote (the
    max it raised covers it). The answer is used up."""
    return _claimed.pop(grad_key, 1) is None
