"""The neural controller of the walking robot and the walked distance, both recorded on the tape.

Per step t the controller maps the state to the actuation (DiffTaichi's mass_spring controller)::

    f = [sin(omega t dt + 2 pi j / n_sin)]_j  ++  [s (x_i - c), s v_i]_i          (1, n_sin + 4 N)
    u = MLP(f)   (tanh hidden layers, tanh output)                                 (A,) in (-1, 1)

with c the mean particle position and s = ``state_scale``. The spring system turns u into rest lengths
``l0 (1 + strength u)`` of the actuated springs. Three recorded calls per step: the features (a kernel of
controller.slang with a hand-written adjoint), the MLP's layers (sopt.nn), and the step itself; the MLP's
output row is handed to the step as the (A,) control by a view of the same memory (no copy), so the step's
adjoint writes dL/du straight into the MLP's output gradient.

:func:`walk_loss` records ``-(centre_x(T) - centre_x(0))``: minimising it walks the centre along +x.
:class:`PostureLoss` records ``w mean_{t, b} (y_b(t) - y_b(0))^2`` over the back's particles b and every step t:
minimising it keeps the back level at its standing height (upright, no tumbling, no belly crawl).
"""

from __future__ import annotations

import pathlib
from typing import Any

import numpy as np
import slangpy as spy

from sopt.nn import init
from sopt.runtime.device import get_device
from sopt.autodiff import tape as tp
from sopt.nn import MLP
from sopt.runtime.kernel import Function, launch
from sopt.nn.seeding import derive_seed
from sopt.sim.state import State

_SOURCE = pathlib.Path(__file__).with_name("controller.slang")
_FEATURES = Function(_SOURCE, "controller_features")
_FEATURES_BWD = Function(_SOURCE, "controller_features_bwd")
_WALK_LOSS = Function(_SOURCE, "walk_loss")
_WALK_LOSS_BWD = Function(_SOURCE, "walk_loss_bwd")
_POSTURE_LOSS = Function(_SOURCE, "posture_loss")
_POSTURE_LOSS_BWD = Function(_SOURCE, "posture_loss_bwd")


class NeuralController:
    """``controller(state, t) -> u`` (A,): the MLP policy of the module docstring, for a rollout's ``control=``.

    Args:
        n_particles: N, the robot's particles (the state's x and v are (N, 2)).
        n_actuators: A, the MLP's outputs.
        dt: the simulator's time step (s); the clock feature of step t is at time t dt.
        hidden: the MLP's hidden width; ``hidden_layers`` >= 1 of them (tanh).
        n_sin: clock features; ``omega`` (rad/s) their angular frequency.
        state_scale: s, the factor on the position offsets (m) and velocities (m/s) in the features.
        seed: the MLP's initialisation seed.
        init_gains: Xavier-normal gains of the hidden layers' and the output layer's weights (biases start at 0).
    """

    def __init__(self, n_particles: int, n_actuators: int, dt: float, *, hidden: int = 32, hidden_layers: int = 1,
                 n_sin: int = 10, omega: float = 10.0, state_scale: float = 0.05, seed: int = 0,
                 init_gains: tuple[float, float] = (2.0, 3.0)) -> None:
        self.n, self.n_actuators, self.dt = int(n_particles), int(n_actuators), float(dt)
        self.n_sin, self.omega, self.state_scale = int(n_sin), float(omega), float(state_scale)
        self.n_features = self.n_sin + 4 * self.n
        self.mlp = MLP(self.n_features, self.n_actuators, hidden, hidden_layers, activation="tanh",
                       output_activation="tanh", seed=seed, deterministic=True)
        # DiffTaichi's initialisation: N(0, (gain^2) 2 / (fan_in + fan_out)) weights, gain 2 for the hidden layers
        # and 3 for the output one, zero biases: the untrained controller already swings the actuators through
        # much of their range (torch's default would leave |u| ~ 0.1, a robot that hardly moves and learns slowly)
        for k, layer in enumerate(self.mlp.layers):
            init.xavier_normal_(layer.weight, gain=init_gains[1] if k == hidden_layers else init_gains[0],
                                seed=derive_seed(seed, k, 11))
            init.zeros_(layer.bias)

    def parameters(self) -> dict[str, Any]:
        """The MLP's Parameters by qualified name (``"0.weight"``, ...)."""
        return dict(self.mlp.named_parameters())

    def features(self, state: State, t: int) -> spy.Tensor:
        """The (1, F) input features of step ``t`` (recorded; the adjoint adds into state.x and state.v's
        gradients)."""
        x, v = state.x, state.v
        out = tp.new_tensor((1, self.n_features))
        n, n_sin, scale, time = self.n, self.n_sin, self.state_scale, t * self.dt

        def forward(enc: spy.CommandEncoder) -> None:
            launch(_FEATURES, enc, j=spy.grid((self.n_features,)), n=n, n_sin=n_sin, time=time, omega=self.omega,
                   state_scale=scale, x=x, v=v, features=out)

        def backward(enc: spy.CommandEncoder, redirect: dict[int, spy.Tensor]) -> None:
            launch(_FEATURES_BWD, enc, k=spy.grid((2 * n,)), n=n, n_sin=n_sin, state_scale=scale,
                   features_grad=out.grad, x_grad=x.grad, v_grad=v.grad)

        tape = tp.current_tape()
        wants = [a for a in (x, v) if tape is not None and a.grad_out is not None and tape.requires_grad(a)]
        tp.record("NeuralController.features", forward, backward if len(wants) == 2 else None, reads=[x, v],
                  writes=[out], add_grads=wants)
        return out

    def __call__(self, state: State, t: int) -> spy.Tensor:
        """The (A,) actuation of step ``t``: a view of the MLP's (1, A) output row, its gradient included."""
        y = self.mlp(self.features(state, t))
        return y.view((self.n_actuators,))


