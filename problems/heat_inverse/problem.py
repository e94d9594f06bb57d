"""heat_inverse: recover a plate's conductivity field (an inclusion of another material) from sensor temperatures.

The plate is a ``grid`` x ``grid`` field of square cells of side ``cell_size`` m simulated by sopt.sim.Diffusion2D
(du/dt = div(kappa grad u), explicit steps of ``dt`` s, edges held at 0 K: Dirichlet). Its conductivity kappa
(m^2/s; Diffusion2D's kappa is the thermal diffusivity) is ``background`` everywhere except in one inclusion, a
disc or a rectangle of conductivity ``inclusion.conductivity``; a cell cut by the inclusion's edge takes the
area-weighted mean of the two (its cell average, computed on an 8 x 8 sub-grid per cell).

**Excitation.** At t = 0 the plate holds a checkerboard of ``checker_blocks`` x ``checker_blocks`` squares at
+-``amplitude`` K (hot and cold squares side by side; 2 x 2 cells each at the defaults): heat starts flowing across
every square's edge at once, so the flux kappa grad u, and with it the temperatures' sensitivity to kappa, reaches
the whole plate within a square's width of diffusion, and how fast the squares exchange heat depends on the local
kappa. ``duration`` lets heat diffuse about a square's width (kappa t / cell_size^2 = 6 for kappa = 1e-4 m^2/s at
the defaults): long enough for the flux to cross every cell, short enough that the pattern has not faded even
where kappa = 2e-4 m^2/s.

**Observations.** A ``sensor_grid`` = [rows, cols] grid of point sensors (one cell each, at the centres of a
rows x cols tiling of the plate) records the temperature at ``observations`` times evenly spread over
``duration`` (the last one at ``duration``), plus Gaussian noise of ``noise_std`` K (default 0.01 K, 1% of the
checkerboard's amplitude; ``noise_std=0`` for noise-free data). The data loss is the mean squared difference of
the simulated and observed readings (K^2). The default initial guess, a uniform 1.5e-4 m^2/s, is away from the
truth in every cell (background 1e-4, inclusion 2e-4).

**Regularisation.** The data leave parts of the field undetermined: where grad u vanishes a cell's kappa does not
affect the temperatures, and since a face's conductance is the mean of its two cells' kappa, a perturbation that
alternates in sign from cell to cell (a checkerboard, or a patch of one) leaves every interior face, and so the
data, unchanged. The loss therefore adds ``regularization`` = {otype, weight}: gradient-smoothness Tikhonov or
smoothed total variation of kappa / scale (regularization.py; computed on the tape by heat_inverse.slang with a
hand-written adjoint), both of which charge such patterns heavily. TV keeps the inclusion's edge sharp and is the
default. Its weight trades a bias (it lowers the inclusion's contrast a little) against those undetermined
modes; it scales with the square of ``amplitude`` (as the data term does).

**Parameter** (result.json key ``conductivity``, the (grid, grid) field; error ||fitted - true|| / ||true||):
trained through problems.fitting.ScaledParameter with scale 1e-4 m^2/s, starting from the uniform
``init.conductivity``. result.json's ``uncertainty`` is each cell's standard deviation (a (grid, grid) field,
m^2/s) from the Laplace posterior at the fit, which includes the regulariser's Hessian (the regulariser is the
prior; problems.fitting.uncertainty.laplace_std)::

    Cov = sigma^2 (J^T J + (n/2) H_R)^-1

J the exact Jacobian of the n readings in the field (sensitivity.py, float64 forward sensitivities), H_R the
Hessian of the regulariser R (regularization.py), sigma = ``noise_std`` (RSS / (n - p) where 0): the loss
(1/n) |r|^2 + R is, times n / (2 sigma^2), the negative log posterior with prior exp(-n R / (2 sigma^2)). The
posterior is a Bayesian one, the regulariser its prior knowledge: its standard deviations are wider than the
fit's scatter over noise seeds (a piecewise-constant truth, which TV favours, keeps that small), so the truth
lies within 2 sigma in nearly every cell (measured coverage in the README). Computed within
sensitivity.affordable's limits (up to 32 x 32 cells, C^2 sensitivities per step, and bounds on C^2 x steps and on
the Jacobian's size); a larger plate or a longer rollout reports none. Documented ranges of ``true``: background and inclusion conductivity in [5e-5, 2e-4]
m^2/s (metals; up to 4x contrast either way), a disc of radius 0.15 to 0.3 plate sides or a rectangle of sides
0.25 to 0.6, lying inside the plate at least 0.1 side from its edges.

**Stability.** The explicit step needs dt <= cell_size^2 / (4 kappa_max) (Diffusion2D refuses a larger dt). The
fitted field is kept within [1e-7, cell_size^2 / (4 dt)] m^2/s (problems.fitting.ScaledParameter's clamp), so
no optimiser step can make the rollout unstable, and the config must leave the fit room above the documented
range: dt <= cell_size^2 / (4 * 1.5 * max(2e-4, init)) (a config error otherwise). The defaults (dt 0.08 s,
1 cm cells) clamp at 3.1e-4 m^2/s.
"""

