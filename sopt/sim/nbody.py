"""NBody: softened Newtonian gravity between N bodies in 2D or 3D, integrated with a kick-drift-kick leapfrog."""

from __future__ import annotations

from typing import Any, Literal, Sequence

import numpy as np
import slangpy as spy
from pydantic import Field

from sopt.autodiff import tape as tp
from sopt.config.registry import ComponentConfig, register
from sopt.runtime.device import get_device
from sopt.runtime.kernel import Function, launch
from sopt.autodiff.parameter import Parameter
from sopt.sim.simulator import Simulator
from sopt.sim.state import State
from sopt.utils.validation import as_float32_array

G_SI = 6.674e-11
"""The gravitational constant in m^3 kg^-1 s^-2 (CODATA 2018: 6.67430e-11)."""


class NBodyConfig(ComponentConfig):
    """Softened Newtonian gravity between point masses, leapfrog in time (sopt.sim.NBody); the initial positions,
    velocities and the masses are build arguments."""

    otype: Literal["NBody"] = "NBody"
    dt: float = Field(1e-2, gt=0.0, le=1e12, description="time step (s)")
    G: float = Field(G_SI, gt=0.0, le=1e12, description="gravitational constant (m^3 kg^-1 s^-2; 1 for natural "
                                                        "units)")
    softening: float = Field(0.0, ge=0.0, le=1e12, description="Plummer softening length (m)")


@register("simulator", "NBody", NBodyConfig)
class NBody(Simulator):
    """N point masses attracting each other by softened gravity (Plummer softening), in 2D or 3D.

    Forces (SI units, or any consistent units: ``G=1`` for natural units)::

        a_i(x) = G sum_{j != i} m_j (x_j - x_i) / (|x_j - x_i|^2 + eps^2)^(3/2)

    which derive from the potential energy ``U = -G sum_{i<j} m_i m_j / sqrt(|x_j - x_i|^2 + eps^2)``
    (see :meth:`energy`). Integrator, kick-drift-kick leapfrog (symplectic, second order; time reversible)::

        v_half = v + dt/2 a(x)
        x'     = x + dt v_half
        v'     = v_half + dt/2 a(x')

    The state carries ``a = a(x)`` so that a step evaluates the forces once (the first kick reuses the previous
    step's a(x')): ``x`` (N, D) positions in m, ``v`` (N, D) velocities in m/s, ``a`` (N, D) accelerations in
    m/s^2. A step is one dispatch (a thread per body gathering over all bodies, O(N^2) work); its adjoint is one
    hand-written dispatch. :meth:`initial_state` computes ``a(x0)`` (one dispatch too), so a state is always
    consistent; a state assembled by hand must hold ``a = a(x)`` for the first kick to be right.

    Args:
        x0: initial positions (N, D), D = 2 or 3, in m; a constant or a :class:`sopt.Parameter`.
        v0: initial velocities (N, D) in m/s; constant or Parameter.
        masses: (N,) per body, or (1,) / a number shared by all, in kg, > 0; constant or Parameter.
        dt: time step in s, > 0. Leapfrog has no fixed stability bound here: dt must resolve the closest
            approaches (dt well below sqrt((r^2 + eps^2)^(3/2) / (G m)) for the smallest separation r).
        G: gravitational constant, > 0, in m^3 kg^-1 s^-2 (default :data:`G_SI`); number or (1,) Parameter.
        softening: Plummer softening length eps in m, >= 0 (default 0: exact Newtonian gravity, and then no
            two bodies may start at the same position); number or (1,) Parameter.

    Gradients reach every Parameter among x0, v0, masses, G and softening. Bodies that meet with softening 0
    give infinite forces (NaN/Inf states); that is not checked during a rollout (no host reads per step).
    """

    state_names = ("x", "v", "a")

    def __init__(self, x0: Any, v0: Any, masses: Any, *, dt: float, G: Any = G_SI, softening: Any = 0.0) -> None:
        super().__init__(dt)
        shape = _body_shape(x0)
        self.n_bodies, self.dim = shape
        self._initial("x", x0, shape, unit="m")
        self._initial("v", v0, shape, unit="m/s")
        self.masses = self._coefficient("masses", masses, (self.n_bodies,), low=0.0, low_inclusive=False, unit="kg")
        self.G = self._coefficient("G", G, (1,), low=0.0, low_inclusive=False, unit="m^3 kg^-1 s^-2")
        self.softening = self._coefficient("softening", softening, (1,), low=0.0, unit="m")
        if float(self.softening.numpy()[0]) == 0.0:
            _check_distinct(self._initials["x"].numpy())
        device = get_device()
        self._zero_a = spy.Tensor.zeros(device, shape, "float")   # the "previous a" of the initial state (h = 0)
        self._scratch = [spy.Tensor.zeros(device, shape, "float") for _ in range(3)]  # unread gradients
        self._step_fn = Function("sim/nbody", "nbody_step", self.dim)
        self._step_bwd_fn = Function("sim/nbody", "nbody_step_bwd", self.dim)

    def to_config(self) -> NBodyConfig:
        """The config of this system (x0, v0, masses are build arguments: ``from_config(config, x0, v0, masses)``)."""
        return NBodyConfig(dt=self.dt, G=self.config_number("G"), softening=self.config_number("softening"))

    # -- states ------------------------------------------------------------------------------------------------
    def state_shapes(self) -> dict[str, tuple[int, ...]]:
        shape = (self.n_bodies, self.dim)
        return {"x": shape, "v": shape, "a": shape}

    def initial_state(self) -> State:
        """``x = x0``, ``v = v0`` and ``a = a(x0)`` as new arrays (one dispatch); on a tape, gradients flow into
        x0, v0, masses, G and softening where they are Parameters."""
        x0, v0 = self._initials["x"], self._initials["v"]
        out = self.new_state()
        dummy = _StepInput(self._zero_a, self._scratch[2])
        return self._advance("NBody.initial_state", x0, v0, dummy, 0.0, out, add_grads=[])

    def step(self, state: State, control: spy.Tensor | None = None) -> State:
        """The state one ``dt`` later (new arrays): one leapfrog step (see the class docstring), one dispatch."""
        self.check_no_control(control)
        state = self.check_state(state, "NBody.step")
        arrays = [state[name] for name in self.state_names]
        ins = [_StepInput(t, t.grad if t.grad_out is not None else s) for t, s in zip(arrays, self._scratch)]
        return self._advance("NBody.step", *ins, self.dt, self.new_state(), add_grads=arrays, reads=arrays)

    def _advance(self, name: str, x: Any, v: Any, a: Any, h: float, out: State, add_grads: list[spy.Tensor],
                 reads: Sequence[spy.Tensor] = ()) -> State:
        """Record the step kernel advancing (x, v, a) (each with ``.values`` and ``.grad``) by ``h`` into ``out``
        (h = 0 for the initial state: x' = x, v' = v, a' = a(x)), and its adjoint."""
        n = self.n_bodies
        physical = (self.masses, self.G, self.softening)
        stride = 0 if self.masses.shared else 1

        def forward(enc: spy.CommandEncoder) -> None:
            launch(self._step_fn, enc, i=spy.grid((n,)), n=n, h=h, x=x.values, v=v.values, a=a.values,
                   masses=self.masses.values, mass_stride=stride, gravity=self.G.values,
                   softening=self.softening.values, x_out=out.x, v_out=out.v, a_out=out.a)

        def backward(enc: spy.CommandEncoder, redirect: dict[int, spy.Tensor]) -> None:
            launch(self._step_bwd_fn, enc, i=spy.grid((n,)), n=n, h=h, x=x.values, v=v.values, a=a.values,
                   masses=self.masses.values, mass_stride=stride, gravity=self.G.values,
                   softening=self.softening.values, gx_out=out.x.grad, gv_out=out.v.grad, ga_out=out.a.grad,
                   gx=x.grad, gv=v.grad, ga=a.grad, grad_masses=self.masses.grad, grad_gravity=self.G.grad,
                   grad_softening=self.softening.grad)

        params = [c.parameter for c in (x, v, *physical) if isinstance(c.parameter, Parameter)]
        tp.record(name, forward, backward, reads=reads, writes=out.arrays(), add_grads=add_grads, params=params)
        return out

    # -- diagnostics (host, float64; they wait for the GPU) ----------------------------------------------------
    def momentum(self, state: State) -> np.ndarray:
        """Total momentum sum_i m_i v_i (D,), in kg m/s."""
        return (self._mass_array()[:, None] * _host(state.v)).sum(axis=0)

    def energy(self, state: State) -> float:
        """Total energy in J: sum_i m_i |v_i|^2 / 2 - G sum_{i<j} m_i m_j / sqrt(|x_j - x_i|^2 + eps^2)."""
        m, x, v = self._mass_array(), _host(state.x), _host(state.v)
        g, eps = float(self.G.numpy()[0]), float(self.softening.numpy()[0])
        i, j = np.triu_indices(self.n_bodies, 1)
        d = np.sqrt(((x[j] - x[i]) ** 2).sum(axis=1) + eps**2)
        return float(0.5 * (m * (v**2).sum(axis=1)).sum() - g * (m[i] * m[j] / d).sum())

    def _mass_array(self) -> np.ndarray:
        return np.broadcast_to(self.masses.numpy(), (self.n_bodies,))


