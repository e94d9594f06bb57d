"""Gradient sources: terms of a Parameter's gradient left pending, to be added by the optimiser's update.

A module may sum part of a Parameter's gradient in a buffer of its own, in a form that a last pass converts and
adds into the float32 gradient (HashGridEncoding's ``gradient_precision="float16"``: float16 pair sums scaled by
2^S). Recorded at the end of every backward, that pass reads and writes the whole gradient once more just before
the optimiser's update reads and clears it again. Instead the module may leave the terms *pending*
(:meth:`sopt.Parameter.leave_pending`): an optimiser that can fold them (``Optimizer.has_fold_kernels``) converts
them inside its update kernel (a separate kernel variant, see ``run_update_with`` in
slang_lib/optim/optimizer.slang), clearing them as zero-on-step clears the gradient; in every other case they are
*flushed* first, i.e. the module's own pass is recorded after all.

Everything that reads or overwrites a gradient other than a folding update sees the converted gradient:
``Parameter.grad`` / ``grad_numpy`` flush (``set_grad`` / ``zero_grad`` flush, then overwrite: pending terms are
discarded), and so do the optimiser's steps that cannot fold (clipping statistics, the non-finite scan, rules
without fold kernels, a second pending source) and its ``zero_grad``. Kernels that only *add* into a gradient
(a module's backward) commute with pending terms and need not flush. Only Parameters of an arena whose optimiser
folds (``ParameterArena.accepts_pending``) are left terms pending: without an optimiser, or with sopt.torch's link
(torch reads the arena's gradient itself), the module flushes at once.

A flush records its pass into an encoder when given one; without one it submits it at once, so the backward that
left the terms must have been submitted already (as reading the gradient needs anyway). Code that records work
reading a gradient into an encoder that also holds the backward calls ``param.flush_grad(encoder)`` first.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import slangpy as spy

__all__ = ["FixedSums", "HalfSums", "PendingGradient"]


class PendingGradient:
    """Terms of one Parameter's gradient not yet added into it (see the module docstring)."""

    kind: str = ""   # the fold kernels that can consume it ("" for none: always flushed)

    @property
    def entries(self) -> int:
        """Gradient entries the terms cover (a fold needs the whole gradient)."""
        raise NotImplementedError

    def flush(self, encoder: spy.CommandEncoder) -> None:
        """Record the pass adding the terms into the gradient (and clearing them) into ``encoder``."""
        raise NotImplementedError

    def fold_args(self, first_vec: int) -> dict[str, Any]:
        """The fold struct's members for a gradient starting at float4 vector ``first_vec`` of its arena."""
        raise NotImplementedError


@dataclass
class HalfSums(PendingGradient):
    """Float16 pair sums (slang_lib/optim/half_sums.slang's layout): ``sums`` holds two M slots (bytes 0 and 4),
    then one half2 word per pair of gradient entries; this backward call's M is at byte ``max_at``, S =
    ``shift_base - floor(log2 M)``; ``n_words`` words (the gradient has ``2 n_words`` entries). ``flush_pass``
    records the owner's own conversion pass (hashgrid_half_to_grad_kernel) into an encoder. Folded by
    ``HalfSumsFold`` (slang_lib/optim/optimizer.slang), which neither reads nor clears the float32 gradient from
    ``zero_from`` on (+0 there: at 3D 2^14 the update moved 134 MB less)."""

    sums: spy.Buffer
    max_at: int
    shift_base: int
    n_words: int
    flush_pass: Callable[[spy.CommandEncoder], None]
    zero_from: int = 0   # the float32 gradient holds +0 from this element on (Parameter.grad_zero_from, 4-aligned up)
    kind: str = "half_sums"

    def flush(self, encoder: spy.CommandEncoder) -> None:
        self.flush_pass(encoder)

    @property
    def entries(self) -> int:
        return 2 * self.n_words

    def fold_args(self, first_vec: int) -> dict[str, Any]:
        return {"words": self.sums, "first_vec": first_vec, "n_vec": -(-self.n_words // 2), "n_words": self.n_words,
                "max_at": self.max_at, "shift_base": self.shift_base, "zero_vec": -(-self.zero_from // 4)}


@dataclass
class FixedSums(PendingGradient):
    """Deterministic int64 fixed-point sums (HashGridEncoding's deterministic mode, slang_lib/nn/hashgrid.slang):
    ``sums`` holds the two M slots, then one int64 per gradient entry (``count`` of them), scaled by 2^S with S =
    ``shift_base - floor(log2 M)``. ``flush_pass`` records hashgrid_fixed_to_grad_kernel. Folded by
    ``FixedSumsFold`` (slang_lib/optim/optimizer.slang) with the same conversion, so the sums stay order-free and
    the step bit-identical to a flushed one, without the conversion's pass over the table (2^24 entries: 400 MB
    of traffic a step)."""

    sums: spy.Buffer
    max_at: int
    shift_base: int
    count: int
    flush_pass: Callable[[spy.CommandEncoder], None]
    zero_from: int = 0
    kind: str = "fixed_sums"

    def flush(self, encoder: spy.CommandEncoder) -> None:
        self.flush_pass(encoder)

    @property
    def entries(self) -> int:
        return self.count

    def fold_args(self, first_vec: int) -> dict[str, Any]:
        return {"words": self.sums, "first_vec": first_vec, "n_vec": -(-self.count // 4), "count": self.count,
                "max_at": self.max_at, "shift_base": self.shift_base, "zero_vec": -(-self.zero_from // 4)}