from __future__ import annotations

import pathlib
from typing import Annotated, Any, Literal, Union

import numpy as np
import slangpy as spy
from pydantic import Field, model_validator

import sopt
from problems.fitting import FitConfig, FittingProblem, StrictModel
from problems.fitting.config import AdamConfig, WarmupCosineConfig, observation_steps
from problems.fitting.problem import Value
from problems.heat_inverse.regularization import FieldRegularizer
from problems.heat_inverse.sensitivity import affordable, reading_jacobian
from problems.heat_inverse.sensors import Sensors, sensor_cells
from problems.fitting.uncertainty import laplace_std
from problems.limits import check_memory, rollout_states
from sopt.losses import MSELoss
from sopt.sim import Diffusion2D, rollout
from sopt.autodiff.tape import Tape

CONDUCTIVITY_RANGE = (5e-5, 2e-4)   # m^2/s, background and inclusion
SCALE = 1e-4                        # m^2/s, the ScaledParameter normalisation
STABILITY_MARGIN = 1.5              # dt must be stable up to this times the largest true / initial kappa
EDGE_MARGIN = 0.1                   # an inclusion keeps this far (plate sides) from the plate's edges
SUBSAMPLES = 8                      # per cell side, for the cell averages of the inclusion
FIT_LOW = 1e-7                      # m^2/s, the fitted conductivity's lower bound (it must stay positive)


def _conductivity(default: float) -> Any:
    return Field(default, ge=CONDUCTIVITY_RANGE[0], le=CONDUCTIVITY_RANGE[1], description="conductivity (m^2/s)")


def _pair(default: tuple[float, float], low: float, high: float, what: str) -> Any:
    return Field(list(default), min_length=2, max_length=2, description=f"{what}, each in [{low}, {high}]")


Centre = Annotated[float, Field(ge=0.0, le=1.0)]        # plate sides from the lower left corner
Side = Annotated[float, Field(ge=0.25, le=0.6)]         # a rectangle's width or height, plate sides


