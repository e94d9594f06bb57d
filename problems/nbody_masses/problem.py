"""nbody_masses: recover the masses of a small gravitating cluster from observed trajectories.

The system (natural units, G = 1): ``N`` bodies (2 to 5) start on a ring of radius ``max(1, N / 4)`` (each
radius and angle jittered by a fixed pattern, the same in every run) moving tangentially at the speed of a
circular orbit about a central mass of about ``0.35 N`` (so the ring is bound, rotates and deforms instead of
collapsing). Their initial positions and velocities are known; their masses are not. ``sopt.sim.NBody``
(softened gravity, kick-drift-kick leapfrog) integrates ``duration / dt`` steps and the positions are observed
at ``n_observations`` evenly spaced times (step 0 left out: it is known).

Loss: the mean squared distance between simulated and observed positions, ``mean_{k,i,d} (x_sim - x_obs)^2``
over observations k, bodies i and axes d (length^2). Every mass pulls on every other body within the window, so
each one is identifiable: the sensitivity matrix d(observations)/d(masses) has a condition number below 6 for
2 to 5 bodies with masses anywhere in [0.5, 2] over duration 2 (measured on the float64 reference).

Pictures: ``orbits.png`` (observed positions as dots, the fitted and the initial-guess trajectories as lines) and
``masses.png`` (true and fitted mass per body, with 2-sigma error bars from the Gauss-Newton covariance, and
each body's relative error).

Defaults: noisy observations (``noise_std`` 0.01 length units on each coordinate, about 1% of the ring's size)
and an initial guess of 1 for every mass, away from each true one; result.json's ``uncertainty`` holds each
body's 1-sigma mass uncertainty (problems.fitting.uncertainty, 2N + 1 rollouts).
"""

from __future__ import annotations

import pathlib
from typing import Annotated, Any

import numpy as np
import slangpy as spy
from pydantic import Field, ValidationInfo, field_validator, model_validator

import sopt
from problems.fitting import FitConfig, FittingProblem, StrictModel
from sopt.losses import MSELoss
from problems.limits import check_memory
from sopt.sim import NBody, rollout

MASS_RANGE = (0.5, 2.0)       # the documented range of each true mass (recovery within 1% tested there)
BODIES_RANGE = (2, 5)         # bodies in the cluster
LAYOUT_SEED = 7               # the ring's fixed jitter (part of the system's definition, not config.seed)
ORBIT_MASS_PER_BODY = 0.35    # the circular speed is that of a mass 0.35 N at the centre (a bound, rotating ring)

FIT_BOUNDS = (0.05, 10.0)     # the fitted masses are kept within these (a mass <= 0 would make gravity repel)

TrueMass = Annotated[float, Field(ge=MASS_RANGE[0], le=MASS_RANGE[1])]
InitMass = Annotated[float, Field(ge=FIT_BOUNDS[0], le=FIT_BOUNDS[1])]


class TrueMasses(StrictModel):
    """The true masses (make the data)."""

    masses: list[TrueMass] = Field([0.8, 1.3, 0.6, 1.7], min_length=BODIES_RANGE[0], max_length=BODIES_RANGE[1],
                                description=f"mass of each body, each in [{MASS_RANGE[0]}, {MASS_RANGE[1]}] "
                                            f"(mass units, G = 1); {BODIES_RANGE[0]} to {BODIES_RANGE[1]} bodies")


class InitMasses(StrictModel):
    """The initial guess of the masses."""

    masses: list[InitMass] = Field([1.0, 1.0, 1.0, 1.0], min_length=BODIES_RANGE[0], max_length=BODIES_RANGE[1],
                                description=f"initial guess of each body's mass, each in [{FIT_BOUNDS[0]}, "
                                            f"{FIT_BOUNDS[1]}] (mass units); "
                                            "as many as true.masses")


