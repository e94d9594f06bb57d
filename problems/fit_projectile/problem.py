"""fit_projectile: recover a bouncing ball's drag, restitution, launch speed and angle from its observed positions.

The ball (a 2D sopt.sim.Projectile: gravity 9.81 m/s^2 down, quadratic drag, ground contact at y = 0 with
restitution through the time-of-impact correction, no friction) is launched from (0, ``launch_height``) at
``speed`` m/s, ``angle`` degrees above the horizontal, and observed at ``observations`` times evenly spread over
``duration`` s (the last one at ``duration``): positions (x, y) in m, plus Gaussian noise of ``noise_std`` m
(default 0.05 m, 5 cm on a path about 15 m long; ``noise_std=0`` for noise-free data). The default initial
guess (``init``) is away from the truth in every parameter. result.json's ``uncertainty`` is each fitted
parameter's standard deviation from the Gauss-Newton covariance at the fit (problems.fitting.uncertainty).

Parameters (result.json keys, documented ranges of ``true``):

====================  ======  ===============  ==========================================================
name                  unit    range of true    scale (ScaledParameter normalisation)
====================  ======  ===============  ==========================================================
``drag``              1/m     [0.01, 0.1]      0.05     (a = g - drag * |v| * v)
``restitution``       --      [0.3, 0.9]       0.5      (bounce: v_y -> -restitution * v_y)
``speed``             m/s     [5, 20]          10
``angle``             deg     [20, 70]         45
====================  ======  ===============  ==========================================================

In these ranges the ball lands within about 4 s and bounces at least once inside the default 5 s window, so
every parameter shapes the observations. speed and angle become the initial velocity through ``launch_velocity``
(launch.slang, a [Differentiable] Slang function called through ``sopt.load_module``: it is recorded on the tape
and its backward is SlangPy's ``.bwds``).

**Multi-start** (``multi_start: K``): K initial guesses fitted at once as K particles of one Projectile with
per-particle drag and restitution (and K launch velocities), each with its own loss term (its mean squared
distance to the observations, m^2; the optimised loss is their sum, and as every term depends on its own start's
parameters only, and Adam's state is per element, each start follows exactly the path it would follow alone).
Start 0 is ``init``; start k >= 1 draws each parameter uniformly within ``multi_start_spread`` times the width of
its range on either side of ``init``, clipped to the range (numpy Generator seeded by (``seed``, 1)). At the end
the start with the lowest loss at its final parameters is reported (``fitted``, ``loss``). The run's ``loss`` is
that one definition everywhere: each metrics record's ``loss`` is the best start's at that step (the optimised
sum is ``loss_sum``, each start's ``start_loss``), so the curves, the progress bar, a plateau schedule, ``sopt sweep``'s
pruning and best line and ``sopt report``'s best all rank by the best start's loss, as summary.json and result.json
report it (FittingProblem.result_loss).

**Parameter scale.** drag (~0.05 1/m) and speed (~10 m/s) differ by 200x; each is trained normalised by the
scale above (problems.fitting.ScaledParameter), so one learning rate moves every parameter by a similar fraction
of its scale, and the optimiser's settings are dimensionless.
"""

from __future__ import annotations

import pathlib
from typing import Any

import numpy as np
import slangpy as spy
from pydantic import Field, model_validator

import sopt
from sopt.utils import atomic_write
from problems.fitting import FitConfig, FittingProblem, StrictModel
from problems.fitting.config import (AdamConfig, OptimizerConfig, ScheduleConfig, WarmupCosineConfig,
                                         observation_steps)
from problems.fitting.horizon import horizon_fraction
from problems.fitting.problem import OBJECTIVE_METRIC, START_STREAM, Value, rel_error
from problems.limits import FLOAT, check_memory
from sopt.sim import Projectile, State, rollout
from sopt.autodiff.tape import Tape

