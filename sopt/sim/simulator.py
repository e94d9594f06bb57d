"""Simulator: the interface every sopt.sim simulator shares, and the recorded initial state.

A simulator advances a :class:`~sopt.sim.State` (named float32 arrays, batch first) by one time step ``dt``::

    sim = Projectile(x0=..., v0=..., drag=sopt.Parameter([0.1]), dt=1e-2)
    with tape:
        state = sim.initial_state()          # recorded: dL/dx0 reaches x0 when it is a Parameter
        for t in range(T):
            state = sim.step(state)          # one forward dispatch now, its adjoint at tape.backward
        loss = sopt.losses.MSELoss()(state.x, target)

or ``sopt.sim.rollout(sim, steps=T, ...)`` for long rollouts with bounded memory. Every physical parameter
and the initial state is a :class:`~sopt.sim.Coefficient`: a constant, or a Parameter that training moves.
``named_parameters()`` lists the trainable ones. Outside a tape each call runs (and is submitted) at once.

Subclasses set ``state_names``, build their Coefficients in ``__init__`` (``self._coefficient(...)`` for
physical ones, ``self._initial(...)`` for initial-state arrays) and implement :meth:`step` with
:func:`sopt.autodiff.tape.record` (a forward kernel and its adjoint; see slang_lib/sim/). A subclass whose physics file
implements sim/fused_steps.slang's ``IElementStep`` (and declares the driver's two entry points for it) sets
``physics_source`` and :meth:`physics_argument`, and
:meth:`steps` runs fused through :class:`sopt.sim.FusedSteps` (docs/new_simulator.md).
"""

from __future__ import annotations

import pathlib
from typing import Any, ClassVar, Iterator

import numpy as np
import slangpy as spy

from sopt.autodiff import tape as tp
from sopt.autodiff.parameter import Parameter
from sopt.sim.coefficient import Coefficient
from sopt.sim.fused_steps import FusedSteps
from sopt.sim.state import State
from sopt.utils.validation import check_float, check_int


def _shortest(value: float) -> float:
    """A float32 value as the shortest decimal that rounds back to it (0.1, not 0.10000000149011612)."""
    return float(str(np.float32(value)))