def walk_loss(x: spy.Tensor, start: float) -> spy.Tensor:
    """Record ``loss = start - mean_i x[i, 0]`` (m; ``start``: the centre's x at t = 0) into a new (1,) array
    (the Trainer seeds an array loss with 1); its adjoint adds ``-1/N`` into each x[i, 0]'s gradient."""
    n = int(x.shape[0])
    loss = tp.new_tensor((1,))

    def forward(enc: spy.CommandEncoder) -> None:
        launch(_WALK_LOSS, enc, tid=spy.grid((1,)), n=n, start=float(start), x=x, loss=loss)

    def backward(enc: spy.CommandEncoder, redirect: dict[int, spy.Tensor]) -> None:
        launch(_WALK_LOSS_BWD, enc, i=spy.grid((n,)), n=n, loss_grad=tp.flat(loss.grad), x_grad=x.grad)

    tp.record("walk_loss", forward, backward, reads=[x], writes=[loss], add_grads=[x])
    return loss



class PostureLoss:
    """``loss = weight / (T B) sum_{t, b} (y[t, back_b] - rest_y_b)^2`` (m, for ``weight`` in 1/m): the back's B
    particles' mean squared height change over a (T, N, 2) trajectory of positions (m), recorded on the tape
    (kernels in controller.slang). A tilt of the back by a small angle a adds about weight a^2 L^2 / 12 (L the back's
    length), a sag or hop by h adds weight h^2.

    Args:
        back: (B,) distinct particle indices of the back.
        rest_y: (B,) their standing heights (m).
        n_particles: N.
        weight: w (1/m), >= 0.
    """

    def __init__(self, back: Any, rest_y: Any, n_particles: int, weight: float) -> None:
        back = np.asarray(back, np.int32)
        rest_y = np.asarray(rest_y, np.float32)
        if back.ndim != 1 or back.size < 1 or back.shape != rest_y.shape or np.unique(back).size != back.size:
            raise ValueError(f"PostureLoss: back must be (B,) distinct indices with rest_y (B,), got {back.shape} "
                             f"and {rest_y.shape}")
        if back.min() < 0 or back.max() >= n_particles:
            raise ValueError(f"PostureLoss: back indices must lie in [0, {n_particles}), got {back.tolist()}")
        if not (np.isfinite(weight) and weight >= 0):
            raise ValueError(f"PostureLoss: weight = {weight!r} must be a finite number >= 0 (1/m)")
        device = get_device()
        self.n, self.count, self.weight = int(n_particles), int(back.size), float(weight)
        self.back = spy.Tensor.from_numpy(device, back)
        self.rest_y = spy.Tensor.from_numpy(device, rest_y)

    def __call__(self, trajectory: spy.Tensor) -> spy.Tensor:
        """The (1,) loss of a (T, N, 2) trajectory (recorded; its adjoint adds into the trajectory's gradient)."""
        k = int(trajectory.shape[0])
        if _numel(trajectory) != k * self.n * 2:
            raise ValueError(f"PostureLoss: trajectory has shape {tuple(trajectory.shape)}, expected (T, {self.n}, 2)")
        loss = tp.new_tensor((1,))
        args = {"k_count": k, "n": self.n, "b_count": self.count, "weight": self.weight, "back": self.back,
                "rest_y": self.rest_y}

        def forward(enc: spy.CommandEncoder) -> None:
            launch(_POSTURE_LOSS, enc, tid=spy.grid((1,)), **args, traj=tp.flat(trajectory), loss=loss)

        def backward(enc: spy.CommandEncoder, redirect: dict[int, spy.Tensor]) -> None:
            launch(_POSTURE_LOSS_BWD, enc, t=spy.grid((k * self.count,)), **args, traj=tp.flat(trajectory),
                   loss_grad=tp.flat(loss.grad), traj_grad=tp.flat(trajectory.grad))

        tp.record("PostureLoss", forward, backward, reads=[trajectory], writes=[loss], add_grads=[trajectory])
        return loss


def _numel(t: spy.Tensor) -> int:
    count = 1
    for d in t.shape:
        count *= int(d)
    return count
