"""sopt.torch.rollout: gradients (coefficients, initial state, per-step controls) equal native sopt's rollout on a
tape, within a memory budget too, and finite differences; outputs and checks."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="sopt.torch needs torch (pip install 'sopt[torch]')")

import slangpy as spy

import sopt
from sopt.sim import SpringSystem, State, rollout as sopt_rollout
import sopt.torch

pytestmark = pytest.mark.filterwarnings("ignore:sopt.torch. sopt runs on Vulkan:RuntimeWarning")

STEPS = 12


def _sim(k: float = 40.0) -> SpringSystem:
    return SpringSystem.chain(4, 0.3, stiffness=sopt.Parameter([k], name="stiffness"), damping=0.05, mass=0.1,
                              actuators=[1, 2], actuation_strength=0.3, dt=2e-3)


def _controls() -> np.ndarray:
    t = np.arange(STEPS, dtype=np.float32)[:, None]
    return np.concatenate([np.sin(0.5 * t), np.cos(0.3 * t)], 1).astype(np.float32)


def _weights() -> np.ndarray:
    return np.random.default_rng(0).normal(size=(4, 2)).astype(np.float32)


def _torch_loss(sim: SpringSystem, k: torch.Tensor, v0: torch.Tensor, u: torch.Tensor, budget: int | None):
    x0 = torch.from_numpy(sim.coefficient("x0").numpy().astype(np.float32)).to(k.device)
    out = sopt.torch.rollout(sim, STEPS, params={"stiffness": k}, state={"x": x0, "v": v0}, controls=u,
                             budget=budget, observe="x", at=[4, STEPS])
    w = torch.from_numpy(_weights()).to(k.device)
    return (out.state["x"] * w).sum() + 0.5 * (out.trajectory[0] * w).sum() + (out.state["v"] ** 2).sum()


def _native(sim: SpringSystem, u_np: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
    """The gradients in k, v0 and the controls of sum(w * (x_final + 0.5 x_4)) on a sopt tape."""
    device = sopt.runtime.device.get_device()
    u = spy.Tensor.from_numpy(device, u_np).with_grads(zero=True)
    x0 = spy.Tensor.from_numpy(device, sim.coefficient("x0").numpy().astype(np.float32))
    v0 = spy.Tensor.from_numpy(device, np.zeros((4, 2), np.float32)).with_grads(zero=True)

    def row(t: int):
        g = u.grad.view((2,), offset=2 * t)
        return u.view((2,), offset=2 * t).with_grads(grad_in=g, grad_out=g, zero=False)

    tape = sopt.Tape()
    with tape:
        res = sopt_rollout(sim, State(x=x0, v=v0), STEPS, control=lambda s, t: row(t), observe="x", at=[4, STEPS])
    w = _weights()
    traj_grad = np.zeros((2, 4, 2), np.float32)
    traj_grad[0] = 0.5 * w
    traj_grad[1] = w   # the final x, seeded through the trajectory's last row instead of the state
    tape.backward(grads={res.trajectory: traj_grad})
    tape.submit()
    return sim.stiffness.parameter.grad_numpy()[0], v0.grad.to_numpy(), u.grad.to_numpy()


@pytest.mark.parametrize("budget", [None, 10])
def test_gradients_equal_native_rollout(budget: int | None, tdev: torch.device) -> None:
    sim = _sim()
    k = torch.tensor([40.0], device=tdev, requires_grad=True)
    v0 = torch.zeros(4, 2, device=tdev, requires_grad=True)
    u = torch.from_numpy(_controls()).to(tdev).requires_grad_()
    x0 = torch.from_numpy(sim.coefficient("x0").numpy().astype(np.float32)).to(tdev)
    out = sopt.torch.rollout(sim, STEPS, params={"stiffness": k}, state={"x": x0, "v": v0}, controls=u,
                             budget=budget, observe="x", at=[4, STEPS])
    torch.testing.assert_close(out.trajectory[1], out.state["x"], rtol=0, atol=0)
    w = torch.from_numpy(_weights()).to(tdev)
    (out.trajectory[1] * w + 0.5 * out.trajectory[0] * w).sum().backward()
    sim.stiffness.parameter.zero_grad()
    gk, gv0, gu = _native(sim, _controls())
    assert k.grad.item() == pytest.approx(gk, rel=1e-6, abs=1e-9)
    np.testing.assert_allclose(v0.grad.cpu().numpy(), gv0, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(u.grad.cpu().numpy(), gu, rtol=1e-6, atol=1e-8)
    assert np.abs(gu).max() > 1e-4 and abs(gk) > 1e-8   # gradients actually flowed


def test_gradients_match_finite_differences(tdev: torch.device) -> None:
    sim = _sim()
    k = torch.tensor([40.0], device=tdev, requires_grad=True)
    v0 = torch.zeros(4, 2, device=tdev, requires_grad=True)
    u = torch.from_numpy(_controls()).to(tdev).requires_grad_()
    _torch_loss(sim, k, v0, u, budget=10).backward()
    with torch.no_grad():
        def loss(dk: float = 0.0, du: tuple[int, int, float] | None = None) -> float:
            uu = u.detach().clone().double()
            if du is not None:
                uu[du[0], du[1]] += du[2]
            return float(_torch_loss(sim, k.detach() + dk, v0.detach(), uu.float(), budget=10))
        eps = 0.5
        fd_k = (loss(eps) - loss(-eps)) / (2 * eps)
        fd_u = (loss(du=(3, 1, 0.05)) - loss(du=(3, 1, -0.05))) / 0.1
    assert k.grad.item() == pytest.approx(fd_k, rel=2e-2)
    assert u.grad[3, 1].item() == pytest.approx(fd_u, rel=2e-2)


def test_initial_state_from_the_simulator_and_no_grad(tdev: torch.device) -> None:
    sim = _sim()
    with torch.no_grad():
        out = sopt.torch.rollout(sim, STEPS, controls=torch.from_numpy(_controls()).to(tdev))
    assert out.trajectory is None and out.state["x"].shape == (4, 2) and not out.state["x"].requires_grad
    eager = sopt_rollout(sim, sim.initial_state(), STEPS,
                         control=lambda s, t: _controls()[t]).state.x.to_numpy()
    np.testing.assert_allclose(out.state["x"].cpu().numpy(), eager, rtol=0, atol=0)


@pytest.mark.parametrize("kwargs, message", [
    (dict(params={"damping": torch.ones(1)}), r"params\['damping'\] is not a trainable coefficient of SpringSystem; "
                                              r"it has \['stiffness'\]"),
    (dict(params={"stiffness": torch.ones(2)}), r"params\['stiffness'\] has shape \(2,\), expected \(1,\)"),
    (dict(controls=torch.ones(STEPS, 3)), r"controls has shape \(12, 3\), expected \(12, 2\)"),
    (dict(controls=torch.ones(STEPS, 2, dtype=torch.float64)), r"controls has dtype torch.float64"),
    (dict(state={"x": torch.zeros(4, 2)}), r"state must hold exactly \['v', 'x'\]; missing \['v'\]"),
])
def test_bad_inputs_are_refused(kwargs: dict, message: str, tdev: torch.device) -> None:
    kwargs = {key: ({n: t.to(tdev) for n, t in value.items()} if isinstance(value, dict) else value.to(tdev))
              for key, value in kwargs.items()}   # on sopt's device: the check under test, not the device's, fails
    kwargs.setdefault("controls", torch.from_numpy(_controls()).to(tdev))
    with pytest.raises(ValueError, match=message):
        sopt.torch.rollout(_sim(), STEPS, **kwargs)