class Disc(StrictModel):
    """A disc-shaped inclusion."""

    otype: Literal["Disc"] = "Disc"
    conductivity: float = _conductivity(2e-4)
    center: list[Centre] = _pair((0.55, 0.45), 0.0, 1.0, "centre (x, y) in plate sides from the lower left corner")
    radius: float = Field(0.2, ge=0.15, le=0.3, description="radius (plate sides)")

    @model_validator(mode="after")
    def _inside(self) -> "Disc":
        for axis, c in zip("xy", self.center):
            if c - self.radius < EDGE_MARGIN or c + self.radius > 1.0 - EDGE_MARGIN:
                raise ValueError(f"the disc spans {axis} in [{c - self.radius:g}, {c + self.radius:g}]; it must lie "
                                 f"within [{EDGE_MARGIN}, {1 - EDGE_MARGIN}] (plate sides)")
        return self

    def mask(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Whether each point (x, y) (plate sides) is inside."""
        return (x - self.center[0]) ** 2 + (y - self.center[1]) ** 2 <= self.radius ** 2


class Rectangle(StrictModel):
    """An axis-aligned rectangular inclusion."""

    otype: Literal["Rectangle"] = "Rectangle"
    conductivity: float = _conductivity(2e-4)
    center: list[Centre] = _pair((0.5, 0.5), 0.0, 1.0, "centre (x, y) in plate sides from the lower left corner")
    size: list[Side] = _pair((0.4, 0.3), 0.25, 0.6, "(width, height) in plate sides")

    @model_validator(mode="after")
    def _inside(self) -> "Rectangle":
        for axis, c, s in zip("xy", self.center, self.size):
            if not 0.25 <= s <= 0.6:
                raise ValueError(f"size along {axis} = {s:g} must be in [0.25, 0.6] (plate sides)")
            if c - s / 2 < EDGE_MARGIN or c + s / 2 > 1.0 - EDGE_MARGIN:
                raise ValueError(f"the rectangle spans {axis} in [{c - s / 2:g}, {c + s / 2:g}]; it must lie within "
                                 f"[{EDGE_MARGIN}, {1 - EDGE_MARGIN}] (plate sides)")
        return self

    def mask(self, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        return (np.abs(x - self.center[0]) <= self.size[0] / 2) & (np.abs(y - self.center[1]) <= self.size[1] / 2)


Inclusion = Annotated[Union[Disc, Rectangle], Field(discriminator="otype")]


class TrueField(StrictModel):
    """The true conductivity field: a background with one inclusion (within the documented ranges)."""

    background: float = _conductivity(1e-4)
    inclusion: Inclusion = Field(default_factory=Disc, description="the inclusion: {otype: Disc | Rectangle, ...}")


class InitField(StrictModel):
    """The initial guess: a uniform field."""

    # from FIT_LOW, the fit's lower clamp (ScaledParameter refuses an initial value below it)
    conductivity: float = Field(1.5e-4, ge=FIT_LOW, le=1.0, description="uniform initial conductivity (m^2/s)")


class Tikhonov(StrictModel):
    """Gradient-smoothness Tikhonov: weight * mean over cells of |grad(kappa / scale)|^2 (forward differences)."""

    otype: Literal["Tikhonov"] = "Tikhonov"
    weight: float = Field(1e-4, ge=0.0, le=1e6, description="weight (K^2, the data term's unit)")


class TotalVariation(StrictModel):
    """Smoothed total variation: weight * mean over cells of sqrt(|grad(kappa / scale)|^2 + eps^2) - eps."""

    otype: Literal["TV"] = "TV"
    weight: float = Field(1e-4, ge=0.0, le=1e6, description="weight (K^2, the data term's unit)")
    epsilon: float = Field(0.01, gt=0.0, le=10.0, description="smoothing of |grad| (units of the scale, 1e-4 m^2/s)")


Regularization = Annotated[Union[Tikhonov, TotalVariation], Field(discriminator="otype")]


class HeatConfig(FitConfig, problem="heat_inverse"):
    """heat_inverse's config: the shared keys (problems.fitting.FitConfig) and the plate's."""


    true: TrueField = Field(default_factory=TrueField, description="the true field (makes the observations)")
    init: InitField = Field(default_factory=InitField, description="initial guess")
    noise_std: float = Field(0.01, ge=0.0, le=100.0, description="std of the Gaussian noise on each reading (K; "
                                                                 "0: noise-free)")
    optimizer: AdamConfig = Field(default_factory=lambda: AdamConfig(learning_rate=0.2),   # type: ignore[assignment]
                                  description="optimiser, tiny-cuda-nn style")
    schedule: WarmupCosineConfig = Field(default_factory=lambda: WarmupCosineConfig(final_lr_factor=0.01),  # type: ignore[assignment]
                                           description="learning-rate schedule")
    steps: int = Field(150, ge=1, le=10_000_000, description="optimiser steps")
    grid: int = Field(24, ge=8, le=4096, description="cells per plate side")
    cell_size: float = Field(0.01, gt=0.0, le=10.0, description="side of a cell (m)")
    dt: float = Field(0.08, gt=0.0, le=1e6, description="simulation time step (s)")
    duration: float = Field(6.0, gt=0.0, le=1e9, description="observed time span (s)")
    observations: int = Field(25, ge=1, le=100_000, description="number of observation times")
    sensor_grid: list[Annotated[int, Field(ge=1, le=4096)]] = Field([12, 12], min_length=2, max_length=2,
                                   description="sensors as a [rows, cols] grid, each in [1, grid]")
    amplitude: float = Field(1.0, gt=0.0, le=1e4, description="initial temperature of the hot (+) and cold (-) "
                                                                "squares of the checkerboard (K)")
    checker_blocks: int = Field(12, ge=1, le=4096, description="squares per plate side of the initial checkerboard")
    regularization: Regularization = Field(default_factory=TotalVariation,
                                           description="regulariser of the field: {otype: Tikhonov | TV, weight}")
    rollout_budget: int | None = Field(None, ge=3, le=10_000_000, description="states held by the rollout (None: "
                                                                          "store all; fewer recompute the rest in "
                                                                          "the backward)")

    @model_validator(mode="after")
    def _consistent(self) -> "HeatConfig":
        for name, n in zip(("rows", "cols"), self.sensor_grid):
            if not 1 <= n <= self.grid:
                raise ValueError(f"sensor_grid {name} = {n} must be in [1, grid = {self.grid}] (one sensor per cell)")
        if self.checker_blocks > self.grid:
            raise ValueError(f"checker_blocks = {self.checker_blocks} must be <= grid = {self.grid}")
        observation_steps(self.duration, self.dt, self.observations)
        kmax = max(CONDUCTIVITY_RANGE[1], self.init.conductivity)
        bound = self.cell_size ** 2 / (4.0 * STABILITY_MARGIN * kmax)
        if self.dt > bound:
            raise ValueError(f"dt = {self.dt:g} s is too large: the explicit step must stay stable up to "
                             f"{STABILITY_MARGIN} x the top of the documented range or the initial conductivity "
                             f"({kmax:g} m^2/s), so dt <= cell_size^2 / (4 * {STABILITY_MARGIN} * {kmax:g}) = "
                             f"{bound:.4g} s")
        held = rollout_states(self, round(self.duration / self.dt))
        check_memory(self, "grid", self.memory_estimate(),
                     f"{self.grid}^2 cells x ({held} states held x 8 + {self.observations} observations x 24 + 1700) "
                     "bytes")
        return self

    def memory_estimate(self) -> int:
        """Bytes this config needs, per cell (C = grid^2): the rollout's held temperature fields and their
        gradients (2 floats each), per observation the trajectory and its gradient (2 floats) and the simulated
        readings of every cell in float64 on the host (twice), and about 1700 bytes of fixed cost, mostly the true
        field's 8 x 8 float64 subsamples per cell (three arrays of them) besides the conductivity's parameter,
        optimiser state and regulariser: ``C (8 held + 24 O + 1700)`` plus 1 MiB; held from sopt.sim's rollout
        plan (steps + 1 without rollout_budget). Not counted: the end-of-run uncertainty's host arrays, bounded by
        sensitivity's limits (about 250 MiB at most: 128 MiB of Jacobian, a few (C, C) float64 arrays)."""
        held = rollout_states(self, round(self.duration / self.dt))
        return self.grid ** 2 * (8 * held + 24 * self.observations + 1700) + 2 ** 20


def true_field(field: TrueField, grid: int) -> np.ndarray:
    """The (grid, grid) conductivity (m^2/s, float64): ``background`` with the inclusion's cells at its conductivity
    and the cells its edge cuts at the area-weighted mean. Row r holds y in [r, r + 1] / grid (row 0 at the
    bottom), column c x in [c, c + 1] / grid."""
    n = grid * SUBSAMPLES
    coords = (np.arange(n) + 0.5) / n
    x, y = np.meshgrid(coords, coords)                   # [row (y), col (x)]
    inside = field.inclusion.mask(x, y).astype(np.float64)
    fraction = inside.reshape(grid, SUBSAMPLES, grid, SUBSAMPLES).mean(axis=(1, 3))
    return field.background + (field.inclusion.conductivity - field.background) * fraction


def checkerboard(grid: int, blocks: int, amplitude: float) -> np.ndarray:
    """(grid, grid) initial temperature (K): +-``amplitude`` on a ``blocks`` x ``blocks`` checkerboard, the
    lower left square hot; a cell takes the sign at its centre."""
    centres = (np.arange(grid) + 0.5) / grid
    index = np.floor(centres * blocks).astype(np.int64)
    parity = (index[:, None] + index[None, :]) % 2
    return amplitude * np.where(parity == 0, 1.0, -1.0)


class HeatInverse(FittingProblem):
    """The conductivity field of a plate from the temperatures of a grid of sensors."""

    schema = HeatConfig
    description = "a plate's conductivity field from sensor temperatures"

    def __init__(self, config: HeatConfig) -> None:
        super().__init__(config)
        g = config.grid
        self.shape = (g, g)
        self.at = observation_steps(config.duration, config.dt, config.observations)
        self.n_steps = self.at[-1]
        self.times = np.asarray(self.at, np.float64) * config.dt                 # (K,) s
        self.u0 = checkerboard(g, config.checker_blocks, config.amplitude).astype(np.float32)
        self.truth = true_field(config.true, g)                                  # (g, g) m^2/s
        self.sensors = Sensors(sensor_cells(g, *config.sensor_grid), self.shape)
        self.clean = self.sensors.of(self.simulate(self.truth))                  # (K, S) K
        self.observed = self.add_noise(self.clean)
        self.target = spy.Tensor.from_numpy(sopt.get_device(), np.ascontiguousarray(self.observed))
        # kept within (0, the explicit step's stable bound]: positive, and stable whatever the optimiser does
        self.kappa = self.add_parameter("conductivity", np.full(self.shape, config.init.conductivity), SCALE, "m^2/s",
                                        low=FIT_LOW, high=config.cell_size ** 2 / (4.0 * config.dt))
        self.sim = Diffusion2D(self.u0, self.kappa.physical, config.cell_size, config.dt, boundary="dirichlet")
        reg = config.regularization
        self.regularizer = FieldRegularizer(reg.otype, reg.weight, self.shape, SCALE,
                                            getattr(reg, "epsilon", 0.01))
        self.mse = MSELoss()
        self._terms: tuple[Any, spy.Tensor] | None = None

    def simulate(self, kappa: np.ndarray) -> np.ndarray:
        """The (K, g, g) temperatures (K) at the observation times for a conductivity field, run now (no tape)."""
        sim = Diffusion2D(self.u0, np.asarray(kappa, np.float32), self.config.cell_size, self.config.dt,
                          boundary="dirichlet")
        traj = rollout(sim, sim.initial_state(), self.n_steps, observe="u", at=self.at).trajectory
        return traj.to_numpy().reshape(len(self.at), *self.shape).astype(np.float64)

    def jacobian(self, at: dict[str, Value] | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(the readings at ``at``'s field (default the fit), flattened as ``observed`` (K S,), their exact
        Jacobian in the field (K S, g^2)), float64 on the host (sensitivity.py): FittingProblem's central
        differences would need 2 g^2 + 1 rollouts, each difference close to float32's rounding."""
        kappa = (self.fitted() if at is None else at)["conductivity"]
        readings, jac = reading_jacobian(self.u0, kappa, self.config.cell_size, self.config.dt, self.at,
                                         self.sensors.cells)
        return readings.ravel(), jac

    def uncertainty(self, at: dict[str, Value] | None = None) -> dict[str, Value] | None:
        """Each cell's standard deviation (m^2/s, (g, g)) from the Laplace posterior sigma^2 (J^T J + (n/2) H_R)^-1
        at ``at`` (default the fit; the module docstring); None beyond sensitivity.affordable's limits (cells, cells^2
        x steps, readings x cells)."""
        if not affordable(self.shape[0] * self.shape[1], self.n_steps, int(np.size(self.observed))):
            return None
        kappa = np.asarray((self.fitted() if at is None else at)["conductivity"], np.float64)
        centre, jac = self.jacobian({"conductivity": kappa})
        residuals = np.ravel(np.asarray(self.observed, np.float64)) - centre
        prior = 0.5 * residuals.size * self.regularizer.hessian(kappa)
        return {"conductivity": laplace_std(jac, residuals, self.config.noise_std, prior).reshape(self.shape)}

    def objective(self, tape: Tape, step: int) -> Any:
        """The rollout observed at the observation times, the sensors' readings, their mean squared error to the
        observations (K^2) plus the regulariser's per-cell terms: the loss is the sum of both."""
        traj = rollout(self.sim, self.sim.initial_state(), self.n_steps, observe="u", at=self.at,
                       budget=self.config.rollout_budget).trajectory                     # (K, g, g)
        data = self.mse(self.sensors.read(traj), self.target)
        terms = self.regularizer(self.kappa.physical)
        self._terms = (data, terms)
        tape.metrics["loss_terms"] = self._read_terms
        return [data, terms]

    def _read_terms(self) -> dict[str, float]:
        """The data term and the regulariser of the step just read (the Trainer calls it on metrics steps)."""
        data, terms = self._terms
        return {"data_loss": float(data.item()),
                "regularization": float(terms.to_numpy().astype(np.float64).sum())}

    # -- results -----------------------------------------------------------------------------------------------
    def true_values(self) -> dict[str, Value]:
        return {"conductivity": self.truth.copy()}

    def fitted(self) -> dict[str, Value]:
        return {"conductivity": self.kappa.numpy().reshape(self.shape)}

    def summary(self) -> list[str]:
        fit, truth = self.fitted()["conductivity"], self.truth
        inside = truth != self.config.true.background
        lines = [f"conductivity field {self.shape[0]}x{self.shape[1]}: fitted range [{fit.min():.4g}, {fit.max():.4g}] "
                 f"m^2/s (true [{truth.min():.4g}, {truth.max():.4g}]); {self.sensors.count} sensors"]
        if inside.any() and (~inside).any():
            lines.append(f"mean over the inclusion's cells {fit[inside].mean():.4g} (true {truth[inside].mean():.4g}), "
                         f"background {fit[~inside].mean():.4g} (true {self.config.true.background:.4g}) m^2/s")
        if self.std is not None:
            std = self.std["conductivity"]
            error = np.abs(fit - truth)
            lines.append(f"uncertainty (Laplace, regulariser included): median std {np.median(std):.3g} m^2/s; the "
                         f"truth within 2 std in {100 * np.mean(error <= 2 * std):.1f}% of cells, within 3 std in "
                         f"{100 * np.mean(error <= 3 * std):.1f}%")
        return lines

    def plot(self, out_dir: pathlib.Path, history: list[dict[str, Any]]) -> list[pathlib.Path]:
        from problems.heat_inverse.plot import plot_fields, plot_readings
        fit = self.fitted()["conductivity"]
        # the readings of the fitted field, clipped into Diffusion2D's stable range (a diverged fit leaves it)
        stable = np.clip(fit, 1e-12, self.config.cell_size ** 2 / (4.0 * self.config.dt))
        std = None if self.std is None else self.std["conductivity"]
        fields = plot_fields(out_dir / "fields.png", self.truth, fit, self.u0, self.sensors.cells,
                             self.config.grid * self.config.cell_size, std)
        readings = plot_readings(out_dir / "readings.png", self.times, self.observed,
                                 self.sensors.of(self.simulate(stable)), self.sensors.cells)
        return [fields, readings]
