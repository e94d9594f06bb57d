"""Projectile.steps: n steps fused into one forward and one adjoint dispatch, against n calls of Projectile.step
(final state and every gradient, with bounces and resting contact inside the segments) and against central
differences of the float64 reference; dispatch count, saved memory, eager use, bad input."""

from __future__ import annotations

import numpy as np
import pytest

import sopt
from sopt.runtime import device as dev
from sopt.sim.projectile import SEGMENT, Projectile
from tests.sim.projectile_reference import Coefficients, rollout
from tests.sim.test_projectile import COEFFICIENTS, fd_gradient, gravity_vector

DT = 0.01
STEPS = 75   # two full segments of SEGMENT = 32 and a partial one of 11


def scene(n: int, dim: int, per_particle: bool, ground: float, seed: int):
    """Particles dropped or thrown down from up to 0.6 m above the ground, with drag: they bounce during the
    first segments and come to rest on the ground (shared restitution 0.2; per particle, a third with e = 0)."""
    rng = np.random.default_rng(seed)
    x0 = np.c_[rng.uniform(-1, 1, n), ground + rng.uniform(0.02, 0.6, n), rng.uniform(-1, 1, (n, dim - 2))]
    v0 = np.c_[rng.normal(0, 1, n), rng.uniform(-2, 0.5, n), rng.normal(0, 1, (n, dim - 2))]
    shape = (n,) if per_particle else (1,)
    restitution = rng.uniform(0.0, 0.8, shape)
    if per_particle:
        restitution[: n // 3] = 0.0
    else:
        restitution[:] = 0.2
    values = {
        "gravity": gravity_vector(dim) + rng.normal(0, 0.5, (n, dim) if per_particle else dim),
        "linear_drag": rng.uniform(0.1, 0.5, shape),
        "drag": rng.uniform(0.05, 0.3, shape),
        "restitution": restitution,
    }
    return x0, v0, values


def trainable_projectile(x0, v0, values, ground: float) -> tuple[dict[str, sopt.Parameter], Projectile]:
    """A Projectile whose x0, v0 and every coefficient is a Parameter."""
    params = {name: sopt.Parameter(value, name=name) for name, value in {"x0": x0, "v0": v0, **values}.items()}
    sim = Projectile(params["x0"], params["v0"], dt=DT, ground=ground, **{c: params[c] for c in COEFFICIENTS})
    return params, sim


def run(sim: Projectile, pieces: tuple[int, ...] | None, seeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The final state of a taped rollout, its backward seeded with ``seeds`` ({"x": dL/dx_T, "v": dL/dv_T});
    ``pieces``: the step counts of consecutive ``steps`` calls, or None for STEPS calls of ``step``."""
    tape = sopt.Tape()
    with tape:
        s = sim.initial_state()
        for n in pieces if pieces is not None else ():
            s = sim.steps(s, n)
        for _ in range(STEPS if pieces is None else 0):
            s = sim.step(s)
    tape.backward(grads={s[k]: g.astype(np.float32) for k, g in seeds.items()})
    tape.submit()
    return s.numpy()


@pytest.mark.parametrize("pieces", [(STEPS,), (SEGMENT, 1, STEPS - SEGMENT - 1)], ids=["one_call", "three_calls"])
@pytest.mark.parametrize("dim,per_particle,ground", [(2, False, 0.0), (3, True, 0.1)],
                         ids=["2d_shared", "3d_per_particle"])
def test_fused_steps_equal_single_steps_in_state_and_every_gradient(pieces, dim, per_particle, ground):
    """x0, v0 and every coefficient trainable; particles bounce in the first two segments and rest on the
    ground (the clamped contact) from the first segment to the end. ``three_calls``: a call of exactly one segment (nothing saved), a
    one-step call and a partial-segment call, gradients flowing through each call's input state."""
    n = 12
    x0, v0, values = scene(n, dim, per_particle, ground, seed=dim)
    want_x, want_v = rollout(x0, v0, Coefficients(**values, ground=ground), DT, STEPS, trajectory=True)
    bounces = np.diff(want_v[:, :, 1], axis=0) > 0            # (STEPS, n): a step that turned a particle upwards
    resting = (want_x[:, :, 1] == ground) & (want_v[:, :, 1] == 0.0)
    assert bounces[:SEGMENT].any(axis=0).sum() >= 6 and bounces[SEGMENT:2 * SEGMENT].any(axis=0).sum() >= 3
    assert resting[SEGMENT].sum() >= 3 and resting[-1].sum() >= 6

    rng = np.random.default_rng(dim)
    seeds = {"x": rng.normal(size=(n, dim)), "v": rng.normal(size=(n, dim))}
    single_params, single = trainable_projectile(x0, v0, values, ground)
    fused_params, fused = trainable_projectile(x0, v0, values, ground)
    want = run(single, None, seeds)
    got = run(fused, pieces, seeds)
    np.testing.assert_allclose(want["x"], want_x[-1], rtol=1e-4, atol=2e-5)   # the single steps are right
    for k in ("x", "v"):
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-6, err_msg=k)
    for name, p in fused_params.items():
        expected = single_params[name].grad_numpy()
        assert np.abs(expected).max() > 1e-2, name
        np.testing.assert_allclose(p.grad_numpy(), expected, rtol=1e-4, atol=1e-5 * np.abs(expected).max(),
                                   err_msg=name)


def test_gradients_of_per_particle_drag_restitution_and_v0_match_finite_differences():
    """Benchmark case D in small: per-particle drag, restitution and v0 trainable, the loss on the final
    positions, L = <w, x_T>, through bounces; against central differences of the float64 reference."""
    n, dim, steps = 10, 3, 70
    x0, v0, values = scene(n, dim, True, 0.0, seed=7)
    values["restitution"] = np.random.default_rng(8).uniform(0.3, 0.9, n)   # bouncing, not resting
    _, want_v = rollout(x0, v0, Coefficients(**values), DT, steps, trajectory=True)
    assert (np.diff(want_v[:, :, 1], axis=0) > 0).any(axis=0).sum() >= 8      # almost every particle bounced
    w = np.random.default_rng(9).normal(size=(n, dim))
    params = {name: sopt.Parameter(value, name=name)
              for name, value in (("v0", v0), ("drag", values["drag"]), ("restitution", values["restitution"]))}
    sim = Projectile(x0, params["v0"], dt=DT, **{**values, "drag": params["drag"],
                                                  "restitution": params["restitution"]})
    tape = sopt.Tape()
    with tape:
        s = sim.steps(sim.initial_state(), steps)
    tape.backward(grads={s.x: w.astype(np.float32)})
    tape.submit()

    for name, p in params.items():
        def per_particle_loss(value: np.ndarray, name: str = name) -> np.ndarray:
            inputs = {"v0": v0, **values, name: value}
            x, _ = rollout(x0, inputs["v0"], Coefficients(*(inputs[c] for c in COEFFICIENTS)), DT, steps)
            return (w * x).sum(axis=1)

        fd = fd_gradient(per_particle_loss, {"v0": v0, **values}[name], per_particle=True)
        err = np.linalg.norm(p.grad_numpy() - fd) / np.linalg.norm(fd)
        assert err < 1e-4, f"{name}: relative error {err:.2e}"


def test_one_forward_and_one_adjoint_dispatch_and_the_saved_states():
    """steps(75) records one dispatch and its backward one; on a tape with a trainable coefficient it saves
    (75 - 1) // 32 = 2 states (x, v) per particle, with none it saves nothing and records no backward; outside
    a tape it runs at once, with the same result."""
    n, dim = 6, 3
    x0, v0, values = scene(n, dim, False, 0.0, seed=1)
    drag = sopt.Parameter(values["drag"], name="k")
    sim = Projectile(x0, v0, dt=DT, **{**values, "drag": drag})
    constant = Projectile(x0, v0, dt=DT, **values)
    taped, pool_bytes = {}, {}
    for name, s in (("trainable", sim), ("constant", constant)):
        tape = sopt.Tape()
        with tape:
            state = s.initial_state()
            before = dev.dispatch_count()
            out = s.steps(state, STEPS)
            forward = dev.dispatch_count() - before
        before = dev.dispatch_count()
        tape.backward(grads={out.x: np.ones((n, dim), np.float32)})
        backward = dev.dispatch_count() - before
        tape.submit()
        assert (forward, backward) == (1, 1 if name == "trainable" else 0), name
        taped[name], pool_bytes[name] = out.numpy(), tape.pool_bytes
    assert pool_bytes["trainable"] - pool_bytes["constant"] == 4 * ((STEPS - 1) // SEGMENT) * n * 2 * dim
    assert drag.grad_numpy()[0] != 0.0

    before = dev.dispatch_count()
    eager = sim.steps(sim.initial_state(), STEPS).numpy()
    assert dev.dispatch_count() - before == 1
    for k in ("x", "v"):
        np.testing.assert_array_equal(eager[k], taped["trainable"][k])
        np.testing.assert_array_equal(eager[k], taped["constant"][k])


def test_zero_steps_and_bad_input():
    sim = Projectile(np.array([[0.0, 1.0], [1.0, 2.0]]), np.zeros((2, 2)), dt=DT)
    state = sim.initial_state()
    assert sim.steps(state, 0) is state
    with pytest.raises(ValueError, match=r"Projectile.steps n must be >= 0, got -1"):
        sim.steps(state, -1)
    with pytest.raises(ValueError, match=r"Projectile.steps n must be an integer, got 2.0"):
        sim.steps(state, 2.0)
    wrong = sopt.sim.State(x=sopt.autodiff.tape.new_tensor((3, 2)), v=sopt.autodiff.tape.new_tensor((3, 2)))
    with pytest.raises(ValueError, match=r"Projectile.steps: state array 'x' has shape \(3, 2\)"):
        sim.steps(wrong, 5)