class Simulator:
    state_names: ClassVar[tuple[str, ...]]
    # a .slang file defining an IElementStep and the generic driver's two entry points for it (sim/fused_steps.slang:
    # fused_steps_forward<T> / fused_steps_backward<T>): steps() runs fused through them
    physics_source: ClassVar[pathlib.Path | None] = None

    def __init__(self, dt: float) -> None:
        self.dt = check_float(dt, f"{type(self).__name__} dt", low=0.0, low_inclusive=False)
        self._coefficients: dict[str, Coefficient] = {}
        self._initials: dict[str, Coefficient] = {}
        self._fused_driver: FusedSteps | None = None

    # -- coefficients ------------------------------------------------------------------------------------------
    def _coefficient(self, name: str, value: Any, shape: tuple[int, ...], **kw: Any) -> Coefficient:
        c = Coefficient(value, f"{type(self).__name__} {name}", shape, **kw)
        self._coefficients[name] = c
        return c

    def _initial(self, name: str, value: Any, shape: tuple[int, ...], **kw: Any) -> Coefficient:
        c = Coefficient(value, f"{type(self).__name__} initial {name}", shape, shareable=False, **kw)
        self._initials[name] = c
        return c

    # -- config (sopt.config.registry) ------------------------------------------------------------------------------
    @classmethod
    def from_config(cls, config: Any, *arrays: Any, **overrides: Any) -> "Simulator":
        """The simulator of ``config`` (its registered config model: constant physical parameters, dt) with the
        arrays a config cannot hold (initial state, geometry: the constructor's positional arguments) and
        ``overrides``, constructor keywords replacing config values (e.g. ``drag=sopt.Parameter(...)`` to train
        it, or a per-element field)."""
        values = {k: v for k, v in config.model_dump().items() if k != "otype"}
        return cls(*arrays, **{**values, **overrides})

    def config_number(self, name: str) -> float:
        """The one value of coefficient ``name`` shared by every element (a constant's, or a Parameter's current
        value) for a config; ValueError when it is per element."""
        c = self._coefficients[name]
        if c.shape != (1,):
            raise ValueError(f"{type(self).__name__}.to_config: {name} has one value per element (shape {c.shape}); a "
                             "config holds a shared number (pass the field to from_config as an override)")
        return _shortest(c.numpy().reshape(-1)[0])

    def config_vector(self, name: str, length: int) -> list[float]:
        """Coefficient ``name`` as a list of ``length`` numbers (a shared vector such as gravity) for a config;
        ValueError when it has another shape."""
        c = self._coefficients[name]
        if c.shape != (length,):
            raise ValueError(f"{type(self).__name__}.to_config: {name} has shape {c.shape}; a config holds a shared "
                             f"({length},) vector (pass it to from_config as an override)")
        return [_shortest(v) for v in c.numpy().reshape(-1)]

    def coefficient(self, name: str) -> Coefficient:
        return {**self._coefficients, **{f"{k}0": v for k, v in self._initials.items()}}[name]

    def named_parameters(self) -> Iterator[tuple[str, Parameter]]:
        """Trainable quantities: physical ones by name (``"drag"``), initial-state arrays as ``"x0"``, ``"v0"``."""
        seen: set[int] = set()
        for name, c in list(self._coefficients.items()) + [(f"{k}0", v) for k, v in self._initials.items()]:
            if c.parameter is not None and id(c.parameter) not in seen:
                seen.add(id(c.parameter))
                yield name, c.parameter

    def parameters(self) -> list[Parameter]:
        return [p for _, p in self.named_parameters()]

    # -- states ------------------------------------------------------------------------------------------------
    def state_shapes(self) -> dict[str, tuple[int, ...]]:
        return {name: self._initials[name].shape for name in self.state_names}

    def new_state(self) -> State:
        """Arrays for a step's output (from the recording tape's pool, else new), with gradient buffers."""
        return State(**{name: tp.new_tensor(shape) for name, shape in self.state_shapes().items()})

    def check_state(self, state: Any, who: str) -> State:
        """``state`` as this simulator's State, else ValueError naming the array, its shape and the expected one."""
        if not isinstance(state, State):
            raise ValueError(f"{who}: expected a sopt.sim.State, got {type(state).__name__}")
        for name, shape in self.state_shapes().items():
            if name not in state.names():
                raise ValueError(f"{who}: the state has no array {name!r} (it has {', '.join(state.names())})")
            t = state[name]
            if tuple(t.shape) != shape or str(t.dtype.full_name) != "float":
                raise ValueError(f"{who}: state array {name!r} has shape {tuple(t.shape)} and dtype "
                                 f"{t.dtype.full_name}, expected float32 of shape {shape}")
        return state

    def initial_state(self) -> State:
        """The initial state as new arrays; on a tape, their gradients flow into initial-state Parameters."""
        out = self.new_state()
        sources = [(self._initials[name], out[name]) for name in self.state_names]

        def forward(enc: spy.CommandEncoder) -> None:
            for c, t in sources:
                tp.copy_into(enc, c.values, t)

        def backward(enc: spy.CommandEncoder, redirect: dict[int, spy.Tensor]) -> None:
            for c, t in sources:
                if c.parameter is not None:
                    tp.add_into(enc, t.grad, c.parameter.grad)

        params = [c.parameter for c, _ in sources if c.parameter is not None]
        tp.record(f"{type(self).__name__}.initial_state", forward, backward if params else None,
                  writes=out.arrays(), params=params)
        return out

    def step(self, state: State, control: spy.Tensor | None = None) -> State:
        """The state one ``dt`` later (new arrays); ``control``: per-step inputs where the simulator takes them.

        With a ``physics_source`` (and no control) it is one step of the generic fused driver (one forward
        dispatch, one adjoint dispatch on a tape); other simulators implement it."""
        if self.physics_source is None:
            raise NotImplementedError(f"{type(self).__name__} implements neither step nor physics_source")
        self.check_no_control(control)
        return self.fused_steps.run(self.check_state(state, f"{type(self).__name__}.step"), 1)

    def physics_argument(self, gradients: bool) -> dict[str, Any]:
        """The fields of the ``physics_source`` file's IElementStep struct by name (coefficients through
        :func:`sopt.sim.fused_steps.coefficient_argument`, their gradients' targets through ``gradient_argument``,
        wanted only when ``gradients``): the ``physics`` member of the fused driver's ``call``."""
        raise NotImplementedError(f"{type(self).__name__} sets physics_source but not physics_argument")

    @property
    def fused_steps(self) -> FusedSteps:
        """The generic fused driver for ``physics_source`` (its ``layout`` may be set: (threads, groups))."""
        if self.physics_source is None:
            raise ValueError(f"{type(self).__name__} has no physics_source: it steps one call of step() per step")
        if self._fused_driver is None:
            self._fused_driver = FusedSteps(self, self.physics_source)
        return self._fused_driver

    def steps(self, state: State, n: int) -> State:
        """The state ``n * dt`` later, without control inputs; on a tape its gradient flows as through n steps.

        The default calls :meth:`step` n times (n recorded calls, n dispatches or more); with a ``physics_source``
        it runs the n steps in one forward and one adjoint dispatch of the generic driver
        (:class:`sopt.sim.FusedSteps`). Projectile, SpringSystem and Diffusion2D override it with their own fused
        kernels (the host cost of a dispatch would otherwise bound a long rollout); ``rollout`` uses it
        for every stretch of steps with no observation, window cut or gradient-norm probe inside.
        """
        n = check_int(n, f"{type(self).__name__}.steps n", low=0)
        if n > 0 and self.physics_source is not None:
            return self.fused_steps.run(self.check_state(state, f"{type(self).__name__}.steps"), n)
        for _ in range(n):
            state = self.step(state)
        return state

    def fuses_steps(self) -> bool:
        """Whether :meth:`steps` runs its n steps in a few dispatches (a fused kernel) rather than as n calls of
        :meth:`step`. ``rollout`` hands whole stretches only to a fusing simulator: the per-step default allocates
        a state per step even where nothing is saved, which a memory budget cannot afford."""
        return self.physics_source is not None

    def check_no_control(self, control: Any) -> None:
        """ValueError when ``control`` is given to a simulator whose step takes none."""
        if control is not None:
            raise ValueError(f"{type(self).__name__}.step takes no control input, got {type(control).__name__}")

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={v.shape if v.shape != (1,) else float(v.numpy()[0]):}" for k, v in self._coefficients.items())
        return f"{type(self).__name__}({inner}, dt={self.dt})"
