"""Regression losses with torch's semantics, reduction 'mean' over every element (kernels:
slang_lib/losses/regression.slang).

``loss_fn(pred, target, encoder=None) -> LossValue``: one dispatch computes the mean loss on the GPU and
WRITES dLoss/dpred into ``pred.grad`` (overwriting it: it seeds the backward pass). On a ``sopt.Tape`` the
call is recorded like any other and its value is a seed of ``tape.backward``; a second loss on the same
prediction adds its gradient instead (the gradient of the sum). Nothing is read back;
``LossValue.item()`` waits for the GPU. The value's reduction order depends only on the element count
(deterministic); see regression.slang.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar, Literal

import numpy as np
import slangpy as spy
from pydantic import Field

from sopt.runtime import device as dev
from sopt.runtime.kernel import Kernel
from sopt.config.registry import ComponentConfig, register
from sopt.losses.value import LossValue, ResultRing
from sopt.autodiff.tape import current_tape
from sopt.utils.validation import check_float

THREADS = 256        # regression.slang's THREADS
MAX_GROUPS = 1024    # thread groups of one evaluation (each then loops over its share)
MAX_ELEMENTS = 2**31 - 1


class Loss:
    """Base of the element-wise regression losses: ``mean_i l(pred_i, target_i)`` over all elements.

    ``pred``: a float32 SlangPy Tensor with a gradient buffer (a module's output). ``target``: a float32
    Tensor of the same shape, or a float32 numpy array of that shape (checked for NaN/Inf on the host,
    then uploaded into a new tensor; pass device tensors in training loops to avoid that allocation and
    copy). Wrong shapes, dtypes, missing gradient buffers and non-finite host targets raise ValueError
    before any GPU work. Device targets are not inspected on the host: the kernel counts their
    non-finite values and ``LossValue.item()`` raises ValueError if there were any.
    """

    entry_point: ClassVar[str]

    def __init__(self) -> None:
        self._last_checked: tuple[spy.Tensor, spy.Tensor] | None = None
        self._groups = 0   # thread groups of the pair last checked
        self._ring = ResultRing()
        partials = dev.get_device().create_buffer(
            size=4 * 2 * MAX_GROUPS, usage=spy.BufferUsage.shader_resource | spy.BufferUsage.unordered_access,
            data=np.zeros(2 * MAX_GROUPS, np.uint32))
        # arguments stay bound between evaluations; only those that change are rewritten
        self._kernel = Kernel("losses/regression", self.entry_point).bind(partials=partials)

    @property
    def param(self) -> float:
        """The loss's float parameter in the kernel (Huber delta, RelativeL2 eps)."""
        return 0.0

    @classmethod
    def from_config(cls, config: Any) -> "Loss":
        """The loss of ``config`` (its registered config model; losses with an option override this)."""
        return cls()

    def to_config(self) -> Any:
        return type(self).config_class()   # type: ignore[attr-defined]

    @property
    def name(self) -> str:
        return type(self).__name__

    def __call__(self, pred: spy.Tensor, target: Any, encoder: spy.CommandEncoder | None = None) -> LossValue:
        # a training loop passes the same (pooled) tensors step after step: check a pair once, and write its
        # kernel arguments (sizes, offsets, buffers) only when the pair changes
        checked = self._last_checked
        same_pair = checked is not None and pred is checked[0] and target is checked[1]
        if not same_pair:
            pred, target = self._check(pred, target)
            self._last_checked = (pred, target) if isinstance(target, spy.Tensor) else None
        tape = current_tape()
        if tape is not None and encoder is not None and encoder is not tape.encoder:
            raise ValueError(f"{self.name}: called with an encoder inside 'with tape:'; the tape records into its own")
        accumulate = tape is not None and tape.seeded_before(pred)
        slot, serial = self._ring.next()
        if same_pair:   # the kernel was last bound to this pair (a new pair always goes the long way)
            groups = self._groups
            bound = self._kernel.set_members("args", slot=slot, param=self.param, accumulate=int(accumulate))
        else:
            count = math.prod(pred.shape.as_tuple())
            groups = self._groups = min(MAX_GROUPS, -(-count // THREADS))
            args = {"count": count, "pred_offset": pred.offset, "target_offset": target.offset,
                    "grad_offset": pred.grad.offset, "n_groups": groups, "slot": slot, "inv_count": 1.0 / count,
                    "param": self.param, "accumulate": int(accumulate)}
            bound = self._kernel.set(args=args, pred=pred.storage, target=target.storage,
                                     pred_grad=pred.grad.storage, results=self._ring.buffer)
        value = LossValue(self._ring, slot, serial, self.name)
        if tape is None:
            bound.dispatch(groups * THREADS, encoder)
            return value
        # on a tape: the gradient is written now (fused with the value), so the loss is a seed of backward()
        tape.record(self.name, lambda enc: bound.dispatch(groups * THREADS, enc), None, reads=[pred, target])
        tape.seed_loss(value, pred)
        return value

    def value_and_grad(self, pred: Any, target: Any) -> tuple[float, np.ndarray]:
        """Host helper: the loss and dLoss/dpred for float32 numpy arrays (uploads, runs, waits, reads back)."""
        p = np.asarray(pred)
        if p.dtype != np.float32:
            raise ValueError(f"{self.name}: expected a float32 prediction array, got dtype {p.dtype}")
        t = spy.Tensor.from_numpy(dev.get_device(), np.ascontiguousarray(p)).with_grads(zero=True)
        value = self(t, target).item()
        return value, t.grad.to_numpy().reshape(p.shape).copy()

    def _check(self, pred: Any, target: Any) -> tuple[spy.Tensor, spy.Tensor]:
        who = self.name
        if not isinstance(pred, spy.Tensor):
            raise ValueError(f"{who}: pred must be a slangpy.Tensor (a module's output), got {type(pred).__name__}")
        shape = tuple(pred.shape)
        if str(pred.dtype.full_name) != "float":
            raise ValueError(f"{who}: pred must be a float32 tensor, got dtype '{pred.dtype.full_name}'")
        if pred.grad_out is None:
            raise ValueError(f"{who}: pred carries no gradient buffer to write dLoss/dpred into; pass a module's output "
                             "or a tensor made with .with_grads()")
        if not pred.is_contiguous() or not pred.grad.is_contiguous():
            raise ValueError(f"{who}: pred (and its gradient) must be contiguous, got strides {tuple(pred.strides)}")
        count = int(np.prod(shape))
        if count < 1 or count > MAX_ELEMENTS:
            raise ValueError(f"{who}: pred must have between 1 and 2^31 - 1 elements, got shape {shape}")
        if isinstance(target, np.ndarray):
            if target.dtype != np.float32:
                raise ValueError(f"{who}: expected a float32 target of shape {shape}, got a numpy array of dtype "
                                 f"{target.dtype}; convert it with target.astype(np.float32)")
            if tuple(target.shape) != shape:
                raise ValueError(f"{who}: target has shape {tuple(target.shape)}, expected {shape} (the shape of pred)")
            finite = np.isfinite(target)
            if not finite.all():
                first = tuple(int(i) for i in np.argwhere(~finite)[0])
                raise ValueError(f"{who}: target contains {int(target.size - finite.sum())} non-finite value(s) (NaN "
                                 f"or Inf), the first at index {first}; only finite targets are allowed")
            return pred, spy.Tensor.from_numpy(dev.get_device(), np.ascontiguousarray(target))
        if isinstance(target, spy.Tensor):
            if str(target.dtype.full_name) != "float":
                raise ValueError(f"{who}: target must be a float32 tensor, got dtype '{target.dtype.full_name}'")
            if tuple(target.shape) != shape:
                raise ValueError(f"{who}: target has shape {tuple(target.shape)}, expected {shape} (the shape of pred)")
            if not target.is_contiguous():
                raise ValueError(f"{who}: target must be contiguous, got strides {tuple(target.strides)}")
            return pred, target
        raise ValueError(f"{who}: target must be a slangpy.Tensor or a float32 numpy array, got {type(target).__name__}")

    def __repr__(self) -> str:
        return f"{self.name}()"


class L2Config(ComponentConfig):
    """Mean squared error, mean((pred - target)^2)."""

    otype: Literal["L2"] = "L2"


class L1Config(ComponentConfig):
    """Mean absolute error, mean(|pred - target|)."""

    otype: Literal["L1"] = "L1"


class HuberConfig(ComponentConfig):
    """Huber loss: quadratic below delta, linear above (torch.nn.HuberLoss)."""

    otype: Literal["Huber"] = "Huber"
    delta: float = Field(1.0, gt=0.0, le=1e30, description="where the loss turns from quadratic to linear "
                                                           "(prediction units)")


class RelativeL2Config(ComponentConfig):
    """Instant-NGP's relative L2, mean((pred - target)^2 / (pred^2 + epsilon))."""

    otype: Literal["RelativeL2"] = "RelativeL2"
    epsilon: float = Field(1e-2, gt=0.0, le=1e30, description="added to pred^2 in the denominator (prediction "
                                                              "units^2)")


@register("loss", "L2", L2Config)
class MSELoss(Loss):
    """mean((pred - target)^2); dLoss/dpred = 2 (pred - target) / count."""

    entry_point = "mse_loss"


@register("loss", "L1", L1Config)
class L1Loss(Loss):
    """mean(|pred - target|); dLoss/dpred = sign(pred - target) / count (0 where equal, as torch)."""

    entry_point = "l1_loss"


@register("loss", "Huber", HuberConfig)
class HuberLoss(Loss):
    """torch.nn.HuberLoss: mean of 0.5 d^2 where |d| < delta, delta (|d| - delta / 2) elsewhere (d = pred - target);
    dLoss/dpred = clamp(d, -delta, delta) / count. delta > 0."""

    entry_point = "huber_loss"

    def __init__(self, delta: float = 1.0) -> None:
        self.delta = check_float(delta, "HuberLoss delta", low=0.0, low_inclusive=False)
        super().__init__()

    @classmethod
    def from_config(cls, config: HuberConfig) -> "HuberLoss":
        return cls(delta=config.delta)

    def to_config(self) -> HuberConfig:
        return HuberConfig(delta=self.delta)

    @property
    def param(self) -> float:
        return self.delta

    def __repr__(self) -> str:
        return f"HuberLoss(delta={self.delta})"


@register("loss", "RelativeL2", RelativeL2Config)
class RelativeL2Loss(Loss):
    """Instant-NGP's relative L2 (as in NeRF-HDR / tiny-cuda-nn's RelativeL2):
    mean((pred - target)^2 / (pred^2 + eps)).

    The denominator is treated as a constant for the gradient (a stop-gradient, as tcnn):
    dLoss/dpred = 2 (pred - target) / (pred^2 + eps) / count, not the full derivative of the quotient.
    eps > 0.
    """

    entry_point = "relative_l2_loss"

    def __init__(self, eps: float = 1e-2) -> None:
        self.eps = check_float(eps, "RelativeL2Loss eps", low=0.0, low_inclusive=False)
        super().__init__()

    @classmethod
    def from_config(cls, config: RelativeL2Config) -> "RelativeL2Loss":
        return cls(eps=config.epsilon)

    def to_config(self) -> RelativeL2Config:
        return RelativeL2Config(epsilon=self.eps)

    @property
    def param(self) -> float:
        return self.eps

    def __repr__(self) -> str:
        return f"RelativeL2Loss(eps={self.eps})"
