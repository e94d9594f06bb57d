"""HorizonLoss: the mean squared distance between simulated and observed particle positions over the observations
inside a horizon that grows during the fit (a curriculum), computed on the tape (fit_cloth.slang).

A cloth's springs ring at tens of hertz: over a long observation window, a stiffness 10% off puts the simulated
oscillations a whole period out of phase with the observed ones, and the loss has local minima there. Fitting the
first observations first (a few periods: the loss is smooth in the stiffness) and then letting the horizon grow
keeps the fit in the right basin; the whole window then pins the damping, whose effect builds up over time.
"""

from __future__ import annotations

import pathlib

import numpy as np
import slangpy as spy

from problems.fitting.horizon import horizon_fraction
from sopt.autodiff import tape as tp
from sopt.runtime.kernel import Function, launch

_SOURCE = pathlib.Path(__file__).with_name("fit_cloth.slang")
_HORIZON_SQUARED_DISTANCE = Function(_SOURCE, "horizon_squared_distance")
_HORIZON_SQUARED_DISTANCE_ADJOINT = Function(_SOURCE, "horizon_squared_distance_adjoint")


class HorizonLoss:
    """``__call__(predicted, horizon)``: (K, N) terms whose sum is the mean squared coordinate error (m^2) of the
    (K, N, 3) ``predicted`` positions against the ``observed`` ones over observations 0 .. horizon - 1 (the
    others contribute 0), recorded on the tape with a hand-written backward (one thread per (k, n): no atomics)."""

    def __init__(self, observed: spy.Tensor) -> None:
        shape = tuple(observed.shape)
        if len(shape) != 3 or shape[2] != 3:
            raise ValueError(f"HorizonLoss: observed must have shape (K, N, 3), got {shape}")
        self.observed, self.shape = observed, shape

    def __call__(self, predicted: spy.Tensor, horizon: int) -> spy.Tensor:
        k, n, _ = self.shape
        if tuple(predicted.shape) != self.shape:
            raise ValueError(f"HorizonLoss: predicted has shape {tuple(predicted.shape)}, expected {self.shape}")
        if not 1 <= horizon <= k:
            raise ValueError(f"HorizonLoss: horizon = {horizon} must be in [1, {k}] (observations)")
        terms = tp.new_tensor((k, n))
        threads = spy.grid((k * n,))
        inv_count = 1.0 / (horizon * n * 3)
        observed = tp.flat(self.observed)

        def forward(enc: spy.CommandEncoder) -> None:
            launch(_HORIZON_SQUARED_DISTANCE, enc, i=threads, horizon=horizon, n_particles=n, inv_count=inv_count,
                   predicted=tp.flat(predicted), observed=observed, terms=tp.flat(terms))

        def backward(enc: spy.CommandEncoder, redirect: dict[int, spy.Tensor]) -> None:
            launch(_HORIZON_SQUARED_DISTANCE_ADJOINT, enc, i=threads, horizon=horizon, n_particles=n,
                   inv_count=inv_count, predicted=tp.flat(predicted), observed=observed,
                   terms_grad=tp.flat(terms.grad), predicted_grad=tp.flat(predicted.grad))

        tp.record("HorizonLoss", forward, backward, reads=[predicted], writes=[terms], add_grads=[predicted])
        return terms

    def value(self, predicted: np.ndarray, horizon: int) -> float:
        """The loss of host positions (float64 numpy): the reference of the kernels."""
        observed = self.observed.to_numpy().reshape(self.shape).astype(np.float64)
        diff = np.asarray(predicted, np.float64)[:horizon] - observed[:horizon]
        return float(np.mean(diff ** 2))


def horizon(step: int, steps: int, observations: int, start: float, ramp: float) -> int:
    """Observations the loss of optimiser step ``step`` sees: ceil(fraction * observations) with fraction =
    ``start`` at step 0, growing linearly to 1 at ``ramp`` x ``steps`` (then all of them)."""
    fraction = horizon_fraction(step, steps, start, ramp)
    return max(1, min(observations, int(np.ceil(fraction * observations - 1e-9))))