class NBodyMassesConfig(FitConfig, problem="nbody_masses"):
    """Config of nbody_masses (every key checked; units: natural, G = 1)."""


    true: TrueMasses = Field(default_factory=TrueMasses, description="the true masses (make the data)")
    init: InitMasses = Field(default_factory=InitMasses, description="the initial guess")
    duration: float = Field(2.0, gt=0.0, le=4.0, description="observed time window (time units; recovery tested "
                                                             "for 1 to 2)")
    dt: float = Field(0.02, gt=0.0, le=0.02, description="leapfrog time step (time units)")
    n_observations: int = Field(25, ge=1, le=10_000, description="observation times, evenly spaced over the "
                                                                 "window (the last at its end)")
    softening: float = Field(0.1, ge=0.02, le=0.5, description="Plummer softening length (length units)")
    steps: int = Field(200, ge=1, le=10_000_000, description="optimiser steps")
    # the ring is 1 to 2 length units across: noise beyond 1 would bury the orbits
    noise_std: float = Field(0.01, ge=0.0, le=1.0, description="std of the Gaussian noise on each observed "
                                                               "coordinate (length units; 0: noise-free)")

    @model_validator(mode="after")
    def _fits(self) -> "NBodyMassesConfig":
        check_memory(self, "dt", self.memory_estimate(),
                     f"{len(self.true.masses)} bodies x {round(self.duration / self.dt)} steps x 80 bytes")
        return self

    def memory_estimate(self) -> int:
        """Bytes this config needs, per body (N): the rollout's stored states (x and v, 4 floats, at each of the
        S + 1 steps) and their gradients, and orbits.png's trajectories of every step (the fitted and the initial
        guess's: 2 floats on the device and 2 float64 on the host, each twice), per observation 8 floats:
        ``N (80 (S + 1) + 32 O)`` plus 1 MiB."""
        n, s = len(self.true.masses), round(self.duration / self.dt)
        return n * (80 * (s + 1) + 32 * self.n_observations) + 2 ** 20

    # cross-key checks as field validators (each error then names its key); fields validate in declaration
    # order, so info.data holds the keys declared before
    @field_validator("init")
    @classmethod
    def _one_guess_per_body(cls, init: InitMasses, info: ValidationInfo) -> InitMasses:
        true = info.data.get("true")
        if true is not None and len(init.masses) != len(true.masses):
            raise ValueError(f"init.masses has {len(init.masses)} values and true.masses {len(true.masses)}: give "
                             "one per body")
        return init

    @field_validator("dt")
    @classmethod
    def _whole_steps(cls, dt: float, info: ValidationInfo) -> float:
        duration = info.data.get("duration")
        if duration is not None and abs(round(duration / dt) * dt - duration) > 1e-6 * duration:
            raise ValueError(f"duration {duration:g} is not a whole number of steps dt = {dt:g}")
        return dt

    @field_validator("n_observations")
    @classmethod
    def _fewer_than_steps(cls, n: int, info: ValidationInfo) -> int:
        duration, dt = info.data.get("duration"), info.data.get("dt")
        if duration is not None and dt is not None and n > round(duration / dt):
            raise ValueError(f"n_observations {n} exceeds the {round(duration / dt)} steps of the window")
        return n


