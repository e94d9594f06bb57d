"""Session: one torch autograd call of sopt work, on a sopt Tape whose forward runs now and backward later.

torch runs a ``torch.autograd.Function``'s forward and backward at different times; sopt records a step's calls
on a :class:`sopt.Tape` and their backward in reverse. A session joins them: :meth:`forward` records the sopt
calls on a tape and submits them at once (the tape keeps what their backward reads), :meth:`backward` records
the tape's backward into a new encoder and submits it. Tapes are reused from a free list, so a training loop
allocates nothing in steady state: a session's owner releases it once the backward's gradients are read (or
once the forward's outputs are, when no backward will run).
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

import slangpy as spy

from sopt.runtime import device as dev
from sopt.autodiff.tape import Tape

_free: list[Tape] = []


class Session:
    """A tape for one autograd call (see the module docstring)."""

    def __init__(self) -> None:
        self.tape = _free.pop() if _free else Tape()
        self.tape.reset()
        self._released = False

    @contextlib.contextmanager
    def forward(self) -> Iterator[Tape]:
        """Record sopt calls on the tape (``with session.forward() as tape:``); submitted on exit."""
        try:
            with self.tape:
                yield self.tape
        except BaseException:
            self.release()
            raise
        self.tape.submit()

    @contextlib.contextmanager
    def backward(self, grads: dict[spy.Tensor, Any]) -> Iterator[spy.CommandEncoder]:
        """Record the tape's backward seeded with ``grads`` ({output array: dL/doutput}) into a new encoder; the
        body runs first (``with session.backward(g) as enc:`` clears scratch gradients into ``enc``), then the
        backward is recorded and everything submitted on exit. Read the gradients, then :meth:`release`."""
        tape = self.tape
        tape.encoder = dev.create_command_encoder()
        try:
            yield tape.encoder
            tape.backward(grads=grads)
        except BaseException:
            self.release()
            raise
        dev.submit(tape.encoder)

    def release(self) -> None:
        """Give the tape back (its arrays are reused by the next session); call once its arrays are read."""
        if not self._released:
            self._released = True
            _free.append(self.tape)
