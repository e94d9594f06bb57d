"""SpringSystem: point masses joined by damped springs, some of them actuated, in 2D or 3D (kernels in
slang_lib/sim/spring_system.slang).

Physics (SI units; axis 1 is up). Particle i has position x_i (m), velocity v_i (m/s), mass m_i (kg). Spring s
joins particles a and b with stiffness k (N/m), damping c (N s/m, along the spring) and rest length l0 (m);
an actuated spring's rest length follows a per-step control u (DiffTaichi's mass_spring)::

    L = l0 (1 + strength u)                      (L = l0 for a passive spring)
    d = (x_b - x_a) / l,  l = |x_b - x_a|
    f = (k (l - L) + c (v_b - v_a) . d) d        (force on a; -f on b)

Semi-implicit (symplectic) Euler with F_i the sum of particle i's spring forces and g the gravity vector::

    v' = v + dt (F / m + g),   x' = x + dt v'

Pinned particles keep their position and have zero velocity after every step (x' = x, v' = 0; a nonzero v0
of a pinned particle only enters the first step's damping forces). Ground contact (``ground`` = h, optional):
a free particle whose x'[1] falls below h hit the ground during the step and sticks there (DiffTaichi's
mass_spring): with the time of impact toi = (h - x[1]) / v'[1] (in [0, dt]; 0 for a particle that started
below h), x' = x + toi v' with x'[1] = h, and v' = 0. This is differentiable except on the set where
x'[1] = h exactly (a particle resting at x[1] = h gets the one-sided derivative from above), and the gradient
flows through toi (into the horizontal position of the impact).

GPU work: the forward step is one dispatch (one thread per particle gathering over its springs from a CSR
adjacency built once on the host: no float atomics). The adjoint is two dispatches without ground (per
spring, then per particle) and three with it (a per-particle pass first, for the contact). ``steps(state, n)``
runs n steps in one forward and one adjoint dispatch, each a single thread group looping over the steps
(sopt/sim/spring_system_steps.py; systems without actuators).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Sequence

import numpy as np
import slangpy as spy
from pydantic import Field

from sopt.autodiff import tape as tp
from sopt.config.registry import ComponentConfig, register
from sopt.runtime.device import get_device
from sopt.runtime.kernel import Function, dummy, launch
from sopt.autodiff.parameter import Parameter
from sopt.sim.coefficient import Coefficient
from sopt.sim.simulator import Simulator
from sopt.sim.spring_system_steps import FusedSpringSteps
from sopt.sim.state import State
from sopt.utils.validation import as_float32_array, as_real_array, check_choice, check_float, check_int

_MODULE = "sim/spring_system"


def _host_values(value: Any, name: str) -> np.ndarray:
    """A coefficient's initial values as float64 on the host (a Parameter's current values)."""
    if isinstance(value, Parameter):
        return np.asarray(value.numpy(), np.float64)
    return as_float32_array(value, name).astype(np.float64)


def _index_array(value: Any, name: str, ndim: int) -> np.ndarray:
    """``value`` as an int64 array of ``ndim`` dimensions holding integers (not bools, not fractional floats)."""
    raw = np.asarray(value)
    if raw.dtype.kind == "b":
        raise ValueError(f"{name} must hold integer indices, got booleans")
    array = as_real_array(value, name)
    if array.ndim != ndim:
        raise ValueError(f"{name} must be {ndim}-D, got shape {tuple(array.shape)}")
    if array.size and not np.array_equal(array, np.round(array)):
        bad = array.ravel()[np.flatnonzero(array.ravel() != np.round(array.ravel()))[0]]
        raise ValueError(f"{name} must hold integer indices, got {float(bad):g}")
    return array.astype(np.int64)


# The largest system SpringSystem.steps runs in its fused kernels (see steps): in one thread group, and in
# several groups with a grid barrier (CUDA)
FUSED_MAX_PARTICLES = 2048
FUSED_GRID_MAX_PARTICLES = 1 << 17


class SpringSystemConfig(ComponentConfig):
    """A damped mass-spring network (sopt.sim.SpringSystem) with shared coefficients; the initial positions, the
    springs and the rest of the geometry (v0, rest_length, pinned, actuators) are build arguments."""

    otype: Literal["SpringSystem"] = "SpringSystem"
    dt: float = Field(1e-3, gt=0.0, le=10.0, description="time step (s; refused when certainly unstable)")
    stiffness: float = Field(100.0, ge=0.0, le=1e12, description="spring stiffness k (N/m)")
    mass: float = Field(1.0, gt=0.0, le=1e12, description="mass of every particle (kg)")
    damping: float = Field(0.0, ge=0.0, le=1e12, description="spring damping c (N s/m)")
    gravity: Annotated[list[Annotated[float, Field(ge=-1e6, le=1e6)]], Field(min_length=2, max_length=3)] | None = Field(
        None, description="acceleration per axis, axis 1 up (m/s^2; None: 9.81 down)")
    ground: float | None = Field(None, ge=-1e9, le=1e9, description="height of the ground plane (m; None: none)")
    actuation_strength: float = Field(1.0, ge=-1e6, le=1e6, description="rest length factor per control unit: "
                                                                          "L = l0 (1 + actuation_strength u)")


@register("simulator", "SpringSystem", SpringSystemConfig)
class SpringSystem(Simulator):
    """Damped mass-spring network with optional actuators, pinned particles and ground contact (module
    docstring: equations and units).

    Args:
        x0: initial positions, (N, dim) with dim 2 or 3 (m); a constant or a Parameter.
        springs: (S, 2) particle index pairs, S >= 1; self-springs and out-of-range indices are rejected, as
            are springs whose ends coincide in x0 (no direction).
        stiffness: k (N/m), >= 0, shared (a number / shape (1,)) or per spring (S,).
        dt: time step (s), > 0. Rejected when certainly unstable for the initial coefficient values: a
            displacement pattern (one particle along its stiffest spring direction, or a spring's two ends
            apart) whose mode would grow under symplectic Euler, dt^2 w^2 + 2 dt gamma >= 4. Passing this
            necessary test does not prove stability (a dt up to ~1.4x the true limit can pass).
        v0: initial velocities (N, dim) (m/s), default zero.
        mass: m (kg), > 0, shared or per particle (N,). Default 1.
        damping: c (N s/m), >= 0, shared or per spring. Default 0.
        rest_length: l0 (m), >= 0, shared or per spring; default: the spring lengths in x0 (a constant).
        gravity: g, a (dim,) vector (m/s^2), default (0, -9.81[, 0]).
        pinned: a boolean mask (N,) or a list of particle indices; default none.
        ground: height h (m) of the ground plane x[1] = h, or None (no ground).
        actuators: (A,) distinct spring indices whose rest length the control drives; default none.
        actuation_strength: L = l0 (1 + actuation_strength u) (1 / control unit). Default 1.

    Every coefficient (stiffness, damping, rest_length, mass, gravity, x0, v0) may be a
    :class:`sopt.Parameter` (trainable) or a constant.

    State: ``x`` (N, dim) positions and ``v`` (N, dim) velocities. :meth:`step` ``(state, control)`` with
    ``control`` (A,) when the system has actuators.
    """

    state_names = ("x", "v")

    def __init__(self, x0: Any, springs: Any, *, stiffness: Any, dt: float, v0: Any = None, mass: Any = 1.0,
                 damping: Any = 0.0, rest_length: Any = None, gravity: Any = None, pinned: Any = None,
                 ground: float | None = None, actuators: Any = None, actuation_strength: float = 1.0) -> None:
        super().__init__(dt)
        who = type(self).__name__
        # -- everything checked on the host before any GPU work ----------------------------------------------
        x0_host = _host_values(x0, f"{who} x0")
        if x0_host.ndim != 2 or x0_host.shape[1] not in (2, 3):
            raise ValueError(f"{who} x0 must have shape (N, 2) or (N, 3), got {tuple(x0_host.shape)}")
        n, dim = x0_host.shape
        self.n_particles, self.dim = int(n), int(dim)
        pairs = _index_array(springs, f"{who} springs", 2)
        if pairs.shape[1:] != (2,) or pairs.shape[0] < 1:
            raise ValueError(f"{who} springs must have shape (S, 2) with S >= 1, got {tuple(pairs.shape)}")
        bad = np.flatnonzero(((pairs < 0) | (pairs >= n)).any(axis=1))
        if bad.size:
            raise ValueError(f"{who} springs[{bad[0]}] = {pairs[bad[0]].tolist()} has an index out of range "
                             f"[0, {n}) ({bad.size} spring(s) out of range)")
        bad = np.flatnonzero(pairs[:, 0] == pairs[:, 1])
        if bad.size:
            raise ValueError(f"{who} springs[{bad[0]}] = {pairs[bad[0]].tolist()} joins a particle to itself")
        lengths = np.linalg.norm(x0_host[pairs[:, 1]] - x0_host[pairs[:, 0]], axis=1)
        bad = np.flatnonzero(lengths == 0)
        if bad.size:
            raise ValueError(f"{who} springs[{bad[0]}] = {pairs[bad[0]].tolist()} joins particles that coincide "
                             "in x0 (length 0: the spring has no direction)")
        self.n_springs = s_count = int(pairs.shape[0])
        self.springs = pairs.copy()
        self.pinned_mask = self._pinned_mask(pinned, n, who)
        self.ground = None if ground is None else check_float(ground, f"{who} ground")
        self.actuators = self._actuator_indices(actuators, s_count, who)
        self.actuation_strength = check_float(actuation_strength, f"{who} actuation_strength")
        if gravity is None:
            gravity = [0.0, -9.81] + [0.0] * (dim - 2)
        if rest_length is None:
            rest_length = lengths.astype(np.float32)

        # -- coefficients (each checks its shape and range before its upload) --------------------------------
        self._x0 = self._initial("x", x0, (n, dim))
        self._v0 = self._initial("v", np.zeros((n, dim), np.float32) if v0 is None else v0, (n, dim))
        self.mass = self._coefficient("mass", mass, (n,), low=0.0, low_inclusive=False, unit="kg")
        self.stiffness = self._coefficient("stiffness", stiffness, (s_count,), low=0.0, unit="N/m")
        self.damping = self._coefficient("damping", damping, (s_count,), low=0.0, unit="N s/m")
        self.rest_length = self._coefficient("rest_length", rest_length, (s_count,), low=0.0, unit="m")
        self.gravity = self._coefficient("gravity", gravity, (dim,), shareable=False, unit="m/s^2")
        self._check_stability(_host_values(stiffness, f"{who} stiffness"), _host_values(damping, f"{who} damping"),
                             _host_values(mass, f"{who} mass"), x0_host)

        # -- topology on the device (int32) ------------------------------------------------------------------
        device = get_device()
        ordered = np.sort(pairs, axis=1)   # a < b: the gather tells the ends apart by index order
        ends = np.concatenate([ordered[:, 0], ordered[:, 1]])
        others = np.concatenate([ordered[:, 1], ordered[:, 0]])
        spring_of = np.concatenate([np.arange(s_count), np.arange(s_count)])
        order = np.argsort(ends, kind="stable")
        offsets = np.concatenate([[0], np.cumsum(np.bincount(ends, minlength=n))])
        actuator_of = np.full(s_count, -1, np.int64)
        actuator_of[self.actuators] = np.arange(self.actuators.size)

        # host copies (int32) of the adjacency: the fused multi-step kernel packs them into one buffer
        self.topology_host = {
            "springs": ordered.astype(np.int32),
            "offsets": offsets.astype(np.int32),
            "incident": np.stack([spring_of[order], others[order]], axis=1).astype(np.int32),
            "pinned": self.pinned_mask.astype(np.int32),
            "actuator": actuator_of.astype(np.int32),
        }
        self._topology = {name: spy.Tensor.from_numpy(device, np.ascontiguousarray(a))
                          for name, a in self.topology_host.items()}
        self._step_fn = Function(_MODULE, "spring_step", dim)
        self._adjoint_fns = (Function(_MODULE, "spring_adjoint_prepass", dim), Function(_MODULE, "spring_adjoint", dim),
                             Function(_MODULE, "spring_adjoint_gather", dim))
        self._spring_bar: spy.Tensor | None = None   # (S, 3 dim) adjoint scratch, reused every step
        self._force_bar: spy.Tensor | None = None    # (N, dim) dL/dF scratch (ground only)
        self._fused: FusedSpringSteps | None = None  # the multi-step kernels, made at the first steps()

    def to_config(self) -> SpringSystemConfig:
        """The config of this system (x0, springs and the geometry are build arguments: ``from_config(config, x0,
        springs, pinned=..., rest_length=..., ...)``); ValueError for a per-particle or per-spring coefficient."""
        return SpringSystemConfig(dt=self.dt, stiffness=self.config_number("stiffness"),
                                  mass=self.config_number("mass"), damping=self.config_number("damping"),
                                  gravity=self.config_vector("gravity", self.dim), ground=self.ground,
                                  actuation_strength=self.actuation_strength)

    # -- construction helpers ----------------------------------------------------------------------------------
    @staticmethod
    def _pinned_mask(pinned: Any, n: int, who: str) -> np.ndarray:
        if pinned is None:
            return np.zeros(n, bool)
        raw = np.asarray(pinned)
        if raw.dtype.kind == "b":
            if raw.shape != (n,):
                raise ValueError(f"{who} pinned: a boolean mask must have shape ({n},), got {raw.shape}")
            return raw.copy()
        if raw.size == 0:
            return np.zeros(n, bool)
        index = _index_array(np.atleast_1d(pinned), f"{who} pinned", 1)
        bad = index[(index < 0) | (index >= n)]
        if bad.size:
            raise ValueError(f"{who} pinned index {int(bad[0])} is out of range [0, {n})")
        mask = np.zeros(n, bool)
        mask[index] = True
        return mask

    @staticmethod
    def _actuator_indices(actuators: Any, s_count: int, who: str) -> np.ndarray:
        if actuators is None or np.asarray(actuators).size == 0:
            return np.zeros(0, np.int64)
        index = _index_array(np.atleast_1d(actuators), f"{who} actuators", 1)
        bad = index[(index < 0) | (index >= s_count)]
        if bad.size:
            raise ValueError(f"{who} actuators: spring index {int(bad[0])} is out of range [0, {s_count})")
        if np.unique(index).size != index.size:
            raise ValueError(f"{who} actuators must be distinct springs, got {index.tolist()}")
        return index

    def _check_stability(self, stiffness: np.ndarray, damping: np.ndarray, mass: np.ndarray, x: np.ndarray) -> None:
        """ValueError when ``dt`` is certainly unstable for these (host) values.

        Symplectic Euler on one mode x'' = -w^2 x - gamma x' is stable iff dt^2 w^2 + 2 dt gamma < 4. For any
        displacement pattern u, u.K u / u.M u <= the largest w^2 (likewise for damping), so a pattern for which
        that sum reaches 4 shows an unstable mode. Patterns tried: one free particle moved along the stiffest
        direction of its springs, and the two free ends of a spring moved apart (other springs left out: a
        lower bound). The test is necessary, not sufficient: a dt that passes can still be up to ~1.4x too large.
        """
        n, s_count = self.n_particles, self.n_springs
        k = np.broadcast_to(stiffness.reshape(-1), (s_count,))
        c = np.broadcast_to(damping.reshape(-1), (s_count,))
        m = np.broadcast_to(mass.reshape(-1), (n,))
        a, b = self.springs[:, 0], self.springs[:, 1]
        d = x[b] - x[a]
        d = d / np.linalg.norm(d, axis=1, keepdims=True)
        outer = d[:, :, None] * d[:, None, :]
        stiff = np.zeros((n, self.dim, self.dim))
        damp = np.zeros((n, self.dim, self.dim))
        for end in (a, b):
            np.add.at(stiff, end, k[:, None, None] * outer)
            np.add.at(damp, end, c[:, None, None] * outer)
        _, vecs = np.linalg.eigh(stiff)
        e = vecs[:, :, -1]                                   # stiffest direction per particle
        w2 = np.einsum("ni,nij,nj->n", e, stiff, e) / m
        gamma = np.einsum("ni,nij,nj->n", e, damp, e) / m
        free = ~self.pinned_mask
        both = free[a] & free[b]
        w2 = np.concatenate([w2[free], (4 * k / (m[a] + m[b]))[both]])
        gamma = np.concatenate([gamma[free], (4 * c / (m[a] + m[b]))[both]])
        growth = self.dt ** 2 * w2 + 2 * self.dt * gamma
        if growth.size and growth.max() >= 4:
            worst = int(np.argmax(growth))
            limit = float(np.min(4 / (gamma + np.sqrt(gamma ** 2 + 4 * w2))))   # the root of dt^2 w^2 + 2 dt gamma = 4
            raise ValueError(f"{type(self).__name__} dt = {self.dt:g} s is unstable for these stiffness, damping and "
                             f"masses (a mode with w^2 = {w2[worst]:.4g} 1/s^2 and damping rate {gamma[worst]:.4g} "
                             f"1/s grows: dt^2 w^2 + 2 dt gamma = {growth[worst]:.4g} >= 4); dt must be below "
                             f"{limit:.4g} s")

    # -- builders ----------------------------------------------------------------------------------------------
    @classmethod
    def chain(cls, n: int, length: float, *, dim: int = 2, origin: Sequence[float] | None = None,
              direction: Sequence[float] | None = None, pinned: Any = (0,), **kwargs: Any) -> "SpringSystem":
        """A straight line of ``n`` >= 2 particles, ``length`` (m) from first to last, from ``origin`` (default 0)
        along ``direction`` (normalised; default +x), neighbours joined by n - 1 springs; the first particle is
        pinned unless ``pinned`` says otherwise. Other arguments as the constructor (stiffness, dt, ...)."""
        n = check_int(n, "SpringSystem.chain n", low=2)
        length = check_float(length, "SpringSystem.chain length", low=0.0, low_inclusive=False)
        if dim not in (2, 3):
            raise ValueError(f"SpringSystem.chain dim must be 2 or 3, got {dim!r}")
        start = np.zeros(dim) if origin is None else as_float32_array(origin, "SpringSystem.chain origin", (dim,))
        axis = np.eye(dim)[0] if direction is None else as_float32_array(direction, "SpringSystem.chain direction",
                                                                           (dim,)).astype(np.float64)
        norm = float(np.linalg.norm(axis))
        if norm == 0:
            raise ValueError("SpringSystem.chain direction must be a nonzero vector")
        x0 = start + np.linspace(0.0, length, n)[:, None] * (axis / norm)
        springs = np.stack([np.arange(n - 1), np.arange(1, n)], axis=1)
        return cls(x0.astype(np.float32), springs, pinned=pinned, **kwargs)

    @classmethod
    def cloth(cls, nx: int, ny: int, spacing: float, dim: int = 3, *, origin: Sequence[float] | None = None,
              pin: str = "none", **kwargs: Any) -> "SpringSystem":
        """A vertical ``nx`` x ``ny`` grid in the x-y plane (z = 0 in 3D), ``spacing`` (m) apart, particle
        r * nx + c at origin + (c, r) spacing (row ny - 1 on top). Structural springs join horizontal and
        vertical neighbours, shear springs both diagonals of every cell: (nx-1) ny + nx (ny-1) + 2 (nx-1)(ny-1)
        springs (3906 for 32 x 32). ``pin``: "none", "top_corners" or "top_row". Other arguments as the
        constructor."""
        nx = check_int(nx, "SpringSystem.cloth nx", low=2)
        ny = check_int(ny, "SpringSystem.cloth ny", low=2)
        spacing = check_float(spacing, "SpringSystem.cloth spacing", low=0.0, low_inclusive=False)
        if dim not in (2, 3):
            raise ValueError(f"SpringSystem.cloth dim must be 2 or 3, got {dim!r}")
        check_choice(pin, "SpringSystem.cloth pin", ("none", "top_corners", "top_row"))
        if pin != "none" and "pinned" in kwargs:
            raise ValueError(f"SpringSystem.cloth: give pin={pin!r} or pinned, not both")
        start = np.zeros(dim) if origin is None else as_float32_array(origin, "SpringSystem.cloth origin", (dim,))
        r, c = np.divmod(np.arange(nx * ny), nx)
        x0 = np.zeros((nx * ny, dim))
        x0[:, 0], x0[:, 1] = c * spacing, r * spacing
        x0 += start
        idx = np.arange(nx * ny).reshape(ny, nx)
        springs = np.concatenate([
            np.stack([idx[:, :-1].ravel(), idx[:, 1:].ravel()], 1),        # horizontal
            np.stack([idx[:-1, :].ravel(), idx[1:, :].ravel()], 1),        # vertical
            np.stack([idx[:-1, :-1].ravel(), idx[1:, 1:].ravel()], 1),     # shear /
            np.stack([idx[:-1, 1:].ravel(), idx[1:, :-1].ravel()], 1),     # shear \
        ])
        if pin == "top_row":
            kwargs["pinned"] = idx[-1].tolist()
        elif pin == "top_corners":
            kwargs["pinned"] = [int(idx[-1, 0]), int(idx[-1, -1])]
        return cls(x0.astype(np.float32), springs, **kwargs)

    # -- stepping ----------------------------------------------------------------------------------------------
    @property
    def n_actuators(self) -> int:
        return int(self.actuators.size)

    def _check_control(self, control: Any) -> spy.Tensor:
        who = f"{type(self).__name__}.step control"
        a = self.n_actuators
        if a == 0:
            if control is not None:
                raise ValueError(f"{who}: this system has no actuators, got a control")
            return dummy(1)
        if control is None:
            raise ValueError(f"{who}: this system has {a} actuator(s); pass a ({a},) control")
        if isinstance(control, spy.Tensor):
            if tuple(control.shape) != (a,) or str(control.dtype.full_name) != "float":
                raise ValueError(f"{who} has shape {tuple(control.shape)} and dtype {control.dtype.full_name}, "
                                 f"expected float32 of shape ({a},)")
            return control
        # a host array: uploaded per call (a constant; pass a tensor to avoid the upload)
        return spy.Tensor.from_numpy(get_device(), as_float32_array(control, who, (a,)))

    def _coefficient_args(self) -> dict[str, Any]:
        """The SpringCoefficients struct (values fetched now: a Parameter's view moves between steps)."""
        return {
            "stiffness": self.stiffness.values, "stiffness_stride": int(not self.stiffness.shared),
            "damping": self.damping.values, "damping_stride": int(not self.damping.shared),
            "rest_length": self.rest_length.values, "rest_length_stride": int(not self.rest_length.shared),
            "mass": self.mass.values, "mass_stride": int(not self.mass.shared),
            "gravity": self.gravity.values,
            "strength": self.actuation_strength, "dt": self.dt,
            "ground": 0.0 if self.ground is None else self.ground, "has_ground": int(self.ground is not None),
        }

    @staticmethod
    def _mode(c: Coefficient) -> int:
        return 0 if not c.trainable else (2 if c.shared else 1)

    def _gradient_args(self, control: spy.Tensor, want_control: bool) -> dict[str, Any]:
        """The SpringGradients struct: where each trainable coefficient's gradient goes."""
        args: dict[str, Any] = {}
        for name in ("stiffness", "damping", "rest_length", "mass"):
            c = self._coefficients[name]
            args[name], args[f"{name}_mode"] = c.grad, self._mode(c)
        args["gravity"], args["gravity_mode"] = self.gravity.grad, 2 if self.gravity.trainable else 0
        args["control"] = control.grad if want_control else dummy(1)
        args["control_mode"] = int(want_control)
        return args

    def _scratch(self) -> tuple[spy.Tensor, spy.Tensor]:
        if self._spring_bar is None:
            device = get_device()
            self._spring_bar = spy.Tensor.zeros(device, (self.n_springs, 3 * self.dim), "float")
            self._force_bar = spy.Tensor.zeros(device, (self.n_particles, self.dim), "float")
        return self._spring_bar, self._force_bar

    def step(self, state: State, control: Any = None) -> State:
        """The state one ``dt`` later (new arrays). ``control``: (A,) float32 actuations (a tensor, e.g. an
        earlier call's output, whose gradient then flows; or a host array, uploaded as a constant), required
        exactly when the system has actuators. Forward: one dispatch; adjoint: two (three with ground)."""
        state = self.check_state(state, f"{type(self).__name__}.step")
        control_t = self._check_control(control)
        x, v = state.x, state.v
        out = self.new_state()
        tape = tp.current_tape()
        want_x = tape is not None and x.grad_out is not None and tape.requires_grad(x)
        want_v = tape is not None and v.grad_out is not None and tape.requires_grad(v)
        want_control = (self.n_actuators > 0 and control_t.grad_out is not None and tape is not None
                        and tape.requires_grad(control_t))
        n, s_count = self.n_particles, self.n_springs
        topology = self._topology

        def forward(enc: spy.CommandEncoder) -> None:
            launch(self._step_fn, enc, i=spy.grid((n,)), top=topology, co=self._coefficient_args(), control=control_t,
                   x=x, v=v, x_out=out.x, v_out=out.v)

        def backward(enc: spy.CommandEncoder, redirect: dict[int, spy.Tensor]) -> None:
            spring_bar, force_bar = self._scratch()
            co = self._coefficient_args()
            grads = self._gradient_args(control_t, want_control)
            sg = {"x": x.grad if want_x else dummy(2), "want_x": int(want_x),
                  "v": v.grad if want_v else dummy(2), "want_v": int(want_v)}
            gx, gv = out.x.grad, out.v.grad
            prepass_fn, spring_fn, gather_fn = self._adjoint_fns
            if self.ground is not None:
                launch(prepass_fn, enc, i=spy.grid((n,)), top=topology, co=co, control=control_t, x=x, v=v,
                       x_out_grad=gx, v_out_grad=gv, force_bar=force_bar, sg=sg, gr=grads)
                launch(spring_fn, enc, s=spy.grid((s_count,)), top=topology, co=co, control=control_t, x=x, v=v,
                       x_out_grad=gx, v_out_grad=gv, force_bar=force_bar, force_bar_ready=1,
                       spring_bar=spring_bar, write_force=0, gr=grads)
                launch(gather_fn, enc, i=spy.grid((n,)), top=topology, co=co, x_out_grad=gx, v_out_grad=gv,
                       spring_bar=spring_bar, local_done=1, sg=sg, gr=grads)
            else:
                write_force = int(self.mass.trainable)
                launch(spring_fn, enc, s=spy.grid((s_count,)), top=topology, co=co, control=control_t, x=x, v=v,
                       x_out_grad=gx, v_out_grad=gv, force_bar=dummy(2), force_bar_ready=0,
                       spring_bar=spring_bar, write_force=write_force, gr=grads)
                launch(gather_fn, enc, i=spy.grid((n,)), top=topology, co=co, x_out_grad=gx, v_out_grad=gv,
                       spring_bar=spring_bar, local_done=0, sg=sg, gr=grads)

        params = [c.parameter for c in self._coefficients.values() if c.parameter is not None]
        add_grads = [t for t, want in ((x, want_x), (v, want_v), (control_t, want_control)) if want]
        reads = [x, v] + ([control_t] if self.n_actuators else [])
        tp.record(f"{type(self).__name__}.step", forward, backward, reads=reads, writes=out.arrays(),
                  add_grads=add_grads, params=list({id(p): p for p in params}.values()))
        return out

    @property
    def fused_steps(self) -> FusedSpringSteps:
        """The fused multi-step runner :meth:`steps` uses (its ``threads`` and ``shared`` pick the kernel variant)."""
        if self._fused is None:
            self._fused = FusedSpringSteps(self)
        return self._fused

    def fuses_steps(self) -> bool:
        """True without actuators and up to FUSED_MAX_PARTICLES particles in one thread group, or
        FUSED_GRID_MAX_PARTICLES in several (CUDA) (see :meth:`steps`)."""
        if self.n_actuators:
            return False
        several = self.fused_steps.groups["forward"] > 1
        return self.n_particles <= (FUSED_GRID_MAX_PARTICLES if several else FUSED_MAX_PARTICLES)

    def steps(self, state: State, n: int) -> State:
        """The state ``n * dt`` later, as n calls of :meth:`step`, in ONE forward dispatch (looping over the
        steps) and, on a tape, ONE adjoint dispatch (sopt/sim/spring_system_steps.py); the forward keeps every
        step's state for the adjoint. Systems with actuators take the per-step path (n calls of step, which
        needs a control: so it raises). ``n = 0`` returns ``state`` itself.

        On Vulkan the fused kernels run in one thread group (one multiprocessor): past ``FUSED_MAX_PARTICLES``
        particles the per-step path (many groups per step, ~3 dispatches each) is faster. On CUDA systems of
        more than 256 particles run on several groups with a grid barrier, up to ``FUSED_GRID_MAX_PARTICLES``;
        past those the per-step path keeps memory within a rollout budget one step at a time (the fused forward
        saves its n states in one array)."""
        n = check_int(n, f"{type(self).__name__}.steps n", low=0)
        if n == 0 or not self.fuses_steps():
            return super().steps(state, n)   # actuators: step() asks for the control it needs
        state = self.check_state(state, f"{type(self).__name__}.steps")
        return self.fused_steps.run(state, n)
