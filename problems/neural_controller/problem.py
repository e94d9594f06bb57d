"""neural_controller: train an MLP that drives a 2D mass-spring robot to walk (DiffTaichi's mass_spring task).

The robot (robot.py): a few unit squares of side 0.05 m joined into two legs under a back, 16 particles of
1 kg, 36 damped springs, the vertical edges of the four leg squares actuated (8 actuators), standing on sticky
ground at y = 0.1 m (``SpringSystem`` with ``ground``: a particle that reaches the ground stops there until
its springs lift it). Each step an MLP (``sopt.nn.MLP``, tanh) reads sinusoid clock features of t and the
particles' offsets from the centre and velocities (controller.py) and sets the actuated springs' rest lengths
``l0 (1 + actuation_strength u)``, u in (-1, 1). Features, MLP layers and simulator steps are recorded on one
tape; the loss is minus the distance (m) the robot's centre moves along +x in ``episode_steps`` steps plus a
posture term, ``upright_weight`` (1/m) times the mean squared height change (m^2) of the back's 8 particles over
every step (controller.PostureLoss: it keeps the back level at its standing height, so the robot walks rather
than tumbling forward), and its gradient flows through every step into the MLP's weights.

**Walking** means: the centre moves forward (``distance_after`` > 0) while the robot stays upright through the
whole walk: the back's mean height above the ground stays above UPRIGHT_HEIGHT (0.08 m; standing, 0.125 m) and
the back's top edge stays within UPRIGHT_TILT (30 degrees) of level. ``fitted`` reports ``min_back_height``
(m) and ``max_tilt`` (degrees) of the trained walk.

There are no true values to recover: ``result.json``'s ``fitted`` holds ``distance_before`` (the untrained
controller's walk) and ``distance_after`` (the trained one's), in m; ``true`` and ``rel_error`` are empty and
``loss`` is the final loss (``-distance_after`` plus the posture term). Pictures: ``gait.png`` (a filmstrip of both walks), ``gait.gif`` (the trained
walk) and ``curves.png`` (redrawn here: the distance walked over the training steps, on a linear scale, since
the loss is negative).
"""

from __future__ import annotations

import pathlib
from typing import Any

import numpy as np
from pydantic import Field, model_validator

import sopt
from problems.fitting import FitConfig, FittingProblem
from problems.fitting.config import AdamConfig, OptimizerConfig
from problems.limits import check_memory
from problems.neural_controller.controller import NeuralController, PostureLoss, walk_loss
from problems.neural_controller.robot import Robot, build_robot
from sopt.autodiff.parameter import Parameter
from sopt.sim import SpringSystem, rollout
from sopt.train import loss_scalar

GROUND = 0.1          # m: the ground's height, where the robot's feet start
FRAMES = 8            # frames of each walk in gait.png
UPRIGHT_HEIGHT = 0.08  # m: the back's mean height above the ground stays above this in an upright walk
UPRIGHT_TILT = 30.0    # degrees: the back's top edge stays within this of level in an upright walk


