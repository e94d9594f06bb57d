"""fit_cloth: recover a cloth's spring stiffness and damping from the observed positions of its particles.

The cloth is an ``nx`` x ``ny`` grid of particles of ``particle_mass`` kg, ``spacing`` m apart at rest, joined by
SpringSystem.cloth's structural (horizontal and vertical neighbours) and shear (both diagonals of every cell)
springs, in 3D (axis 1 up, gravity 9.81 m/s^2 down). It starts at rest and horizontal (in the plane y = 0, the
top row along z = 0 and the rest towards -z), stretched by ``prestretch`` about the pinned corner at the origin
(held taut, then let go), held only at the top row's two corners, and swings down under gravity (semi-implicit
Euler steps of ``dt`` s). Its particles' positions (N, 3) are observed at ``observations`` times evenly spread
over ``duration`` s (the last one at ``duration``), plus Gaussian noise of ``noise_std`` m (default 1 mm on a
cloth about 35 cm across; ``noise_std=0`` for noise-free data); the loss is their mean squared difference from the
simulated positions (m^2), over a growing horizon (below). The default initial guess (110 N/m, 0.1 N s/m) is away
from the truth (120 N/m, 0.06 N s/m) in both parameters. result.json's ``uncertainty`` is each shared parameter's
standard deviation from the Gauss-Newton covariance at the fit (problems.fitting.uncertainty, 5 rollouts);
per spring there is none (its Jacobian would take 2 S + 3 rollouts, 423 for 8 x 8, longer than the fit).

Parameters (result.json keys, documented ranges of ``true``, ScaledParameter scales):

- ``stiffness`` (N/m): spring stiffness k, shared, in [50, 250]; per spring, the field's mean, in [50, 120];
  scale 100.
- ``damping`` (N s/m): spring damping c along the spring, shared, in [0.02, 0.2]; scale 0.1.

**Excitation.** With the defaults (8 x 8 particles of 20 g, 5 cm apart, 10% prestretch, 0.3 s) every spring
starts pulling with k * 0.1 * l0, so the particles' first accelerations show the stiffness directly; the
release rings the springs (damping ratios 0.005 to 0.1), whose decay shows the damping, and the fall stretches
the cloth by 5 to 25%. The damping's effect on the positions is far weaker than the stiffness's (10% of damping
moves them by a few percent of what 1% of stiffness does) but its ringing is seen from the first observation.

**Curriculum.** The springs ring at tens of hertz, so over the whole window a stiffness ~10% off puts the
simulated ringing a period out of phase with the observed one: the loss has local minima there. The loss of
optimiser step i sees only the first ceil(f_i * observations) observations, f growing linearly from
``horizon_start`` at step 0 to 1 at ``horizon_ramp`` x ``steps`` (horizon_loss.py, fit_cloth.slang): the first
observations fix the stiffness in the right basin, the whole window then sharpens both. ``loss`` in result.json
is over all observations.

**Per-spring stiffness** (``per_spring: true``): one stiffness per spring is fitted (S values; S = 210 for 8 x 8)
while damping stays shared, and ``stiffness``'s error is the field's, ||fitted - true||_2 / ||true||_2. The
true field varies smoothly over the cloth: spring s with its midpoint at (u, v) in [0, 1]^2 (column and row,
from the lower left corner of the rest grid) has

    k_s = stiffness * (1 + stiffness_variation * cos(pi u) * sin(pi (v - 1/2)))

(``stiffness_variation`` in [0, 0.3]). Identifiability: a spring's stiffness shows in the data only through the
force it carries. In a cloth hanging from its corners the springs along the free bottom edge carry little, and in
any quasi-static pose each particle's force balance gives two in-plane equations for the four or so springs that
meet there: the field is pinned down by how the loads change over the motion. The prestretched release loads
every spring, bottom edge included, from t = 0 (without it the fit stalls at 2 to 3%), and ``smoothness``
(weight, m^2: the data term's unit) adds R = weight / S * sum_s [(z_s - z_right)^2 + (z_s - z_up)^2], z = k /
scale, over each spring family's grid (smoothness.py, computed on the tape by fit_cloth.slang), which ties the
weakest-determined springs to their neighbours at a bias well below 1% for this smooth field. A stiffer cloth
stretches less and its field is determined less well: per spring, the documented mean stiffness is [50, 120] N/m
(at 150 N/m the defaults reach ~0.95%, at 250 N/m 5%).

**Stability.** Semi-implicit Euler is stable for dt^2 w^2 + 2 dt gamma < 4 over the system's modes; SpringSystem
refuses a dt that is certainly unstable. The fitted values are clamped to [0, 1.5 x max(top of the documented
range, initial value)] (ScaledParameter; 375 N/m and 0.3 N s/m at the defaults), and dt must pass SpringSystem's
check at the top of that box (a ValueError otherwise). At the defaults (dt 3 ms, 20 g) the stiffest mode of the
8 x 8 cloth (7.6 k / m) stays stable up to about 1000 N/m.
"""

