"""rollout: a sopt simulator rollout, within its memory budget, as a torch autograd function.

::

    sim = SpringSystem(x0, springs, stiffness=sopt.Parameter([50.0]), actuators=[0, 3], dt=2e-3, ...)
    u = policy(features)                                  # (T, A) per-step controls from a torch model
    out = sopt.torch.rollout(sim, T, params={"stiffness": k}, controls=u, budget=32)
    loss = -out.state["x"][:, 0].mean()                   # torch from here on
    loss.backward()                                       # sopt's adjoints -> k.grad, u.grad -> the policy

torch tensors go in: ``params`` (values for the simulator's trainable coefficients, by their names in
``sim.named_parameters()``: ``"stiffness"``, ``"x0"``, ...; the sim must have been built with a sopt Parameter
there, which holds the values during the call), ``state`` (the initial state's arrays by name; default
``sim.initial_state()``) and ``controls`` ((T, A): step t's input to ``sim.step``). torch tensors come out:
``state`` (the final state's arrays) and ``trajectory`` (``observe`` at the steps ``at``, (len(at), ...)), and the
backward runs sopt's rollout backward (recomputing segments when ``budget`` / ``budget_bytes`` bound the states
held, see sopt.sim.rollout) into the gradients of every input that requires one. A coefficient value from
torch is not range-checked as a constructor's is (a negative stiffness is simulated as given).
"""

from __future__ import annotations

from typing import Any, Mapping, NamedTuple, Sequence

import slangpy as spy
import torch
from torch.autograd.function import once_differentiable

from sopt.autodiff import tape as tp
from sopt.sim.rollout import rollout as sopt_rollout
from sopt.sim.simulator import Simulator
from sopt.sim.state import State
from sopt.torch import arrays, placement
from sopt.torch.session import Session
from sopt.utils.validation import check_int


class RolloutOutput(NamedTuple):
    """``state``: the final state's arrays by name; ``trajectory``: the observed array at the steps ``at``, or None."""

    state: dict[str, torch.Tensor]
    trajectory: torch.Tensor | None


class _Spec:
    """What one call fixes besides its tensors: the simulator, which tensors are which, the rollout's options."""

    def __init__(self, sim: Simulator, steps: int, param_names: list[str], state_names: list[str],
                 has_controls: bool, options: dict[str, Any]) -> None:
        self.sim, self.steps, self.param_names, self.state_names = sim, steps, param_names, state_names
        self.has_controls, self.options = has_controls, options
        self.parameters = dict(sim.named_parameters())


def rollout(sim: Simulator, steps: int, *, params: Mapping[str, torch.Tensor] | None = None,
            state: Mapping[str, torch.Tensor] | None = None, controls: torch.Tensor | None = None,
            budget: int | None = None, budget_bytes: int | None = None, observe: str | None = None,
            at: Sequence[int] | None = None, window: int | None = None) -> RolloutOutput:
    """``steps`` steps of ``sim`` from torch tensors to torch tensors, differentiable by torch autograd (see the
    module docstring). Every input is checked (names, shapes, float32, device) before any GPU work."""
    if not isinstance(sim, Simulator):
        raise ValueError(f"sopt.torch.rollout: sim must be a sopt.sim.Simulator, got {type(sim).__name__}")
    steps = check_int(steps, "sopt.torch.rollout steps", low=1)
    named = dict(sim.named_parameters())
    params = dict(params or {})
    for name, t in params.items():
        if name not in named:
            raise ValueError(f"sopt.torch.rollout: params[{name!r}] is not a trainable coefficient of "
                             f"{type(sim).__name__}; it has {sorted(named) or 'none'} (build the simulator with a "
                             "sopt.Parameter for each coefficient torch drives)")
        placement.check_tensor(t, f"sopt.torch.rollout params[{name!r}]")
        if tuple(t.shape) != named[name].shape:
            raise ValueError(f"sopt.torch.rollout: params[{name!r}] has shape {tuple(t.shape)}, expected "
                             f"{named[name].shape} (the simulator's Parameter)")
    shapes = sim.state_shapes()
    state_names: list[str] = []
    state_tensors: list[torch.Tensor] = []
    if state is not None:
        missing = [n for n in shapes if n not in state]
        unknown = [n for n in state if n not in shapes]
        if missing or unknown:
            raise ValueError(f"sopt.torch.rollout: state must hold exactly {sorted(shapes)}; missing {missing}, "
                             f"unknown {unknown}")
        for name, shape in shapes.items():
            t = placement.check_tensor(state[name], f"sopt.torch.rollout state[{name!r}]")
            if tuple(t.shape) != shape:
                raise ValueError(f"sopt.torch.rollout: state[{name!r}] has shape {tuple(t.shape)}, expected {shape}")
            state_names.append(name)
            state_tensors.append(t)
    control_tensors: list[torch.Tensor] = []
    if controls is not None:
        actuators = getattr(sim, "n_actuators", 0)
        controls = placement.check_tensor(controls, "sopt.torch.rollout controls")
        if not actuators:
            raise ValueError(f"sopt.torch.rollout: {type(sim).__name__} takes no control input, got controls")
        if tuple(controls.shape) != (steps, actuators):
            raise ValueError(f"sopt.torch.rollout: controls has shape {tuple(controls.shape)}, expected "
                             f"({steps}, {actuators}): one row of actuations per step")
        control_tensors.append(controls)
    options = {"budget": budget, "budget_bytes": budget_bytes, "observe": observe, "at": at, "window": window}
    spec = _Spec(sim, steps, list(params), state_names, bool(control_tensors), options)
    outputs = _RolloutCall.apply(spec, *[params[n].contiguous() for n in spec.param_names], *state_tensors,
                                 *control_tensors)
    final = dict(zip(sim.state_names, outputs[:len(sim.state_names)]))
    trajectory = outputs[len(sim.state_names)] if observe is not None else None
    return RolloutOutput(final, trajectory)