def ring_layout(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Initial positions and velocities (n, 2), float32, of the default cluster (see the module docstring)."""
    rng = np.random.default_rng(LAYOUT_SEED)
    radius = max(1.0, n / 4.0)
    r = radius * (1.0 + 0.25 * rng.uniform(-1.0, 1.0, n))
    angle = 2.0 * np.pi * np.arange(n) / n + (1.2 / max(n, 4)) * rng.uniform(-1.0, 1.0, n)
    x0 = np.stack([r * np.cos(angle), r * np.sin(angle)], axis=1)
    speed = np.sqrt(ORBIT_MASS_PER_BODY * n / r)
    v0 = np.stack([-np.sin(angle), np.cos(angle)], axis=1) * speed[:, None]
    return x0.astype(np.float32), v0.astype(np.float32)


class NBodyMasses(FittingProblem):
    """Fit the masses of an N-body cluster (see the module docstring)."""

    schema = NBodyMassesConfig
    description = "the masses of an orbiting cluster from its trajectories"

    def __init__(self, config: NBodyMassesConfig) -> None:
        super().__init__(config)
        c = config
        self.n_bodies = len(c.true.masses)
        self.steps = round(c.duration / c.dt)
        # observation k at step (k + 1) * steps / n_observations, rounded: evenly spaced, the last at the end
        self.at = [round((k + 1) * self.steps / c.n_observations) for k in range(c.n_observations)]
        self.x0, self.v0 = ring_layout(self.n_bodies)
        self.clean = self.simulate(np.asarray(c.true.masses))                    # (K, N, 2)
        self.observed = self.add_noise(self.clean)
        self.target = spy.Tensor.from_numpy(sopt.get_device(), self.observed)
        # kept within FIT_BOUNDS (init.masses' bounds); the true ones lie well inside
        self.masses = self.add_parameter("masses", c.init.masses, scale=1.0, unit="mass units", low=FIT_BOUNDS[0],
                                         high=FIT_BOUNDS[1])
        self.sim = NBody(self.x0, self.v0, self.masses.physical, dt=c.dt, G=1.0, softening=c.softening)
        self.loss_fn = MSELoss()
        self.initial_guess = np.asarray(c.init.masses, np.float64)

    # -- simulation --------------------------------------------------------------------------------------------
    def _rollout(self, sim: NBody, at: list[int]) -> spy.Tensor:
        return rollout(sim, sim.initial_state(), self.steps, observe="x", at=at).trajectory

    def simulate(self, masses: np.ndarray, at: list[int] | None = None) -> np.ndarray:
        """Positions (len(at), N, 2) at steps ``at`` (default the observation steps) for constant ``masses``."""
        at = self.at if at is None else at
        sim = NBody(self.x0, self.v0, np.asarray(masses, np.float32), dt=self.config.dt, G=1.0,
                    softening=self.config.softening)
        tape = sopt.Tape()
        with tape:
            traj = self._rollout(sim, at)
        tape.submit()
        return traj.to_numpy().reshape(len(at), self.n_bodies, 2).astype(np.float64)

    def objective(self, tape: sopt.Tape, step: int) -> Any:
        return self.loss_fn(self._rollout(self.sim, self.at), self.target)

    # -- reporting ---------------------------------------------------------------------------------------------
    def predict(self, points: list[dict[str, Any]]) -> np.ndarray:
        """The observed positions at each point's masses: (len(points), n_observations * N * 2), one rollout each
        (for the Gauss-Newton uncertainty of FittingProblem; 2N + 1 rollouts)."""
        return np.stack([self.simulate(np.atleast_1d(point["masses"])).ravel() for point in points])

    def mass_std(self, masses: np.ndarray) -> np.ndarray:
        """Per-body 1-sigma uncertainty (N,) at ``masses``: FittingProblem.uncertainty there (the Gauss-Newton
        covariance, ``noise_std^2 (J^T J)^-1``, or with noise-free data the residuals' variance)."""
        return np.atleast_1d(self.uncertainty({"masses": np.asarray(masses, np.float64)})["masses"])

    def fitted_std(self) -> np.ndarray:
        """Per-body 1-sigma uncertainty (N,) of the fitted masses: result.json's (computed once at the end of the
        run), or computed now before that."""
        return np.atleast_1d((self.uncertainty() if self.std is None else self.std)["masses"])

    def summary(self) -> list[str]:
        true = np.asarray(self.config.true.masses)
        fitted = self.masses.numpy()
        std = self.fitted_std()
        lines = ["per body:  true      fitted    rel. error   1-sigma (mass units)"]
        for i in range(self.n_bodies):
            err = abs(fitted[i] - true[i]) / true[i]
            lines.append(f"  body {i}: {true[i]:<9.4g} {fitted[i]:<9.5g} {err:.2e}     {std[i]:.2e}")
        return lines

    def plot(self, out_dir: pathlib.Path, history: list[dict[str, Any]]) -> list[pathlib.Path]:
        from problems.nbody_masses.plot import plot_masses, plot_orbits
        true = np.asarray(self.config.true.masses, np.float64)
        fitted = self.masses.numpy()
        fine = list(range(1, self.steps + 1))
        paths = [out_dir / "orbits.png", out_dir / "masses.png"]
        start = self.x0[None].astype(np.float64)
        plot_orbits(paths[0], self.observed, np.concatenate([start, self.simulate(fitted, fine)]),
                    np.concatenate([start, self.simulate(self.initial_guess, fine)]))
        plot_masses(paths[1], true, fitted, self.fitted_std())
        return paths
