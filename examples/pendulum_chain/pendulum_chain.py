"""PendulumChain: a new simulator in two files and one registration (the walk-through of docs/new_simulator.md).

N point masses in 2D hang from a pivot at the origin, each joined to the one above by a stiff damped spring;
stiffness, damping and gravity may be trainable :class:`sopt.Parameter` s. The physics is
``pendulum_chain.slang`` (beside this file), which imports sopt's shared spring physics; this class only
declares the state and coefficients and records one step with its adjoint. Everything else comes from
:class:`sopt.sim.Simulator`: ``initial_state`` (gradients into x0, v0 Parameters), ``rollout`` with observations
and a memory ``budget``, ``sopt.gradcheck``, ``named_parameters``, and the config registry (``otype =
"PendulumChain"``).

    python3 examples/pendulum_chain/pendulum_chain.py     # fits the gravity of a 4-link chain from its motion
"""

import pathlib
from typing import Any, Literal

import numpy as np
import slangpy as spy
from pydantic import Field

import sopt
from sopt import device as dev
from sopt import tape as tp
from sopt.config.registry import ComponentConfig, register
from sopt.kernel import Function, launch
from sopt.sim import Simulator, State
from sopt.validation import check_float, check_int

SOURCE = pathlib.Path(__file__).with_name("pendulum_chain.slang")
_STEP = Function(SOURCE, "chain_step")         # declared; loaded and compiled at the first launch
_ADJOINT = Function(SOURCE, "chain_adjoint")


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
        self._no_grad = spy.Tensor.zeros(dev.get_device(), (1, 2), "float")

    def to_config(self) -> PendulumChainConfig:
        return PendulumChainConfig(dt=self.dt, length=self.length, stiffness=self.config_number("stiffness"),
                                   damping=self.config_number("damping"), mass=self.mass,
                                   gravity=self.config_number("gravity"))

    def _coefficients_arg(self) -> dict[str, Any]:
        """The ChainCoefficients struct (a Parameter's view can move between an optimiser's sides: fetch per call)."""
        return {"stiffness": self.stiffness.values, "damping": self.damping.values, "gravity": self.gravity.values,
                "rest_length": self.length, "mass": self.mass, "dt": self.dt}

    def step(self, state: State, control: spy.Tensor | None = None) -> State:
        """The state ``dt`` later: one dispatch now, its adjoint (one dispatch) at ``tape.backward``."""
        self.check_no_control(control)
        state = self.check_state(state, "PendulumChain.step")
        out = self.new_state()
        grid = spy.grid((self.n,))
        tape = tp.current_tape()
        want_state = tape is not None and (tape.requires_grad(state.x) or tape.requires_grad(state.v))

        def forward(enc: spy.CommandEncoder) -> None:
            launch(_STEP, enc, grid, self.n, self._coefficients_arg(), state.x, state.v, out.x, out.v)

        def backward(enc: spy.CommandEncoder, redirect: dict[int, spy.Tensor]) -> None:
            launch(_ADJOINT, enc, grid, self.n, self._coefficients_arg(), state.x, state.v, out.x.grad,
                   out.v.grad, int(want_state), state.x.grad if want_state else self._no_grad,
                   state.v.grad if want_state else self._no_grad,
                   {"stiffness": self.stiffness.grad, "damping": self.damping.grad, "gravity": self.gravity.grad})

        tp.record("PendulumChain.step", forward, backward, reads=[state.x, state.v], writes=[out.x, out.v],
                  add_grads=[state.x, state.v], params=self.parameters())
        return out


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