from __future__ import annotations

import math
import pathlib
from typing import Any

import numpy as np
import slangpy as spy
from pydantic import Field, model_validator

import sopt
from problems.fit_cloth.horizon_loss import HorizonLoss, horizon
from problems.fit_cloth.smoothness import SpringSmoothness
from problems.fitting import FitConfig, FittingProblem, StrictModel
from problems.fitting.config import AdamConfig, WarmupCosineConfig, observation_steps
from problems.fitting.problem import Value
from problems.limits import FLOAT, check_memory, rollout_states
from sopt.sim import SpringSystem, rollout
from sopt.autodiff.tape import Tape

RANGES = {"stiffness": (50.0, 250.0), "damping": (0.02, 0.2)}
PER_SPRING_STIFFNESS = (50.0, 120.0)   # N/m: the mean stiffness range documented for per_spring fits
SCALES = {"stiffness": 100.0, "damping": 0.1}
UNITS = {"stiffness": "N/m", "damping": "N s/m"}
STABILITY_MARGIN = 1.5   # dt must pass SpringSystem's check at this times the largest true / initial values


class TrueValues(StrictModel):
    """The true parameters (they make the observations), within the documented ranges."""

    stiffness: float = Field(120.0, ge=RANGES["stiffness"][0], le=RANGES["stiffness"][1],
                             description="spring stiffness, or the mean of the per-spring field (N/m)")
    damping: float = Field(0.06, ge=RANGES["damping"][0], le=RANGES["damping"][1],
                           description="spring damping along the spring (N s/m)")
    stiffness_variation: float = Field(0.0, ge=0.0, le=0.3, description="relative amplitude of the per-spring "
                                                                        "stiffness field (1; 0: uniform)")


class InitValues(StrictModel):
    """The initial guess (physically valid, not bound to the ranges)."""

    stiffness: float = Field(110.0, gt=0.0, le=1e6, description="stiffness of every spring (N/m)")
    damping: float = Field(0.1, ge=0.0, le=1e3, description="spring damping (N s/m)")