class NeuralControllerConfig(FitConfig, problem="neural_controller"):
    """Config of neural_controller (every key checked; SI units)."""


    noise_std: float = Field(0.0, ge=0.0, le=0.0, description="no observations here: must be 0")
    episode_steps: int = Field(150, ge=10, le=100_000, description="simulator steps of one walk, T (steps)")
    dt: float = Field(0.005, gt=0.0, le=0.01, description="simulator time step (s)")
    stiffness: float = Field(1e4, gt=0.0, le=1e6, description="spring stiffness (N/m; particles of 1 kg)")
    damping: float = Field(10.0, ge=0.0, le=1e3, description="spring damping along each spring (N s/m)")
    actuation_strength: float = Field(0.2, gt=0.0, le=0.5, description="rest length l0 (1 + strength u) of an "
                                                                       "actuated spring, u in (-1, 1)")
    gravity: float = Field(-4.8, ge=-50.0, le=0.0, description="vertical gravity (m/s^2; DiffTaichi's -4.8: the "
                                                               "robot learns to walk under -9.81 far less often)")
    hidden_features: int = Field(32, ge=1, le=256, description="width of the MLP's hidden layers")
    hidden_layers: int = Field(1, ge=1, le=4, description="hidden layers of the MLP (tanh)")
    n_sin_waves: int = Field(10, ge=1, le=64, description="clock features sin(omega t + 2 pi j / n_sin_waves)")
    omega: float = Field(10.0, gt=0.0, le=200.0, description="angular frequency of the clock features (rad/s)")
    upright_weight: float = Field(100.0, ge=0.0, le=1e6, description="weight (1/m) of the posture loss: the back's "
                                                                    "mean squared height change (m^2) over the walk")
    state_scale: float = Field(0.05, ge=0.0, le=10.0, description="factor on the position offsets (m) and "
                                                                  "velocities (m/s) in the MLP's input")
    optimizer: OptimizerConfig = Field(default_factory=lambda: AdamConfig(learning_rate=0.01),
                                       description="optimiser of the MLP's weights, tiny-cuda-nn style")
    steps: int = Field(60, ge=1, le=10_000_000, description="training steps (one walk and its backward each)")
    log_every: int = Field(5, ge=1, le=10_000_000, description="steps between metrics records (each waits for "
                                                                "the GPU)")
    checkpoint_every: int = Field(20, ge=1, le=10_000_000, description="steps between checkpoints")

    @model_validator(mode="after")
    def _fits(self) -> "NeuralControllerConfig":
        check_memory(self, "episode_steps", self.memory_estimate(),
                     f"{self.episode_steps} steps x (the robot's state + {self.hidden_layers} x {self.hidden_features}"
                     " hidden activations) x 8 bytes")
        return self

    def memory_estimate(self) -> int:
        """Bytes this config needs: at each of the T + 1 steps the tape keeps the robot's state (16 particles'
        x and v: 64 floats), the MLP's input (n_sin_waves + 64 floats), its hidden activations before and after
        tanh (2 x hidden_layers x hidden_features), the 8 actuations and the positions the posture loss
        observes (32 floats), each with its gradient (x 2 x 4 bytes); the MLP's weights are at most 4 x 256^2
        floats with their optimiser state (x 6): ``8 (T + 1) (168 + n_sin + 2 L H) + 24 (64 + n_sin + L H) H``
        plus 1 MiB."""
        t, h, layers = self.episode_steps, self.hidden_features, self.hidden_layers
        per_step = 168 + self.n_sin_waves + 2 * layers * h
        return 8 * (t + 1) * per_step + 24 * (64 + self.n_sin_waves + layers * h) * h + 2 ** 20


