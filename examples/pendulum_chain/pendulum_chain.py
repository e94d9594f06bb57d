"""PendulumChain: a new simulator in two files and one registration (the walk-through of docs/new_simulator.md).

N point masses in 2D hang from a pivot at the origin, each joined to the one above by a stiff damped spring;
stiffness, damping and gravity may be trainable :class:`sopt.Parameter` s. The physics is
``pendulum_chain.slang`` (beside this file): ``ChainStep``, one mass's step and adjoint on sopt's shared spring
physics, and the generic driver's two entry points for it. This class only declares the state, the coefficients
and the physics file, and binds the physics struct by name. Everything else comes from
:class:`sopt.sim.Simulator`: ``step(state)`` and ``steps(state, n)`` (one or n steps in one forward and one
adjoint dispatch of sopt's generic driver, sim/fused_steps.slang), ``initial_state`` (gradients into x0, v0
Parameters), ``rollout`` with observations and a memory ``budget``, ``sopt.gradcheck``, ``named_parameters``,
and the config registry (``otype = "PendulumChain"``).

    python3 examples/pendulum_chain/pendulum_chain.py     # fits the gravity of a 4-link chain from its motion
"""

import pathlib
from typing import Any, Literal

import numpy as np
from pydantic import Field

import sopt
from sopt.config.registry import ComponentConfig, register
from sopt.sim import Simulator
from sopt.sim.fused_steps import coefficient_argument, gradient_argument
from sopt.utils.validation import check_float, check_int

SOURCE = pathlib.Path(__file__).with_name("pendulum_chain.slang")


class PendulumChainConfig(ComponentConfig):
    """A pendulum chain's constant physical parameters (examples/pendulum_chain); the link count and the
    initial angle are build arguments."""

    otype: Literal["PendulumChain"] = "PendulumChain"
    dt: float = Field(1e-3, gt=0.0, le=1.0, description="time step (s)")
    length: float = Field(0.1, gt=0.0, le=1e3, description="rest length of each link (m)")
    stiffness: float = Field(1e4, gt=0.0, le=1e9, description="spring stiffness of each link (N/m)")
    damping: float = Field(0.0, ge=0.0, le=1e6, description="spring damping of each link (N s/m)")
    mass: float = Field(1.0, gt=0.0, le=1e6, description="mass of each point (kg)")
    gravity: float = Field(9.81, ge=0.0, le=1e3, description="gravity, pointing down (m/s^2)")


@register("simulator", "PendulumChain", PendulumChainConfig)
class PendulumChain(Simulator):
    """``links`` point masses hanging from the origin, at ``angle`` (rad) from the vertical, at rest.

    State: ``x`` (links, 2) positions in m, ``v`` (links, 2) velocities in m/s. ``stiffness``, ``damping`` and
    ``gravity`` are numbers or (1,) Parameters; ``length`` and ``mass`` are constants. Explicit spring steps need
    ``dt < 2 / sqrt(4 stiffness / mass)`` (the stiffest mode); a larger dt is refused.
    """

    state_names = ("x", "v")
    physics_source = SOURCE   # ChainStep and the driver's entry points for it: step() and steps() come free

    def __init__(self, links: int, *, angle: float = 0.0, dt: float = 1e-3, length: float = 0.1,
                 stiffness: Any = 1e4, damping: Any = 0.0, mass: float = 1.0, gravity: Any = 9.81) -> None:
        super().__init__(dt)
        self.n = check_int(links, "PendulumChain links", low=1)
        angle = check_float(angle, "PendulumChain angle", low=-np.pi, high=np.pi)
        self.length = check_float(length, "PendulumChain length", low=0.0, low_inclusive=False)
        self.mass = check_float(mass, "PendulumChain mass", low=0.0, low_inclusive=False)
        self.stiffness = self._coefficient("stiffness", stiffness, (1,), low=0.0, low_inclusive=False, unit="N/m")
        self.damping = self._coefficient("damping", damping, (1,), low=0.0, unit="N s/m")
        self.gravity = self._coefficient("gravity", gravity, (1,), unit="m/s^2")
        limit = 2.0 / np.sqrt(4.0 * float(self.stiffness.numpy()[0]) / self.mass)
        if self.dt >= limit:
            raise ValueError(f"PendulumChain dt={self.dt:g} s is unstable for stiffness "
                             f"{float(self.stiffness.numpy()[0]):g} N/m and mass {self.mass:g} kg; use dt < {limit:.4g} s")
        rest = np.arange(1, self.n + 1)[:, None] * self.length * np.array([[np.sin(angle), -np.cos(angle)]])
        self._initial("x", rest, (self.n, 2), unit="m")
        self._initial("v", np.zeros((self.n, 2)), (self.n, 2), unit="m/s")

    def to_config(self) -> PendulumChainConfig:
        return PendulumChainConfig(dt=self.dt, length=self.length, stiffness=self.config_number("stiffness"),
                                   damping=self.config_number("damping"), mass=self.mass,
                                   gravity=self.config_number("gravity"))

    def physics_argument(self, gradients: bool) -> dict[str, Any]:
        """The ChainStep struct by name, for the driver's kernels (values fetched per call: a Parameter's view
        moves between an optimiser's sides); gradient targets only when ``gradients``."""
        arg = {"n": self.n, "rest_length": self.length, "mass": self.mass, "dt": self.dt}
        for name in ("stiffness", "damping", "gravity"):
            c = self.coefficient(name)
            arg[name] = coefficient_argument(c)
            arg[f"{name}_grad"] = gradient_argument(c, gradients)
        return arg


def main() -> None:
    """Fit gravity from a 4-link chain's observed swing (400 steps, memory budget of 48 states)."""
    true_chain = PendulumChain(4, angle=0.3, gravity=9.81)
    with sopt.Tape() as tape:
        observed = sopt.sim.rollout(true_chain, true_chain.initial_state(), 400, observe="x",
                                    at=range(40, 401, 40)).trajectory
    tape.submit()
    target = observed.to_numpy().reshape(tuple(observed.shape)).copy()
    g = sopt.Parameter([7.0], name="gravity")
    chain = PendulumChain(4, angle=0.3, gravity=g)
    opt = sopt.optim.Adam([g], lr=0.1)
    mse = sopt.losses.MSELoss()
    for it in range(100):
        with sopt.Tape() as tape:
            traj = sopt.sim.rollout(chain, chain.initial_state(), 400, budget=48, observe="x",
                                    at=range(40, 401, 40)).trajectory
            loss = mse(traj, target)
        tape.backward(loss)
        opt.step(tape.encoder)
        tape.submit()
    print(f"gravity {float(g.numpy()[0]):.4f} m/s^2 (true 9.81)")


if __name__ == "__main__":
    main()