class ClothConfig(FitConfig, problem="fit_cloth"):
    """fit_cloth's config: the shared keys (problems.fitting.FitConfig) and the cloth's."""


    true: TrueValues = Field(default_factory=TrueValues, description="true parameters (make the observations)")
    init: InitValues = Field(default_factory=InitValues, description="initial guess")
    noise_std: float = Field(0.001, ge=0.0, le=10.0, description="std of the Gaussian noise on each observed "
                                                                 "coordinate (m; 0: noise-free)")
    optimizer: AdamConfig = Field(default_factory=lambda: AdamConfig(learning_rate=0.1),   # type: ignore[assignment]
                                  description="optimiser, tiny-cuda-nn style")
    schedule: WarmupCosineConfig = Field(default_factory=lambda: WarmupCosineConfig(final_lr_factor=0.001),  # type: ignore[assignment]
                                           description="learning-rate schedule")
    steps: int = Field(150, ge=1, le=10_000_000, description="optimiser steps")
    nx: int = Field(8, ge=2, le=4096, description="particles per row")
    ny: int = Field(8, ge=2, le=4096, description="particles per column (rows)")
    spacing: float = Field(0.05, gt=0.0, le=100.0, description="rest distance of neighbouring particles (m)")
    particle_mass: float = Field(0.02, gt=0.0, le=1e6, description="mass of every particle (kg)")
    dt: float = Field(0.003, gt=0.0, le=1.0, description="simulation time step (s)")
    duration: float = Field(0.3, gt=0.0, le=1e6, description="observed time span (s)")
    observations: int = Field(10, ge=1, le=100_000, description="number of observation times")
    prestretch: float = Field(0.1, ge=0.0, le=0.5, description="the cloth starts stretched by this fraction of its "
                                                               "rest size (1)")
    per_spring: bool = Field(False, description="fit one stiffness per spring (true) or one for all (false)")
    horizon_start: float = Field(0.25, gt=0.0, le=1.0, description="fraction of the observations the loss sees "
                                                                   "at step 0 (curriculum; 1: all from the start)")
    horizon_ramp: float = Field(0.5, ge=0.0, le=1.0, description="fraction of the steps over which the loss's "
                                                                 "span grows linearly to every observation")
    smoothness: float = Field(1e-6, ge=0.0, le=1e6, description="weight of the per-spring stiffness smoothness "
                                                               "regulariser (m^2; per_spring only)")
    rollout_budget: int | None = Field(None, ge=3, le=10_000_000, description="states held by the rollout (None: "
                                                                          "store all; fewer recompute the rest in "
                                                                          "the backward)")

    @model_validator(mode="after")
    def _consistent(self) -> "ClothConfig":
        observation_steps(self.duration, self.dt, self.observations)
        self._check_dt()
        if self.true.stiffness_variation > 0 and not self.per_spring:
            raise ValueError(f"true.stiffness_variation = {self.true.stiffness_variation:g} needs per_spring: true "
                             "(one shared stiffness cannot match a varying field)")
        low, high = PER_SPRING_STIFFNESS
        if self.per_spring and not low <= self.true.stiffness <= high:
            raise ValueError(f"true.stiffness = {self.true.stiffness:g} N/m is outside [{low:g}, {high:g}], the range "
                             "documented for per_spring fits (a stiffer cloth stretches too little to pin one "
                             "stiffness per spring within 1%)")
        held = rollout_states(self, round(self.duration / self.dt))
        check_memory(self, "nx", self.memory_estimate(),
                     f"{self.nx} x {self.ny} particles x ({held} states held x 12 + {self.observations} observations x "
                     "12 + 100) floats")
        return self

    def fit_bounds(self) -> dict[str, tuple[float, float]]:
        """name -> (low, high): the box the fitted values are clamped to (ScaledParameter), from 0 to
        STABILITY_MARGIN x the larger of the documented range's top and the initial value."""
        return {name: (0.0, STABILITY_MARGIN * max(RANGES[name][1], getattr(self.init, name)))
                for name in ("stiffness", "damping")}

    def _check_dt(self) -> None:
        """Refuse a dt that SpringSystem's stability check would refuse at the top of the fit's box (the stiffest
        and most damped system the fit can reach). That check's stiffest pattern in this cloth is one inner
        particle moved in the cloth's plane: its 4 structural and 4 shear springs give w^2 = 4 k / m and a damping
        rate gamma = 4 c / m, and dt^2 w^2 + 2 dt gamma < 4 holds for dt < 4 / (gamma + sqrt(gamma^2 + 4 w^2)).
        (A cloth 2 particles wide has no inner particle, and this bound is then a little stricter than
        SpringSystem's.) Checked here, from the keys alone, so the error names dt before any GPU work."""
        (_, k), (_, c) = self.fit_bounds().values()
        w2, gamma = 4.0 * k / self.particle_mass, 4.0 * c / self.particle_mass
        limit = 4.0 / (gamma + math.sqrt(gamma ** 2 + 4.0 * w2))
        if self.dt >= limit:
            raise ValueError(f"config dt = {self.dt:g} s is too large: the step must stay stable up to "
                             f"{STABILITY_MARGIN} x the top of the documented ranges or the initial values ({k:g} N/m, "
                             f"{c:g} N s/m) with particle_mass = {self.particle_mass:g} kg, so dt < {limit:.4g} s "
                             "(4 / (gamma + sqrt(gamma^2 + 4 w^2)), w^2 = 4 k / m, gamma = 4 c / m)")

    def memory_estimate(self) -> int:
        """Bytes this config needs, per particle (N = nx ny; about 4 springs each): the rollout's held states (x
        and v, 6 floats) and their gradients, 12 floats per observation (the trajectory and its gradient, the
        target, the observations in float64 twice on the host) and about 100 floats of coefficients, topology and
        stability-check scratch: ``4 N (12 held + 12 O + 100)`` plus 1 MiB; held from sopt.sim's rollout plan
        (steps + 1 without rollout_budget)."""
        n = self.nx * self.ny
        held = rollout_states(self, round(self.duration / self.dt))
        return FLOAT * n * (12 * held + 12 * self.observations + 100) + 2 ** 20