class NeuralControllerProblem(FittingProblem):
    """Train the walking controller (see the module docstring)."""

    schema = NeuralControllerConfig
    description = "an MLP drives a mass-spring robot's springs to walk (layers and simulator on one tape)"

    def __init__(self, config: NeuralControllerConfig) -> None:
        super().__init__(config)
        c = config
        self.robot: Robot = build_robot(origin=(0.1, GROUND))
        r = self.robot
        self.sim = SpringSystem(r.x0, r.springs, stiffness=c.stiffness, damping=c.damping, dt=c.dt,
                                gravity=[0.0, c.gravity], ground=GROUND, actuators=r.actuators,
                                actuation_strength=c.actuation_strength)
        self.controller = NeuralController(r.n_particles, r.actuators.size, c.dt, hidden=c.hidden_features,
                                           hidden_layers=c.hidden_layers, n_sin=c.n_sin_waves, omega=c.omega,
                                           state_scale=c.state_scale, seed=c.seed)
        self.start_x = float(np.mean(r.x0[:, 0].astype(np.float64)))
        y0 = r.x0[:, 1].astype(np.float64)
        self.back = np.flatnonzero(y0 >= y0.min() + 0.1 - 1e-6)          # the back: rows 2 and 3 of particles
        top = np.flatnonzero(np.isclose(y0, y0.max()))
        self.top_corners = (top[np.argmin(r.x0[top, 0])], top[np.argmax(r.x0[top, 0])])
        self.posture = PostureLoss(self.back, y0[self.back], r.n_particles, c.upright_weight)
        self.frame_steps = [round(k * c.episode_steps / (FRAMES - 1)) for k in range(FRAMES)]
        # the untrained walk (the same in a resumed run: the MLP's initialisation is seeded)
        self.frames_before, self.distance_before = self.walk(self.frame_steps)

    # -- the runner's interface ------------------------------------------------------------------------------------
    def parameters(self) -> dict[str, Parameter]:
        """The MLP's Parameters, named ``mlp.<layer>.<weight|bias>`` (what the optimiser steps and checkpoints)."""
        return {f"mlp.{name}": p for name, p in self.controller.parameters().items()}

    def objective(self, tape: sopt.Tape, step: int) -> Any:
        t = self.config.episode_steps
        if self.config.upright_weight == 0.0:
            final = rollout(self.sim, self.sim.initial_state(), t, control=self.controller).state
            return walk_loss(final.x, self.start_x)
        result = rollout(self.sim, self.sim.initial_state(), t, control=self.controller, observe="x",
                         at=list(range(1, t + 1)))
        return [walk_loss(result.state.x, self.start_x), self.posture(result.trajectory)]

    def true_values(self) -> dict[str, Any]:
        return {}

    def fitted(self) -> dict[str, Any]:
        """``distance_before`` and ``distance_after`` (m): the centre's displacement along +x in one walk of
        the untrained and the current controller; ``min_back_height`` (m) and ``max_tilt`` (degrees): the
        current walk's posture (:meth:`posture_of`)."""
        frames, after = self.walk(list(range(self.config.episode_steps + 1)))
        return {"distance_before": self.distance_before, "distance_after": after, **self.posture_of(frames)}

    def posture_of(self, frames: np.ndarray) -> dict[str, float]:
        """The posture over a walk's frames (K, N, 2) (m): ``min_back_height``, the lowest mean height of the
        back's particles above the ground (m), and ``max_tilt``, the largest angle of the back's top edge from
        level (degrees)."""
        height = frames[:, self.back, 1].mean(axis=1) - GROUND
        left, right = frames[:, self.top_corners[0]], frames[:, self.top_corners[1]]
        tilt = np.degrees(np.arctan2(right[:, 1] - left[:, 1], right[:, 0] - left[:, 0]))
        return {"min_back_height": float(height.min()), "max_tilt": float(np.abs(tilt).max())}

    def units(self) -> dict[str, str]:
        return {"distance_before": "m", "distance_after": "m", "min_back_height": "m", "max_tilt": "degrees"}

    def progress_metrics(self) -> dict[str, float | list[float]]:
        return {}   # the loss is the (negative) distance already; a walk per metrics step would cost a rollout

    # -- walking -----------------------------------------------------------------------------------------------
    def walk(self, at: list[int]) -> tuple[np.ndarray | None, float]:
        """One walk of the current controller, forward only: the positions at steps ``at`` ((len(at), N, 2) m,
        None for no steps) and the distance (m) the centre moved along +x."""
        tape = sopt.Tape()
        with tape:
            result = rollout(self.sim, self.sim.initial_state(), self.config.episode_steps, control=self.controller,
                             observe="x" if at else None, at=at or None)
            loss = walk_loss(result.state.x, self.start_x)
        tape.submit()
        frames = None
        if at:
            frames = result.trajectory.to_numpy().reshape(len(at), self.robot.n_particles, 2).astype(np.float64)
        return frames, -loss_scalar(loss)

    # -- reporting ---------------------------------------------------------------------------------------------
    def summary(self) -> list[str]:
        fitted = self.fitted()
        upright = fitted["min_back_height"] > UPRIGHT_HEIGHT and fitted["max_tilt"] < UPRIGHT_TILT
        return [f"distance walked in {self.config.episode_steps * self.config.dt:g} s (centre, along +x): untrained "
                f"{self.distance_before:+.4f} m, trained {fitted['distance_after']:+.4f} m",
                f"posture of the trained walk: back at least {fitted['min_back_height']:.3f} m above the ground "
                f"(upright: > {UPRIGHT_HEIGHT}), tilted at most {fitted['max_tilt']:.1f} degrees (upright: < "
                f"{UPRIGHT_TILT:g}): {'upright' if upright else 'NOT upright'}"]

    def plot(self, out_dir: pathlib.Path, history: list[dict[str, Any]]) -> list[pathlib.Path]:
        from problems.neural_controller.plot import plot_distance, plot_filmstrip, write_gif
        c = self.config
        frames_after, after = self.walk(self.frame_steps)
        fine = list(range(0, c.episode_steps + 1, max(1, c.episode_steps // 40)))   # ~40 GIF frames
        gif_frames, _ = self.walk(fine)
        paths = [out_dir / "gait.png", out_dir / "gait.gif"]
        times = [t * c.dt for t in self.frame_steps]
        plot_filmstrip(paths[0], self.robot, GROUND, times, [
            (f"untrained\n{self.distance_before:+.3f} m", self.frames_before),
            (f"trained, {history[-1]['step'] if history else 0} steps\n{after:+.3f} m", frames_after)])
        write_gif(paths[1], self.robot, GROUND, gif_frames, [t * c.dt for t in fine])
        # the runner's curves.png draws the loss on a log scale, which a negative loss defeats: redrawn here
        plot_distance(out_dir / "curves.png", history, self.distance_before, title=self.name)
        return paths