HERE = pathlib.Path(__file__).resolve().parent
NAMES = ("drag", "restitution", "speed", "angle")
UNITS = {"drag": "1/m", "restitution": "", "speed": "m/s", "angle": "deg"}
RANGES = {"drag": (0.01, 0.1), "restitution": (0.3, 0.9), "speed": (5.0, 20.0), "angle": (20.0, 70.0)}
SCALES = {"drag": 0.05, "restitution": 0.5, "speed": 10.0, "angle": 45.0}
# the box the fit stays in (ScaledParameter bounds): the ranges widened, and away from where gradients vanish
# (restitution 0 stops every bounce, angle 0 or 90 degrees flattens the launch)
FIT_BOUNDS = {"drag": (0.0, 0.3), "restitution": (0.05, 1.0), "speed": (1.0, 40.0), "angle": (5.0, 85.0)}


class TrueValues(StrictModel):
    """The true parameters (they make the observations), within the documented ranges."""

    drag: float = Field(0.04, ge=RANGES["drag"][0], le=RANGES["drag"][1], description="quadratic drag (1/m)")
    restitution: float = Field(0.7, ge=RANGES["restitution"][0], le=RANGES["restitution"][1],
                               description="coefficient of restitution (1)")
    speed: float = Field(14.0, ge=RANGES["speed"][0], le=RANGES["speed"][1], description="launch speed (m/s)")
    angle: float = Field(55.0, ge=RANGES["angle"][0], le=RANGES["angle"][1],
                         description="launch angle above the horizontal (degrees)")


class InitValues(StrictModel):
    """The initial guess (start 0 of a multi-start fit), inside the box the fit stays in (FIT_BOUNDS)."""

    drag: float = Field(0.02, ge=FIT_BOUNDS["drag"][0], le=FIT_BOUNDS["drag"][1], description="quadratic drag (1/m)")
    restitution: float = Field(0.5, ge=FIT_BOUNDS["restitution"][0], le=FIT_BOUNDS["restitution"][1],
                               description="coefficient of restitution (1)")
    speed: float = Field(10.0, ge=FIT_BOUNDS["speed"][0], le=FIT_BOUNDS["speed"][1], description="launch speed (m/s)")
    angle: float = Field(40.0, ge=FIT_BOUNDS["angle"][0], le=FIT_BOUNDS["angle"][1],
                         description="launch angle above the horizontal (degrees)")


class ProjectileConfig(FitConfig, problem="fit_projectile"):
    """fit_projectile's config: the shared keys (problems.fitting.FitConfig) and the scene's."""


    true: TrueValues = Field(default_factory=TrueValues, description="true parameters (make the observations)")
    init: InitValues = Field(default_factory=InitValues, description="initial guess")
    noise_std: float = Field(0.05, ge=0.0, le=10.0, description="std of the Gaussian noise on each observed "
                                                                "coordinate (m; 0: noise-free)")
    optimizer: OptimizerConfig = Field(default_factory=lambda: AdamConfig(learning_rate=0.1),
                                       description="optimiser, tiny-cuda-nn style (on the normalised parameters)")
    schedule: ScheduleConfig = Field(default_factory=lambda: WarmupCosineConfig(final_lr_factor=0.01),
                                     description="learning-rate schedule")
    steps: int = Field(300, ge=1, le=10_000_000, description="optimiser steps")
    launch_height: float = Field(1.0, ge=0.0, le=100.0, description="height of the launch point (m)")
    duration: float = Field(5.0, gt=0.0, le=1000.0, description="observed time span (s)")
    # le 0.05: the kick stays stable (dt * 2 * drag * speed < 2) everywhere in the fit's box (drag 0.3, speed 40)
    dt: float = Field(0.005, gt=0.0, le=0.05, description="simulation time step (s)")
    observations: int = Field(40, ge=2, le=100_000, description="number of observation times")
    multi_start: int = Field(8, ge=1, le=1_000_000, description="initial guesses fitted at once (K)")
    multi_start_spread: float = Field(0.5, ge=0.0, le=1.0, description="spread of starts 1..K-1 around init "
                                                                       "(fraction of each range's width)")
    horizon_start: float = Field(0.1, gt=0.0, le=1.0, description="fraction of the duration the loss sees at "
                                                                   "step 0 (curriculum; 1: all from the start)")
    horizon_ramp: float = Field(0.6, ge=0.0, le=1.0, description="fraction of the steps over which the loss's "
                                                                 "span grows linearly to the whole duration")

    @model_validator(mode="after")
    def _fits(self) -> "ProjectileConfig":
        check_memory(self, "multi_start", self.memory_estimate(),
                     f"{self.multi_start} starts x {round(self.duration / self.dt)} steps x 2 x 4 floats of states "
                     f"and their gradients + {self.observations} observations x 8 floats per start")
        return self

    def memory_estimate(self) -> int:
        """Bytes this config needs: per start (K), the rollout's stored states (x and v, 4 floats, at each of the
        S + 1 steps) and their gradients, and 8 floats per observation (the tiled target and its host copy, the
        time grid, the trajectory and its gradient, the loss terms): ``4 (8 K (S + 1) + 8 K O)`` plus 1 MiB."""
        k, s = self.multi_start, round(self.duration / self.dt)
        return FLOAT * (8 * k * (s + 1) + 8 * k * self.observations) + 2 ** 20