def horizontal_cloth(nx: int, ny: int, spacing: float) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """(x0 (N, 3) m, springs (S, 2), pinned particle indices) of SpringSystem.cloth's grid laid horizontally:
    particle r * nx + c at (c spacing, 0, (r - (ny - 1)) spacing), so the top row r = ny - 1 lies along z = 0 and
    its two corners are pinned. The springs are SpringSystem.cloth's (same order)."""
    template = SpringSystem.cloth(nx, ny, spacing, dim=3, pin="top_corners", stiffness=0.0, dt=1.0)
    r, c = np.divmod(np.arange(nx * ny), nx)
    x0 = np.stack([c * spacing, np.zeros(nx * ny), (r - (ny - 1)) * spacing], axis=1)
    return x0.astype(np.float32), template.springs.copy(), np.flatnonzero(template.pinned_mask).tolist()


def stiffness_field(springs: np.ndarray, nx: int, ny: int, mean: float, variation: float) -> np.ndarray:
    """(S,) float64 per-spring stiffness (N/m) of the smooth true field (module docstring)."""
    r, c = np.divmod(np.arange(nx * ny), nx)
    u = (c[springs[:, 0]] + c[springs[:, 1]]) / (2.0 * (nx - 1))
    v = (r[springs[:, 0]] + r[springs[:, 1]]) / (2.0 * (ny - 1))
    return mean * (1.0 + variation * np.cos(np.pi * u) * np.sin(np.pi * (v - 0.5)))


