"""LossValue: a loss scalar that stays on the GPU until read, and the ring of result slots it lives in."""

from __future__ import annotations

import numpy as np
import slangpy as spy

from sopt.runtime import device as dev
from sopt.runtime.device import get_device

SLOT_WORDS = 4   # regression.slang: [0] loss (float bits), [1] non-finite targets, [2] groups finished


class ResultRing:
    """``slots`` result slots in one small device buffer, handed out in turn, one per loss evaluation.

    A slot is reused ``slots`` evaluations later, so a LossValue can be read until then without any
    allocation per evaluation. One more slot, after them, serves every evaluation recorded while
    :mod:`sopt.runtime.cuda_graph` captures: a replayed evaluation writes where it was captured, so a LossValue of a
    captured step reads the latest replay's value.
    """

    def __init__(self, slots: int = 1024) -> None:
        self.slots = slots
        self.buffer = get_device().create_buffer(
            size=4 * SLOT_WORDS * (slots + 1),
            usage=spy.BufferUsage.shader_resource | spy.BufferUsage.unordered_access,
            data=np.zeros(SLOT_WORDS * (slots + 1), np.uint32))
        self.issued = 0

    def next(self) -> tuple[int, int]:
        """(slot, serial) for a new evaluation."""
        serial = self.issued
        self.issued += 1
        if dev.capturing():   # captured (or the period it is checked against): the graph's slot
            return self.slots, serial
        return serial % self.slots, serial

    def read(self, slot: int, serial: int, what: str) -> tuple[float, int]:
        """(loss, non-finite target count) of the evaluation ``serial`` (waits for the GPU)."""
        if slot < self.slots and self.issued - serial > self.slots:   # the capture slot is never handed out again
            raise RuntimeError(f"{what}: this LossValue was overwritten: its slot was reused after {self.slots} further "
                               "evaluations of the same loss object; call item() sooner or keep the floats instead")
        words = self.buffer.to_numpy().view(np.uint32)[slot * SLOT_WORDS:(slot + 1) * SLOT_WORDS]
        return float(words[:1].view(np.float32)[0]), int(words[1])


class LossValue:
    """The value of one loss evaluation, held on the GPU; ``item()`` reads it (waiting for the GPU only then).

    When the evaluation was recorded into a command encoder, submit that encoder before calling ``item()``.
    """

    def __init__(self, ring: ResultRing, slot: int, serial: int, what: str) -> None:
        self._ring, self._slot, self._serial, self._what = ring, slot, serial, what

    def item(self) -> float:
        """The mean loss as a Python float.

        Raises ValueError when the target held NaN or Inf values (possible only for device-tensor targets:
        host arrays are checked before any GPU work).
        """
        value, bad = self._ring.read(self._slot, self._serial, self._what)
        if bad:
            raise ValueError(f"{self._what}: the target tensor held {bad} non-finite value(s) (NaN or Inf); the loss "
                             "and the gradient written into pred.grad are not meaningful")
        return value

    @property
    def name(self) -> str:
        return self._what

    def __float__(self) -> float:
        return self.item()

    def __repr__(self) -> str:
        """``LossValue(0.0123, MSELoss)``: the number, read from the GPU, so that printing a loss shows it.

        A value that can no longer be read (its slot reused, or a non-finite target) says why instead of raising,
        so a repr never fails inside a debugger or a log line.
        """
        try:
            return f"LossValue({self.item()!r}, {self._what})"
        except (RuntimeError, ValueError) as e:
            return f"LossValue({self._what}, evaluation {self._serial}: unreadable: {e})"

    def __format__(self, spec: str) -> str:
        """``f"{loss:.4f}"`` formats the float (the GPU is waited for); an empty spec gives the repr."""
        return format(self.item(), spec) if spec else repr(self)