def _row(t: spy.Tensor, k: int) -> spy.Tensor:
    """Row k of a (K, A) array with its gradient's row attached."""
    width = int(t.shape[1])
    values = t.view((width,), offset=int(t.offset) + k * width)
    if t.grad_out is None:
        return values
    grad = t.grad.view((width,), offset=int(t.grad.offset) + k * width)
    return values.with_grads(grad_in=grad, grad_out=grad, zero=False)


class _RolloutCall(torch.autograd.Function):

    @staticmethod
    def forward(ctx: Any, spec: _Spec, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        n_params, n_state = len(spec.param_names), len(spec.state_names)
        need = any(ctx.needs_input_grad[1:])
        wants = ctx.needs_input_grad[1:]
        session = Session()
        with session.forward() as tape:
            enc = tape.encoder
            for name, t in zip(spec.param_names, tensors[:n_params]):
                arrays.into_sopt(t, spec.parameters[name].values, enc)
            if n_state:
                start = State(**{name: arrays.new_sopt(t, need, enc)
                                 for name, t in zip(spec.state_names, tensors[n_params:n_params + n_state])})
            else:
                start = spec.sim.initial_state()
            ctrl = arrays.new_sopt(tensors[-1], need and wants[-1], enc) if spec.has_controls else None
            control = (lambda s, t: _row(ctrl, t)) if ctrl is not None else None
            result = sopt_rollout(spec.sim, start, spec.steps, control=control, **spec.options)
            outs = result.state.arrays() + ([result.trajectory] if result.trajectory is not None else [])
            seeds = [tp.new_tensor(tuple(o.shape), grads=False) for o in outs] if need else []
        out = tuple(arrays.to_torch(o) for o in outs)
        if not need:
            session.release()
            return out
        ctx.spec, ctx.session, ctx.start, ctx.ctrl, ctx.outs, ctx.seeds = spec, session, start, ctrl, outs, seeds
        ctx.save_for_backward(*tensors[:n_params])
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, *grads: torch.Tensor) -> tuple[Any, ...]:
        spec, session = ctx.spec, ctx.session
        n_params, n_state = len(spec.param_names), len(spec.state_names)
        wants = ctx.needs_input_grad[1:]
        params = [spec.parameters[n] for n in spec.param_names]
        with session.backward(dict(zip(ctx.outs, ctx.seeds))) as enc:
            # another call may have written other values into the Parameters since this call's forward
            for p, t in zip(params, ctx.saved_tensors):
                arrays.into_sopt(t, p.values, enc)
            for g, seed in zip(grads, ctx.seeds):
                arrays.into_sopt(g.to(torch.float32).contiguous(), seed, enc)
            leaves = [p.grad for p in params] + [ctx.start[n].grad for n in spec.state_names if ctx.start[n].grad_out is not None]
            if ctx.ctrl is not None and ctx.ctrl.grad_out is not None:
                leaves.append(ctx.ctrl.grad)
            for g in leaves:   # nothing may reach some of them (a window cut): zero, not stale
                tp.clear(enc, g)
        try:
            out: list[Any] = [arrays.to_torch(p.grad) if w else None for p, w in zip(params, wants[:n_params])]
            out += [arrays.to_torch(ctx.start[n].grad) if w else None
                    for n, w in zip(spec.state_names, wants[n_params:n_params + n_state])]
            if spec.has_controls:
                out.append(arrays.to_torch(ctx.ctrl.grad) if wants[-1] else None)
        finally:
            session.release()
        return (None, *out)
