"""ScaledParameter: a physical parameter trained through its normalised value, so one learning rate fits all.

Physical parameters differ in scale by orders of magnitude (a quadratic drag of 0.05 1/m, a launch speed of
20 m/s). Adam's step is about ``lr`` in the units of the parameter it updates, whatever the gradient's scale, so
one ``lr`` on raw parameters either crawls on the large ones or overshoots the small ones. A ScaledParameter
keeps the trained value dimensionless::

    physical = clamp(scale * normalised, low, high)   (scale: a typical magnitude of the parameter, in its unit)

The optimiser steps ``normalised`` (:attr:`trainable`, a :class:`sopt.Parameter` named after the physical
quantity, what checkpoints save); the simulator reads :attr:`physical`, another Parameter that no optimiser
owns. :meth:`record`, called at the start of every objective (FittingProblem does it), records the map on the
tape: its forward writes ``physical`` from ``normalised`` (one dispatch), its backward adds ``scale * dL/dphysical``
into ``dL/dnormalised`` and clears ``dL/dphysical`` (one dispatch). Training the normalised values is exactly
training the physical ones with every optimiser hyperparameter made relative to ``scale`` (Adam: lr * scale and
epsilon / scale; SGD: lr * scale^2), so the learning rate, ``max_grad_norm`` and the schedule apply alike to all
parameters, and a config's ``learning_rate`` of 0.05 moves each parameter by up to about 5% of its scale per step.

``low`` / ``high`` (default unbounded) keep the physical value where the simulator is valid and informative (a
restitution below 0 stops every bounce, which has no gradient): the forward clamps, and the backward passes the
gradient taken at the clamped value straight through, so a parameter pushed past a bound is pulled back as soon
as the loss prefers the inside. :meth:`numpy` (the reported value) is clamped alike.
"""

from __future__ import annotations

import pathlib
from typing import Any

import numpy as np
import slangpy as spy

import sopt
from sopt.autodiff import tape as tp
from sopt.runtime.kernel import Function, launch
from sopt.utils.validation import check_float

_SOURCE = pathlib.Path(__file__).with_name("scaled_parameter.slang")
_TO_PHYSICAL = Function(_SOURCE, "scaled_to_physical")
_PULL_GRADIENT = Function(_SOURCE, "scaled_pull_gradient")


def _bound(value: float) -> float:
    """A bound as the kernel takes it: +-inf as float32's largest finite value (no inf through the uniforms)."""
    big = float(np.finfo(np.float32).max)
    return float(np.clip(value, -big, big))


class ScaledParameter:
    """A physical parameter ``physical = clamp(scale * normalised, low, high)`` (see the module docstring).

    Args:
        name: the parameter's name (the trainable Parameter's, so the checkpoint's key).
        initial: the initial physical value(s), a number or an array (float32 on the GPU).
        scale: its typical magnitude in ``unit`` (> 0); e.g. the middle of its documented range.
        unit: for messages and plots ("1/m", "m/s", "" for a pure number).
        low, high: bounds of the physical value (None: unbounded); ``initial`` must lie within them.
    """

    def __init__(self, name: str, initial: Any, scale: float, unit: str = "", *, low: float | None = None,
                 high: float | None = None) -> None:
        self.name, self.unit = str(name), str(unit)
        self.scale = check_float(scale, f"ScaledParameter {name!r} scale", low=0.0, low_inclusive=False)
        self.low = -np.inf if low is None else check_float(low, f"ScaledParameter {name!r} low")
        self.high = np.inf if high is None else check_float(high, f"ScaledParameter {name!r} high")
        if not self.low < self.high:
            raise ValueError(f"ScaledParameter {name!r}: low={self.low:g} must be below high={self.high:g}")
        values = np.atleast_1d(np.asarray(initial, np.float64))
        if not np.isfinite(values).all():
            raise ValueError(f"ScaledParameter {name!r}: initial value(s) must be finite, got {values}")
        if (values < self.low).any() or (values > self.high).any():
            raise ValueError(f"ScaledParameter {name!r}: initial value(s) {values} outside [{self.low:g}, "
                             f"{self.high:g}]")
        self.trainable = sopt.Parameter((values / self.scale).astype(np.float32), name=self.name)
        self.physical = sopt.Parameter(values.astype(np.float32), name=f"{self.name} (physical)")

    @property
    def shape(self) -> tuple[int, ...]:
        return self.trainable.shape

    def record(self) -> None:
        """Record ``physical = clamp(scale * normalised, low, high)`` and its backward on the current tape (without
        one: run now)."""
        n = int(np.prod(self.shape))
        grid = spy.grid((n,))
        z, p = self.trainable, self.physical

        def forward(enc: spy.CommandEncoder) -> None:
            launch(_TO_PHYSICAL, enc, i=grid, scale=self.scale, low=_bound(self.low), high=_bound(self.high),
                   normalised=tp.flat(z.values), physical=tp.flat(p.values))

        def backward(enc: spy.CommandEncoder, redirect: dict[int, spy.Tensor]) -> None:
            launch(_PULL_GRADIENT, enc, i=grid, scale=self.scale, physical_grad=tp.flat(p.grad),
                   normalised_grad=tp.flat(z.grad))

        # no writes declared: the backward must run whatever reached the outputs (the simulators add into
        # physical.grad, a Parameter's gradient, which the tape does not track as an array)
        tp.record(f"ScaledParameter({self.name})", forward, backward, params=[z])

    def numpy(self) -> np.ndarray:
        """The physical value(s) now, float64, from the trained normalised ones (waits for the GPU)."""
        values = (self.scale * np.asarray(self.trainable.numpy(), np.float32)).astype(np.float64)
        return np.clip(values, self.low, self.high)

    def __repr__(self) -> str:
        return (f"ScaledParameter({self.name!r}, shape={self.shape}, scale={self.scale:g} {self.unit}, "
                f"bounds=[{self.low:g}, {self.high:g}])")