class FitCloth(FittingProblem):
    """Stiffness (shared or per spring) and damping of a swinging cloth from its observed particle positions."""

    schema = ClothConfig
    description = "a falling cloth's stiffness and damping (or one stiffness per spring)"

    def __init__(self, config: ClothConfig) -> None:
        super().__init__(config)
        cfg = config
        self.at = observation_steps(cfg.duration, cfg.dt, cfg.observations)
        self.n_steps = self.at[-1]
        self.times = np.asarray(self.at, np.float64) * cfg.dt                        # (K,) s
        rest, self.springs, self.pinned = horizontal_cloth(cfg.nx, cfg.ny, cfg.spacing)
        ends = rest[self.springs]                                                     # (S, 2, 3)
        self.rest_length = np.linalg.norm(ends[:, 1] - ends[:, 0], axis=1).astype(np.float32)
        # stretched about the pinned corner at the origin: every spring starts in tension
        self.x0 = (rest * (1.0 + cfg.prestretch)).astype(np.float32)
        self.n_springs = int(self.springs.shape[0])
        self.true_stiffness = (stiffness_field(self.springs, cfg.nx, cfg.ny, cfg.true.stiffness,
                                               cfg.true.stiffness_variation)
                               if cfg.per_spring else np.array([cfg.true.stiffness]))
        self.clean = self.simulate(self.true_stiffness, cfg.true.damping, self.at)    # (K, N, 3) m
        self.observed = self.add_noise(self.clean)
        self.target = spy.Tensor.from_numpy(sopt.get_device(), np.ascontiguousarray(self.observed))
        k_init = np.full(self.n_springs if cfg.per_spring else 1, cfg.init.stiffness)
        bounds = cfg.fit_bounds()
        self.stiffness = self.add_parameter("stiffness", k_init, SCALES["stiffness"], UNITS["stiffness"],
                                            low=bounds["stiffness"][0], high=bounds["stiffness"][1])
        self.damping = self.add_parameter("damping", [cfg.init.damping], SCALES["damping"], UNITS["damping"],
                                          low=bounds["damping"][0], high=bounds["damping"][1])
        self.sim = self._system(self.stiffness.physical, self.damping.physical)
        self.smoothness = (SpringSmoothness(cfg.nx, cfg.ny, cfg.smoothness, SCALES["stiffness"])
                           if cfg.per_spring and cfg.smoothness > 0 else None)
        self.loss = HorizonLoss(self.target)
        self._terms: tuple[Any, spy.Tensor | None] | None = None

    def _system(self, stiffness: Any, damping: Any) -> SpringSystem:
        cfg = self.config
        return SpringSystem(self.x0, self.springs, stiffness=stiffness, damping=damping, mass=cfg.particle_mass,
                            rest_length=self.rest_length, pinned=self.pinned, dt=cfg.dt)

    def simulate(self, stiffness: Any, damping: float, at: list[int]) -> np.ndarray:
        """Positions (len(at), N, 3) (m) at steps ``at`` for stiffness (a number or (S,)) and damping, run now
        (no tape) with a SpringSystem of its own."""
        k = np.asarray(stiffness, np.float32).reshape(-1)
        sim = self._system(k if k.size > 1 else float(k[0]), float(damping))
        traj = rollout(sim, sim.initial_state(), max(at), observe="x", at=at).trajectory
        return traj.to_numpy().reshape(len(at), -1, 3).astype(np.float64)

    def predict(self, points: list[dict[str, Value]]) -> np.ndarray:
        """The observed positions at each point's stiffness and damping: (len(points), observations * N * 3), one
        rollout each (FittingProblem's Gauss-Newton uncertainty: 5 rollouts for the shared fit)."""
        return np.stack([self.simulate(point["stiffness"], float(point["damping"]), self.at).ravel()
                         for point in points])

    def uncertainty(self, at: dict[str, Value] | None = None) -> dict[str, Value] | None:
        """FittingProblem's Gauss-Newton standard deviations for the shared fit; None per spring, where the
        central-difference Jacobian would take 2 S + 3 rollouts (423 for 8 x 8), longer than the fit itself."""
        return None if self.config.per_spring else super().uncertainty(at)

    def objective(self, tape: Tape, step: int) -> Any:
        """The rollout observed at the observation times and its mean squared distance to the observations inside
        the horizon of step ``step`` (m^2), plus the per-spring smoothness terms when fitted per spring: the loss
        is their sum."""
        traj = rollout(self.sim, self.sim.initial_state(), self.n_steps, observe="x", at=self.at,
                       budget=self.config.rollout_budget).trajectory                 # (K, N, 3)
        data = self.loss(traj, self.horizon(step))
        terms = self.smoothness(self.stiffness.physical) if self.smoothness is not None else None
        self._terms = (data, terms)
        tape.metrics["loss_terms"] = self._read_terms
        return [data, terms] if terms is not None else data

    def horizon(self, step: int) -> int:
        """Observations the loss of optimiser step ``step`` sees (the curriculum of horizon_loss.py)."""
        cfg = self.config
        return horizon(step, cfg.steps, cfg.observations, cfg.horizon_start, cfg.horizon_ramp)

    def _read_terms(self) -> dict[str, float]:
        """The data term and the regulariser of the step just read (the Trainer calls it on metrics steps)."""
        data, terms = self._terms
        out = {"data_loss": float(data.to_numpy().astype(np.float64).sum())}
        if terms is not None:
            out["regularization"] = float(terms.to_numpy().astype(np.float64).sum())
        return out

    # -- results -----------------------------------------------------------------------------------------------
    def true_values(self) -> dict[str, Value]:
        k = self.true_stiffness
        return {"stiffness": k.copy() if k.size > 1 else float(k[0]), "damping": float(self.config.true.damping)}

    def fitted(self) -> dict[str, Value]:
        k = self.stiffness.numpy().reshape(-1)
        return {"stiffness": k if self.config.per_spring else float(k[0]),
                "damping": float(self.damping.numpy().reshape(-1)[0])}

    def summary(self) -> list[str]:
        if not self.config.per_spring:
            return []
        fit, true = self.fitted()["stiffness"], self.true_stiffness
        worst = float(np.max(np.abs(fit - true) / true))
        return [f"per-spring stiffness ({self.n_springs} springs): fitted range [{fit.min():.4g}, {fit.max():.4g}] "
                f"N/m (true [{true.min():.4g}, {true.max():.4g}]), largest relative error of one spring {worst:.3g}"]

    def plot(self, out_dir: pathlib.Path, history: list[dict[str, Any]]) -> list[pathlib.Path]:
        from problems.fit_cloth.plot import plot_cloth, plot_stiffness_field
        cfg = self.config
        fitted = self.fitted()
        # a diverged fit may leave a negative value, which SpringSystem refuses: the picture clips it
        positions = self.simulate(np.maximum(fitted["stiffness"], 0.0), max(fitted["damping"], 0.0), self.at)
        files = [plot_cloth(out_dir / "cloth.png", self.times, self.observed, positions, self.x0, self.springs,
                            cfg.nx, cfg.ny)]
        if cfg.per_spring:
            files.append(plot_stiffness_field(out_dir / "stiffness_field.png", self.x0, self.springs,
                                              self.true_stiffness, np.asarray(fitted["stiffness"])))
        return files
