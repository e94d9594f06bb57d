"""One standard deviation per fitted parameter: the Gauss-Newton (Laplace) covariance at the fit.

Near the least-squares fit of observations ``y = f(theta) + noise`` (independent Gaussian noise of variance
sigma^2), the fitted parameters are approximately Gaussian with covariance ``sigma^2 (J^T J)^-1``, J the
Jacobian of the predictions f with respect to the parameters (that of the residuals up to sign). sigma is the
known noise level (``noise_std``), or, where that is 0 (or unknown), the residuals' estimate ``RSS / (n - p)``.

J comes from central differences through the problem's own simulator (no tape): p is small for the physics fits
(4 for fit_projectile, one per body for nbody_masses), so 2p + 1 forward runs, which a batched simulator does
in one, are far cheaper than a backward pass per residual. The step is a fraction of each parameter's scale:
1e-3 of it, where float32 rounding (about 1e-6 relative) still leaves the derivative within about 1e-3, while a
larger step (1e-2) moved fit_projectile's bounce across a time step often enough to cost 1% (tested against a
float64 reference in tests/problems/test_uncertainty.py). Next to a bound the step is cut to stay inside, so the
simulator is never asked for values it refuses.

A fit whose loss adds a regulariser R to the data term, ``(1/n) |r|^2 + R(theta)`` (heat_inverse's field), is
the maximum of the posterior with likelihood N(f(theta), sigma^2) and prior exp(-n R / (2 sigma^2)); its Laplace
covariance is ``sigma^2 (J^T J + (n/2) H_R)^-1``, H_R the regulariser's Hessian (:func:`laplace_std`).
"""

from __future__ import annotations

from typing import Callable

import numpy as np

RELATIVE_STEP = 1e-3   # central-difference step, as a fraction of each parameter's scale


def central_jacobian(predict: Callable[[np.ndarray], np.ndarray], x: np.ndarray, step: np.ndarray,
                     low: np.ndarray | None = None, high: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(prediction at ``x`` (n,), Jacobian (n, p)) of ``predict`` by central differences.

    ``predict`` maps a batch of parameter vectors (m, p) to their predictions (m, n) (one call, with the
    2p + 1 points x, x + h_i e_i, x - h_i e_i); ``step`` (p,) is each h_i > 0; ``low``/``high`` (p,) cut a step
    that would leave the allowed box (the difference is then taken over the shorter interval)."""
    x = np.asarray(x, np.float64).ravel()
    step = np.broadcast_to(np.asarray(step, np.float64), x.shape)
    if not (step > 0).all():
        raise ValueError(f"central_jacobian: every step must be > 0, got {step}")
    up = x + step if high is None else np.minimum(x + step, high)
    down = x - step if low is None else np.maximum(x - step, low)
    eye = np.eye(x.size, dtype=bool)
    points = np.concatenate([x[None], np.where(eye, up[None], x[None]), np.where(eye, down[None], x[None])])
    out = np.asarray(predict(points), np.float64)
    p = x.size
    if out.ndim != 2 or out.shape[0] != 2 * p + 1:
        raise ValueError(f"central_jacobian: predict returned shape {out.shape} for {2 * p + 1} points; "
                         "want (points, predictions)")
    jac = (out[1:p + 1] - out[p + 1:]) / (up - down)[:, None]
    return out[0], jac.T


def noise_variance(residuals: np.ndarray, noise_std: float, p: int) -> float:
    """sigma^2: ``noise_std^2``, or where that is 0 the residuals' RSS / (n - p) (NaN when n <= p)."""
    residuals = np.asarray(residuals, np.float64).ravel()
    if noise_std > 0.0:
        return float(noise_std) ** 2
    n = residuals.size
    return float(residuals @ residuals) / (n - p) if n > p else float("nan")


def gauss_newton_std(jac: np.ndarray, residuals: np.ndarray, noise_std: float) -> np.ndarray:
    """One standard deviation (p,) per parameter: sqrt(diag(sigma^2 (J^T J)^-1)) with sigma = ``noise_std``, or
    where that is 0 the residuals' sqrt(RSS / (n - p)) (NaN when n <= p). A parameter the observations do not
    determine (J^T J singular along it) gets inf."""
    jac = np.asarray(jac, np.float64)
    n, p = jac.shape
    variance = noise_variance(residuals, noise_std, p)
    # (J^T J)^-1 = V diag(1 / s^2) V^T from the SVD of J, without forming J^T J (which squares its condition)
    _, s, vt = np.linalg.svd(jac, full_matrices=False)
    if s.size < p or s.size == 0 or s.min() <= s.max() * 1e-12:
        return np.full(p, np.inf)
    return np.sqrt(variance * ((vt.T / s) ** 2).sum(axis=1))


def laplace_std(jac: np.ndarray, residuals: np.ndarray, noise_std: float, prior_precision: np.ndarray) -> np.ndarray:
    """One standard deviation (p,) per parameter of a regularised fit: sqrt(diag(sigma^2 (J^T J + P)^-1)), sigma
    as in :func:`gauss_newton_std`. ``prior_precision`` P (p, p) is the regulariser's Hessian in the data term's
    units: ``(n/2) H_R`` for a loss ``(1/n) |r|^2 + R`` (the module docstring). inf where J^T J + P is singular
    (neither the data nor the regulariser determine the parameters)."""
    jac = np.asarray(jac, np.float64)
    n, p = jac.shape
    prior = np.asarray(prior_precision, np.float64)
    if prior.shape != (p, p):
        raise ValueError(f"laplace_std: prior_precision has shape {prior.shape}, want ({p}, {p}) for {p} parameters")
    variance = noise_variance(residuals, noise_std, p)
    precision = jac.T @ jac + prior
    values, vectors = np.linalg.eigh(0.5 * (precision + precision.T))
    if values.size == 0 or values.min() <= abs(values).max() * 1e-12:
        return np.full(p, np.inf)
    return np.sqrt(variance * ((vectors ** 2) / values).sum(axis=1))