class FitProjectile(FittingProblem):
    """Drag, restitution, launch speed and angle of a bouncing ball from its observed positions."""

    schema = ProjectileConfig
    description = "a bouncing ball's drag, restitution, launch speed and angle from its positions"

    def __init__(self, config: ProjectileConfig) -> None:
        super().__init__(config)
        self.at = observation_steps(config.duration, config.dt, config.observations)
        self.steps = self.at[-1]
        self.times = np.asarray(self.at, np.float64) * config.dt            # (n_obs,) s
        self.module = sopt.load_module(HERE / "launch.slang")
        k = config.multi_start
        self.starts = self._starts()                                          # name -> (K,) physical values
        for name in NAMES:
            self.add_parameter(name, self.starts[name], SCALES[name], UNITS[name], low=FIT_BOUNDS[name][0],
                               high=FIT_BOUNDS[name][1])
        device = sopt.get_device()
        self.x0 = spy.Tensor.from_numpy(device, np.tile(np.float32([0.0, config.launch_height]), (k, 1)))
        self.clean = self.simulate(self.true_values(), self.at)[:, 0, :]                          # (n_obs, 2) m
        self.observed = self.add_noise(self.clean)
        tiled = np.repeat(self.observed[:, None, :], k, axis=1)                                  # (n_obs, K, 2)
        self.target = spy.Tensor.from_numpy(device, np.ascontiguousarray(tiled))
        self.time_grid = spy.Tensor.from_numpy(device, np.ascontiguousarray(
            np.repeat(self.times[:, None], k, axis=1).astype(np.float32)))                      # (n_obs, K) s
        self.weight = 1.0 / config.observations
        # the rollout starts from launch_velocity's v0; the v0 given here only sizes the Projectile's stability check
        v0 = self.starts["speed"].max() * np.ones((k, 2), np.float32) / np.sqrt(2.0)
        self.sim = Projectile(np.tile(np.float32([0.0, config.launch_height]), (k, 1)), v0, dt=config.dt,
                              drag=self.scaled["drag"].physical, restitution=self.scaled["restitution"].physical)
        self.start_losses: np.ndarray | None = None   # (K,) at the last metrics step, or at evaluate()
        self._loss_terms: spy.Tensor | None = None

    # -- starts ------------------------------------------------------------------------------------------------
    def _starts(self) -> dict[str, np.ndarray]:
        """(K,) initial values per parameter: start 0 = init, the others uniform within multi_start_spread x the
        range's width around init, clipped to the range (seeded by (seed, START_STREAM))."""
        cfg = self.config
        k = cfg.multi_start
        rng = self.rng(START_STREAM)
        out = {}
        for name in NAMES:
            low, high = RANGES[name]
            init = getattr(cfg.init, name)
            width = cfg.multi_start_spread * (high - low)
            draws = init + rng.uniform(-width, width, k)
            draws = np.clip(draws, low, high)
            draws[0] = init
            out[name] = draws
        return out

    # -- simulation --------------------------------------------------------------------------------------------
    def simulate(self, values: dict[str, Any], at: list[int]) -> np.ndarray:
        """Positions (len(at), n, 2) in m at steps ``at`` of n balls with the given parameter values (each a
        number or an (n,) array; drag clipped at 0 and restitution into [0, 1]), run now (no tape) by a
        Projectile of its own."""
        cfg = self.config
        arrays = np.broadcast_arrays(*[np.atleast_1d(np.asarray(values[n], np.float64)) for n in NAMES])
        drag, restitution, speed, angle = (a.ravel() for a in arrays)
        n = speed.size
        a = np.radians(angle)
        v0 = (speed[:, None] * np.stack([np.cos(a), np.sin(a)], axis=1)).astype(np.float32)
        x0 = np.tile(np.float32([0.0, cfg.launch_height]), (n, 1))
        sim = Projectile(x0, v0, dt=cfg.dt, drag=np.maximum(drag, 0.0).astype(np.float32),
                         restitution=np.clip(restitution, 0.0, 1.0).astype(np.float32))
        traj = rollout(sim, sim.initial_state(), max(at), observe="x", at=at).trajectory
        return traj.to_numpy().reshape(len(at), n, 2).astype(np.float64)

    def predict(self, points: list[dict[str, Value]]) -> np.ndarray:
        """The observed positions (m) at each parameter point, all points simulated at once as balls of one
        Projectile: (len(points), observations * 2), laid out as ``observed.ravel()``."""
        batch = {n: [point[n] for point in points] for n in NAMES}
        return self.simulate(batch, self.at).transpose(1, 0, 2).reshape(len(points), -1)

    def objective(self, tape: Tape, step: int) -> Any:
        """Launch velocities from speed and angle, the rollout observed at the observation steps, and per (time,
        start) weighted squared distances (n_obs, K): their sum is the loss, a start's column its own loss."""
        v0 = self.module.launch_velocity(speed=self.scaled["speed"].physical,
                                         angle=self.scaled["angle"].physical)                     # (K, 2)
        traj = rollout(self.sim, State(x=self.x0, v=v0), self.steps, observe="x", at=self.at).trajectory
        terms = self.module.weighted_squared_distance(predicted=traj, observed=self.target, time=self.time_grid,
                                                      horizon=self.horizon(step), weight=self.weight)  # (n_obs, K)
        self._loss_terms = terms
        tape.metrics["multi_start"] = self._read_start_losses
        return terms

    def horizon(self, step: int) -> float:
        """The time span (s) the loss of optimiser step ``step`` sees: ``horizon_start`` x duration at step 0,
        growing linearly to the whole duration at ``horizon_ramp`` x steps (then all of it). Fitting the launch
        before the bounces keeps the fit out of the local minima that mismatched bounce times make."""
        cfg = self.config
        fraction = horizon_fraction(step, cfg.steps, cfg.horizon_start, cfg.horizon_ramp)
        # a hair above the last observation time at the end, so float32 rounding drops none
        return float(fraction * cfg.duration * (1.0 + 1e-6))

    def _read_start_losses(self) -> dict[str, Any]:
        """Each start's loss of the step just read (the Trainer calls it on metrics steps)."""
        terms = self._loss_terms.to_numpy().reshape(self.config.observations, self.config.multi_start)
        self.start_losses = terms.astype(np.float64).sum(axis=0)
        return {"start_loss": [float(v) for v in self.start_losses]} if self.config.multi_start > 1 else {}

    # -- results -----------------------------------------------------------------------------------------------
    def best_start(self) -> int:
        """The start with the lowest loss last read (start 0 before any was read)."""
        if self.start_losses is None:
            return 0
        finite = np.where(np.isfinite(self.start_losses), self.start_losses, np.inf)
        return int(np.argmin(finite))

    def evaluate(self) -> float:
        """Every start's loss at its final parameters; the best start's is the result's loss."""
        tape = Tape()
        with tape:
            self(tape, self.config.steps)   # the whole duration
        tape.submit()
        self._read_start_losses()
        return float(self.start_losses[self.best_start()])

    def result_loss(self) -> float | None:
        """The best start's loss at the metrics step just read (None for a single start: the loss is its own)."""
        if self.config.multi_start == 1 or self.start_losses is None:
            return None
        return float(self.start_losses[self.best_start()])

    def finish(self, run_dir: pathlib.Path, history: list[dict[str, Any]]) -> dict[str, float]:
        """As FittingProblem's; with several starts also ``loss_sum``, the sum of the starts' final losses (what the
        optimiser minimised), so summary.json's two losses are both at the final parameters."""
        final = super().finish(run_dir, history)
        if self.config.multi_start > 1 and self.start_losses is not None:
            final[OBJECTIVE_METRIC] = float(np.sum(self.start_losses))
        return final

    def start_values(self) -> dict[str, np.ndarray]:
        """name -> (K,) physical values of every start now."""
        return {name: p.numpy().reshape(-1) for name, p in self.scaled.items()}

    def fitted(self) -> dict[str, Value]:
        best = self.best_start()
        return {name: float(v[best]) for name, v in self.start_values().items()}

    def progress_metrics(self) -> dict[str, float | list[float]]:
        """Per start: ``value/<name>`` (a list when K > 1); the best start's ``rel_error/<name>``."""
        values = self.start_values()
        out: dict[str, float | list[float]] = {}
        for name, v in values.items():
            out[f"value/{name}"] = float(v[0]) if v.size == 1 else [float(x) for x in v]
        truth, best = self.true_values(), self.best_start()
        for name, v in values.items():
            out[f"rel_error/{name}"] = rel_error(float(v[best]), truth[name])
        return out

    def summary(self) -> list[str]:
        k = self.config.multi_start
        if k == 1 or self.start_losses is None:
            return []
        best = self.best_start()
        return [f"multi-start: best of {k} starts is start {best} (loss {self.start_losses[best]:.3g}; median start "
                f"loss {float(np.median(self.start_losses)):.3g})"]

    def plot(self, out_dir: pathlib.Path, history: list[dict[str, Any]]) -> list[pathlib.Path]:
        """trajectories.png: the observations, the fitted ball's path and the initial guess's (start 0's)."""
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        every = max(1, self.steps // 200)
        fine = list(range(0, self.steps + 1, every))
        fitted, truth = self.fitted(), self.true_values()
        # three balls in one run: the initial guess (start 0), the true and the fitted parameters
        paths = self.simulate({n: [self.starts[n][0], truth[n], fitted[n]] for n in NAMES}, fine)
        initial, truth_path, fitted_path = paths[:, 0], paths[:, 1], paths[:, 2]
        fig, ax = plt.subplots(figsize=(9, 4.2))
        ax.plot(initial[:, 0], initial[:, 1], ":", color="0.5", label="initial guess")
        ax.plot(truth_path[:, 0], truth_path[:, 1], "-", color="0.75", lw=3, label="true path")
        ax.plot(fitted_path[:, 0], fitted_path[:, 1], "-", color="C1", lw=1.5, label="fitted")
        ax.plot(self.observed[:, 0], self.observed[:, 1], "o", color="C0", ms=4, label="observed")
        ax.axhline(0.0, color="k", lw=0.8)
        ax.set_xlabel("x (m)")
        ax.set_ylabel("height (m)")
        f = fitted
        ax.set_title(f"fitted: drag {f['drag']:.4g} 1/m, restitution {f['restitution']:.4g}, speed {f['speed']:.4g} "
                     f"m/s, angle {f['angle']:.4g} deg")
        ax.legend(loc="upper right", fontsize=8)
        ax.grid(True, alpha=0.3)
        fig.tight_layout()
        path = out_dir / "trajectories.png"
        atomic_write.write_figure(path, fig, dpi=100)
        plt.close(fig)
        return [path]
