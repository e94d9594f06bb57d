"""Parameter: float32 values and their gradient on the GPU, as a SlangPy differentiable tensor."""

from __future__ import annotations

import itertools
from typing import Any, Sequence

import numpy as np
import slangpy as spy

from sopt.runtime.device import create_command_encoder, get_device, submit, upload
from sopt.utils.validation import as_float32_array

_unnamed = itertools.count()


class Parameter:
    """A trainable float32 tensor with a gradient of the same shape.

    ``param.tensor`` is a SlangPy ``Tensor`` with gradients attached: pass it for an ``IDiffTensor<float, D>``
    argument of any Slang function and ``.bwds`` accumulates into ``param``'s gradient. Once the parameter is
    given to an optimiser its storage moves into the optimiser's flat arena; ``tensor`` then returns a view
    into the arena, and with a double-buffered optimiser (the default) the view alternates between the
    arena's two copies of the values from step to step: fetch ``tensor`` / ``values`` when calling a kernel
    rather than keeping an old reference. The view moves when ``optimizer.step(encoder)`` is recorded, so
    read or load the values only once that encoder has been submitted.

    Args:
        array: initial values, a non-empty array (at least 1-D) of real numbers, kept as float32. Must be
            finite and within float32's range (|x| <= 3.4028235e38); None, strings and complex values are
            rejected (ValueError).
        name: a label used in ``state_dict`` and error messages.
    """

    def __init__(self, array: Any, name: str | None = None) -> None:
        if name is not None and (not isinstance(name, str) or not name):
            raise ValueError(f"Parameter name must be a non-empty string or None, got {name!r}")
        label = f"Parameter {name} array" if name else "Parameter array"
        values = as_float32_array(array, label)
        if values.ndim == 0:
            # SlangPy tensors need a dimension (Tensor.zeros(()) fails), so a scalar keeping shape () could not
            # be viewed in an optimiser's arena; silently reshaping it would change what numpy() returns
            raise ValueError(f"{label} is 0-d (a scalar, shape ()); a Parameter needs at least one dimension: "
                             f"pass [{float(values)!r}] for shape (1,)")
        self.name = name if name is not None else f"param{next(_unnamed)}"
        self._shape = tuple(int(s) for s in values.shape)
        device = get_device()
        # one values tensor per side of the owning arena (one before an optimiser takes the parameter)
        self._sides = [spy.Tensor.from_numpy(device, values)]
        self._grads = spy.Tensor.zeros(device, self._shape, self._sides[0].dtype)
        self._diffs: list[spy.Tensor | None] = [None]
        self.owner: Any = None  # the ParameterArena holding this parameter, if any
        self._pending: Any = None   # gradient terms left pending (sopt.autodiff.grad_source.PendingGradient)
        # the gradient is known to hold +0 from this element on (size: nothing known): what a folding update need
        # not read or clear (sopt.autodiff.grad_source); any access that may write it forgets what is known
        self._grad_zero_from = 0
        self._size = int(np.prod(self._shape))   # fixed: read on every gradient access
        self._version = 0       # bumped by load(); an optimiser's steps count on its arena (see version)

    # -- shape -----------------------------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        return self._shape

    @property
    def size(self) -> int:
        """Number of elements."""
        return self._size

    def __repr__(self) -> str:
        return f"Parameter(name={self.name!r}, shape={self._shape})"

    # -- device views ------------------------------------------------------------------------------------
    def _side(self) -> int:
        return self.owner.side if self.owner is not None else 0

    @property
    def tensor(self) -> spy.Tensor:
        """Values with the gradient attached (``grad_in`` = ``grad_out``), for ``IDiffTensor`` arguments."""
        side = self._side()
        diff = self._diffs[side]
        if diff is None:
            diff = self._diffs[side] = self._sides[side].with_grads(grad_in=self._grads, grad_out=self._grads,
                                                                      zero=False)
        self._grad_zero_from = self._size   # a kernel may write the gradient through it
        return diff

    @property
    def values(self) -> spy.Tensor:
        """Values only, for ``ITensor`` / ``Tensor`` arguments."""
        return self._sides[self._side()]

    @property
    def grad(self) -> spy.Tensor:
        """The gradient tensor, same shape as the values. Gradient terms a module left pending (see
        sopt.autodiff.grad_source) are added into it first (a pass submitted now: the backward that left them must
        have been submitted; record into your own encoder with :meth:`flush_grad` instead)."""
        if self._pending is not None:
            self.flush_grad()
        self._grad_zero_from = self._size   # the caller may write it
        return self._grads

    @property
    def grad_for_adding(self) -> spy.Tensor:
        """The gradient tensor without flushing pending terms: for kernels that only add into it (a backward),
        which commutes with the pending terms. The caller says which elements it adds to with
        :meth:`note_grad_written`."""
        return self._grads

    @property
    def grad_zero_from(self) -> int:
        """An element index from which the gradient is known to hold +0 (``size`` when nothing is known): set to 0
        by the optimiser's zero-on-step and ``zero_grad``, raised by every access that may write it."""
        return self._grad_zero_from

    def note_grad_written(self, end: int) -> None:
        """A kernel recorded through ``grad_for_adding`` adds to elements below ``end`` (at most)."""
        self._grad_zero_from = max(self._grad_zero_from, min(int(end), self._size))

    def mark_grad_zero(self) -> None:
        """The gradient holds +0 everywhere (the optimiser's update cleared it, or zero_grad)."""
        self._grad_zero_from = 0

    # -- pending gradient terms (sopt.autodiff.grad_source) -------------------------------------------------
    @property
    def pending_grad(self) -> Any:
        """The gradient terms left pending (a sopt.autodiff.grad_source.PendingGradient), or None."""
        return self._pending

    @property
    def accepts_pending(self) -> bool:
        """Whether a module may leave gradient terms pending: the owning optimiser can fold them."""
        return self.owner is not None and self.owner.accepts_pending

    def leave_pending(self, source: Any) -> None:
        """Leave ``source`` pending, to be folded into the optimiser's update or flushed before the gradient is
        read. The caller flushed any earlier source first (``flush_grad`` into the same encoder)."""
        if self._pending is not None:
            raise RuntimeError(f"Parameter {self.name!r} already has pending gradient terms: flush_grad first")
        if not self.accepts_pending:
            raise RuntimeError(f"Parameter {self.name!r}: its optimiser cannot fold pending gradient terms")
        self._pending = source
        self.owner.pending.append(self)

    def take_pending(self) -> Any:
        """Remove and return the pending terms (None when there are none): the caller consumes them."""
        source = self._pending
        if source is not None:
            self._pending = None
            self.owner.pending.remove(self)
        return source

    def flush_grad(self, encoder: spy.CommandEncoder | None = None) -> None:
        """Add pending gradient terms into the gradient (and clear them): recorded into ``encoder``, or submitted
        now without one. Nothing when there are none."""
        source = self.take_pending()
        if source is None:
            return
        self._grad_zero_from = self._size   # the flush adds into every element
        own = encoder is None
        if own:
            encoder = create_command_encoder()
        source.flush(encoder)
        if own:
            submit(encoder)

    def _rebind(self, sides: list[spy.Tensor], grads: spy.Tensor, owner: Any) -> None:
        """Point this parameter at an arena's storage: its values on each side, its gradient."""
        self._sides, self._grads, self._diffs, self.owner = sides, grads, [None] * len(sides), owner
        self._grad_zero_from = self._size

    @property
    def version(self) -> int:
        """Grows whenever the values change (``load``, a step of the owning optimiser): sopt.Tape compares it
        between a call's forward and backward."""
        return self._version + (self.owner.version if self.owner is not None else 0)

    # -- host access -------------------------------------------------------------------------------------
    def numpy(self) -> np.ndarray:
        """A host copy of the values (waits for the GPU)."""
        return self.values.to_numpy().reshape(self._shape).copy()

    def grad_numpy(self) -> np.ndarray:
        """A host copy of the gradient (waits for the GPU)."""
        return self.grad.to_numpy().reshape(self._shape).copy()

    def load(self, array: Any) -> None:
        """Overwrite the values with ``array`` (same shape, finite, within float32's range)."""
        self.values.copy_from_numpy(as_float32_array(array, f"{self.name} values", self._shape))
        self._version += 1

    def set_grad(self, array: Any) -> None:
        """Overwrite the gradient with ``array`` (same shape, real numbers).

        NaN/Inf are allowed, and finite values beyond float32's range become +-Inf as float32 stores them:
        either way a step with ``skip_nonfinite`` skips them (see Optimizer).
        """
        self._overwrite_grad(as_float32_array(array, f"{self.name} grad", self._shape, allow_nonfinite=True))
        self._grad_zero_from = self._size

    def zero_grad(self) -> None:
        """Set the gradient to zero (an upload: Tensor.clear() on a view would clear its whole buffer); pending
        gradient terms are discarded."""
        self._overwrite_grad(np.zeros(self._shape, np.float32))
        self._grad_zero_from = 0

    def _overwrite_grad(self, array: np.ndarray) -> None:
        """Upload ``array`` over the gradient; pending terms are flushed (which clears them) before, in the same
        command buffer, so that they are discarded."""
        if self._pending is None:
            self._grads.copy_from_numpy(array)
            return
        encoder = create_command_encoder()
        self.flush_grad(encoder)
        upload(encoder, self._grads.storage, 4 * int(self._grads.offset),
               np.ascontiguousarray(array, np.float32).reshape(-1))
        submit(encoder)


def parameters_of(obj: Any) -> list[Parameter]:
    """Parameters from a Parameter, a sequence of them, a name->Parameter mapping, or an object with ``parameters()``."""
    if isinstance(obj, Parameter):
        return [obj]
    if hasattr(obj, "parameters") and callable(obj.parameters):
        return list(obj.parameters())
    if isinstance(obj, dict):
        return list(obj.values())
    if isinstance(obj, Sequence) or hasattr(obj, "__iter__"):
        items = list(obj)
        for i, item in enumerate(items):
            if not isinstance(item, Parameter):
                raise ValueError(f"params[{i}] must be a sopt.Parameter, got {type(item).__name__}")
        return items
    raise ValueError(f"expected Parameters, got {type(obj).__name__}")