class _StepInput:
    """A state array fed to the step kernel: its values and the gradient the adjoint adds into (the part of
    Coefficient's interface :meth:`NBody._advance` uses, so initial-state Coefficients and state arrays mix)."""

    parameter = None

    def __init__(self, values: spy.Tensor, grad: spy.Tensor) -> None:
        self.values, self.grad = values, grad


def _host(t: spy.Tensor) -> np.ndarray:
    return t.to_numpy().reshape(tuple(t.shape)).astype(np.float64)


def _body_shape(x0: Any) -> tuple[int, int]:
    """(N, D) of the initial positions, else ValueError: a 2-D array with D = 2 or 3 and N >= 1."""
    shape = x0.shape if isinstance(x0, Parameter) else as_float32_array(x0, "NBody x0").shape
    if len(shape) != 2 or shape[1] not in (2, 3):
        raise ValueError(f"NBody x0 must have shape (N, 2) or (N, 3) (N bodies in 2D or 3D), got {tuple(shape)}")
    return int(shape[0]), int(shape[1])


def _check_distinct(x0: np.ndarray) -> None:
    """ValueError naming two bodies that start at the same position (infinite force without softening)."""
    order = np.lexsort(x0.T[::-1])
    same = np.flatnonzero((x0[order[1:]] == x0[order[:-1]]).all(axis=1))
    if same.size:
        i, j = sorted((int(order[same[0]]), int(order[same[0] + 1])))
        raise ValueError(f"NBody x0: bodies {i} and {j} start at the same position {x0[i].tolist()} with softening "
                         "0, where their attraction is infinite; separate them or give softening > 0")
