"""Projectile: forward and tape gradients against the float64 reference, known answers (parabola, quadratic-drag
fall, bounce apex, time-of-impact gradients), bad input."""

from __future__ import annotations

import numpy as np
import pytest
import slangpy as spy

import sopt
from sopt.losses import MSELoss
from sopt.sim import State
from sopt.sim.projectile import Projectile
from tests.sim.dispatches import dispatches_per_step
from tests.sim.projectile_reference import Coefficients, rollout
from tests.sim.projectile_reference import step as step_reference

G = 9.81
COEFFICIENTS = ("gravity", "linear_drag", "drag", "restitution")
X0 = np.array([[0.0, 1.0], [1.0, 2.0]])
V0 = np.zeros((2, 2))


def gravity_vector(dim: int) -> np.ndarray:
    return np.array([0.0, -G, 0.0][:dim])


def scene(n: int, dim: int, per_particle: bool, seed: int) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    """Particles low enough and thrown down hard enough that most bounce within 0.3 s; every coefficient
    shared or per particle, with drag."""
    rng = np.random.default_rng(seed)
    x0 = np.c_[rng.uniform(-1, 1, n), rng.uniform(0.02, 0.4, n), rng.uniform(-1, 1, (n, dim - 2))]
    v0 = np.c_[rng.normal(0, 1, n), rng.uniform(-3, 0.5, n), rng.normal(0, 1, (n, dim - 2))]
    shape = (n,) if per_particle else (1,)
    coefficients = {
        "gravity": gravity_vector(dim) + rng.normal(0, 0.5, (n, dim) if per_particle else dim),
        "linear_drag": rng.uniform(0.1, 0.5, shape),
        "drag": rng.uniform(0.05, 0.3, shape),
        "restitution": rng.uniform(0.5, 0.95, shape),
    }
    return x0, v0, coefficients


def reference_coefficients(values: dict[str, np.ndarray], ground: float | None = 0.0) -> Coefficients:
    return Coefficients(values["gravity"], values["linear_drag"], values["drag"], values["restitution"], ground)


def run(sim: Projectile, steps: int, trajectory: bool = False,
        seeds: dict[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """Final state (or every state, stacked) of a rollout on a tape; with ``seeds`` ({"x": dL/dx_T, ...}) the
    tape's backward runs too and the Parameters' gradients are left in them."""
    tape = sopt.Tape()
    with tape:
        states = [sim.initial_state()]
        for _ in range(steps):
            states.append(sim.step(states[-1]))
    if seeds is not None:
        tape.backward(grads={states[-1][k]: np.asarray(g, np.float32) for k, g in seeds.items()})
    tape.submit()
    if not trajectory:
        return states[-1].numpy()
    reads = [s.numpy() for s in states]
    return {k: np.stack([r[k] for r in reads]) for k in ("x", "v")}


def test_forward_matches_reference_with_drag_and_bounces():
    for dim, per_particle in ((2, False), (3, True)):
        x0, v0, values = scene(9, dim, per_particle, seed=dim)
        sim = Projectile(x0, v0, dt=0.01, **values)
        steps = 40
        got = run(sim, steps, trajectory=True)
        want_x, want_v = rollout(x0, v0, reference_coefficients(values), 0.01, steps, trajectory=True)
        bounced = (np.diff(want_v[:, :, 1], axis=0) > 0).any(axis=0)
        assert bounced.sum() >= 5          # the contact branch is exercised
        np.testing.assert_allclose(got["x"], want_x, rtol=1e-4, atol=2e-6)
        np.testing.assert_allclose(got["v"], want_v, rtol=1e-4, atol=2e-5)
        assert (got["x"][:, :, 1] >= 0.0).all()   # bounces never leave a particle below the ground


def fd_gradient(loss_of: callable, value: np.ndarray, per_particle: bool, eps: float = 1e-6) -> np.ndarray:
    """Central differences of the float64 reference's loss. Particles are independent, so a per-particle
    component is perturbed for every particle at once and read off each particle's own loss term."""
    grad = np.zeros_like(value)
    if per_particle:
        for k in np.ndindex(value.shape[1:]):
            plus, minus = value.copy(), value.copy()
            plus[(slice(None), *k)] += eps
            minus[(slice(None), *k)] -= eps
            grad[(slice(None), *k)] = (loss_of(plus) - loss_of(minus)) / (2 * eps)
        return grad
    for k in np.ndindex(value.shape):
        plus, minus = value.copy(), value.copy()
        plus[k] += eps
        minus[k] -= eps
        grad[k] = (loss_of(plus).sum() - loss_of(minus).sum()) / (2 * eps)
    return grad


@pytest.mark.parametrize("per_particle", [False, True], ids=["shared", "per_particle"])
@pytest.mark.parametrize("n,dim", [(1, 2), (7, 3), (45, 2), (45, 3)])
def test_gradients_match_finite_differences(n, dim, per_particle):
    """Every coefficient and x0, v0 as Parameters at once; dL/d(each) of L = <wx, x_T> + <wv, v_T>."""
    x0, v0, values = scene(n, dim, per_particle, seed=10 * n + dim)
    dt, steps = 0.01, 30
    rng = np.random.default_rng(n)
    wx, wv = rng.normal(size=(n, dim)), rng.normal(size=(n, dim))
    params = {name: sopt.Parameter(value, name=name) for name, value in {"x0": x0, "v0": v0, **values}.items()}
    sim = Projectile(params["x0"], params["v0"], dt=dt, **{c: params[c] for c in COEFFICIENTS})
    run(sim, steps, seeds={"x": wx, "v": wv})

    def loss_of(name: str):
        def per_particle_loss(value: np.ndarray) -> np.ndarray:
            inputs = {"x0": x0, "v0": v0, **values, name: value}
            x, v = rollout(inputs["x0"], inputs["v0"], reference_coefficients(inputs), dt, steps)
            return (wx * x).sum(axis=1) + (wv * v).sum(axis=1)
        return per_particle_loss

    _, want_v = rollout(x0, v0, reference_coefficients(values), dt, steps, trajectory=True)
    assert (np.diff(want_v[:, :, 1], axis=0) > 0).any(axis=0).mean() >= 0.5   # most particles bounced
    for name, p in params.items():
        fd = fd_gradient(loss_of(name), {"x0": x0, "v0": v0, **values}[name],
                         per_particle=per_particle or name in ("x0", "v0"))
        got = p.grad_numpy()
        err = np.linalg.norm(got - fd) / np.linalg.norm(fd)
        assert err < 1e-4, f"{name}: relative error {err:.2e}"


def test_constant_coefficients_and_initial_state_get_no_gradient_but_trainable_ones_do():
    """Only the restitution trainable (x0, v0 constant: the first step's input state wants no gradient):
    its gradient equals the one from a run where everything is trainable."""
    x0, v0, values = scene(5, 2, True, seed=3)
    seeds = {"x": np.ones((5, 2))}
    e_alone = sopt.Parameter(values["restitution"], name="e")
    run(Projectile(x0, v0, dt=0.01, **{**values, "restitution": e_alone}), 30, seeds=seeds)
    everything = {c: sopt.Parameter(values[c], name=c) for c in COEFFICIENTS}
    run(Projectile(sopt.Parameter(x0), sopt.Parameter(v0), dt=0.01, **everything), 30, seeds=seeds)
    assert np.abs(e_alone.grad_numpy()).max() > 1e-3
    np.testing.assert_allclose(e_alone.grad_numpy(), everything["restitution"].grad_numpy(), rtol=1e-5, atol=1e-7)


def test_mse_loss_on_the_final_positions():
    """The documented use: an MSE loss of x_T; dL/dk (shared drag) against the reference's differences."""
    x0, v0, values = scene(4, 3, False, seed=5)
    target = np.zeros((4, 3))
    drag = sopt.Parameter(values["drag"], name="k")
    sim = Projectile(x0, v0, dt=0.01, **{**values, "drag": drag})
    tape = sopt.Tape()
    with tape:
        s = sim.initial_state()
        for _ in range(30):
            s = sim.step(s)
        loss = MSELoss()(s.x, target.astype(np.float32))
    tape.backward(loss)
    tape.submit()

    def mse(k: np.ndarray) -> float:
        x, _ = rollout(x0, v0, reference_coefficients({**values, "drag": k}), 0.01, 30)
        return float(np.mean((x - target) ** 2))

    assert loss.item() == pytest.approx(mse(values["drag"]), rel=1e-5)
    fd = (mse(values["drag"] + 1e-6) - mse(values["drag"] - 1e-6)) / 2e-6
    assert drag.grad_numpy()[0] == pytest.approx(fd, rel=1e-3)


def test_a_hand_made_state_below_the_ground_bounces_from_where_it_is():
    """toi = 0 from below the plane: forward and dL/d(x, v) of the input state (a leaf with gradient buffers)
    against the reference and its central differences."""
    x = np.array([[0.0, -0.05], [0.3, -0.2], [0.1, 0.3]])
    v = np.array([[1.0, -2.0], [0.0, -0.5], [0.5, -4.0]])
    values = {"gravity": gravity_vector(2), "linear_drag": np.array([0.2]), "drag": np.array([0.1]),
              "restitution": np.array([0.6])}
    sim = Projectile(np.ones((3, 2)), np.zeros((3, 2)), dt=0.01, **values)   # its initial state is not used
    device = sopt.runtime.device.get_device()
    state = State(**{k: spy.Tensor.from_numpy(device, a.astype(np.float32)).with_grads(zero=True)
                     for k, a in (("x", x), ("v", v))})
    wx, wv = np.random.default_rng(0).normal(size=(2, 3, 2))
    tape = sopt.Tape()
    with tape:
        out = sim.step(state)
    tape.backward(grads={out.x: wx, out.v: wv})
    tape.submit()
    c = reference_coefficients(values)
    want_x, want_v = step_reference(x, v, c, 0.01)
    np.testing.assert_allclose(out.numpy()["x"], want_x, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out.numpy()["v"], want_v, rtol=1e-5, atol=1e-6)
    assert want_v[1, 1] > 0 and want_x[1, 1] > x[1, 1]        # bounced upwards from below
    for name, value in (("x", x), ("v", v)):
        def loss(a: np.ndarray, name: str = name) -> np.ndarray:
            xn, vn = step_reference(*(a, v) if name == "x" else (x, a), c, 0.01)
            return (wx * xn).sum(axis=1) + (wv * vn).sum(axis=1)
        fd = fd_gradient(loss, value, per_particle=True)
        got = state[name].grad.to_numpy().reshape(3, 2)
        np.testing.assert_allclose(got, fd, rtol=1e-4, atol=1e-6)


def test_one_dispatch_per_step_forward_and_backward_and_no_tape_runs_at_once():
    drag = sopt.Parameter([0.1], name="k")
    sim = Projectile(X0, V0, dt=0.01, drag=drag, linear_drag=0.2)
    forward, backward, s = dispatches_per_step(sim, "x", steps=5)
    assert (forward, backward) == (1, 1)
    s_now = sim.initial_state()
    for _ in range(5):
        s_now = sim.step(s_now)
    np.testing.assert_array_equal(s_now.numpy()["x"], s.numpy()["x"])
    assert drag.grad_numpy()[0] != 0.0


# -- known answers -----------------------------------------------------------------------------------------------

def test_drag_free_flight_is_the_discrete_parabola_and_converges_to_the_continuous_one():
    """x_k = x0 + k dt v0 + g dt^2 k (k + 1) / 2 exactly (semi-implicit Euler); the continuous parabola
    x0 + v0 t + g t^2 / 2 differs by g t dt / 2: O(dt)."""
    x0 = np.array([[0.0, 1.0, 0.0], [1.0, 2.0, -1.0], [-2.0, 0.5, 3.0]])
    v0 = np.array([[1.0, 5.0, 0.0], [-2.0, 0.0, 1.0], [0.5, 12.0, -3.0]])
    g = gravity_vector(3)
    t = 0.5
    errors = []
    for dt in (0.01, 0.005):
        k = int(round(t / dt))
        x = run(Projectile(x0, v0, dt=dt, ground=None), k)["x"]
        discrete = x0 + k * dt * v0 + g * dt**2 * k * (k + 1) / 2
        np.testing.assert_allclose(x, discrete, rtol=1e-5, atol=1e-5)
        error = np.abs(x - (x0 + v0 * t + g * t**2 / 2)).max()
        assert error <= G * t * dt / 2 * 1.01
        errors.append(error)
    assert errors[1] / errors[0] == pytest.approx(0.5, abs=0.02)


def test_quadratic_drag_fall_matches_the_closed_form():
    """v(t) = -sqrt(g/k) tanh(sqrt(g k) t), y(t) = y0 - ln(cosh(sqrt(g k) t)) / k, per-particle drag k."""
    k = np.array([0.05, 0.3, 1.0])
    x0 = np.array([[0.0, 100.0]] * 3)
    dt, t = 2e-3, 1.5
    got = run(Projectile(x0, np.zeros((3, 2)), dt=dt, drag=k, ground=None), int(round(t / dt)))
    v_exact = -np.sqrt(G / k) * np.tanh(np.sqrt(G * k) * t)
    fall_exact = np.log(np.cosh(np.sqrt(G * k) * t)) / k
    np.testing.assert_allclose(got["v"][:, 1], v_exact, rtol=1e-3)
    np.testing.assert_allclose(100.0 - got["x"][:, 1], fall_exact, rtol=2e-3)
    np.testing.assert_allclose(got["x"][:, 0], 0.0, atol=0.0)
    # drag is felt: without it the fall after 1.5 s would be g t^2 / 2 = 11 m, above every k's answer
    assert (fall_exact < G * t**2 / 2 * 0.95).all()


def apexes(y: np.ndarray) -> np.ndarray:
    """Heights of the local maxima of a sampled trajectory (after the start)."""
    inner = (y[1:-1] >= y[:-2]) & (y[1:-1] > y[2:])
    return y[1:-1][inner]


def test_elastic_bounces_keep_the_apex_height_to_first_order():
    """e = 1, no drag: the apex after each bounce stays at the drop height up to O(dt) (this integrator loses
    about dt * impact speed per bounce); halving dt halves the loss."""
    h0 = np.array([0.3, 0.5])
    x0 = np.c_[np.zeros(2), h0]
    losses = []
    for dt in (4e-3, 2e-3):
        y = run(Projectile(x0, np.zeros((2, 2)), dt=dt), int(round(1.6 / dt)), trajectory=True)["x"][:, :, 1]
        loss = []
        for i in range(2):
            peaks = apexes(y[:, i])
            assert len(peaks) >= 2
            bounce = np.arange(1, len(peaks) + 1)
            impact_speed = np.sqrt(2 * G * h0[i])
            assert (np.abs(peaks - h0[i]) <= 1.2 * bounce * dt * impact_speed).all()
            loss.append((h0[i] - peaks[0]) / h0[i])
        losses.append(np.array(loss))
    assert (losses[0] > 0).all()
    np.testing.assert_allclose(losses[1] / losses[0], 0.5, atol=0.05)


def test_inelastic_and_damped_bounces_come_to_rest_on_the_ground():
    """e = 0: the particle stops on the ground at once (height exactly the ground's, vertical velocity 0, its
    final height independent of the drop height) while it keeps sliding; e = 0.5: it bounces, then settles.
    Never below the ground."""
    ground = 0.25
    x0 = sopt.Parameter([[0.0, 0.45], [0.0, 1.0]], name="x0")
    v0 = np.array([[1.0, 0.0], [0.0, 0.0]])
    sim = Projectile(x0, v0, dt=0.01, restitution=[0.0, 0.5], ground=ground)
    seed = np.zeros((2, 2))
    seed[:, 1] = 1.0
    y = run(sim, 400, trajectory=True)["x"][:, :, 1]
    final = run(sim, 400, seeds={"x": seed})
    assert (y >= ground).all()
    np.testing.assert_array_equal(final["x"][:, 1], ground)
    np.testing.assert_array_equal(final["v"][:, 1], 0.0)
    np.testing.assert_allclose(final["v"][0, 0], 1.0)   # sliding without friction
    landed = int(np.argmax(y[:, 0] == ground))
    assert 0 < landed < 25 and (y[landed:, 0] == ground).all()
    assert len(apexes(y[:, 1])) >= 3                   # the e = 0.5 ball bounced before settling
    np.testing.assert_array_equal(x0.grad_numpy()[:, 1], 0.0)


def drop_gradients(dt: float, offsets: np.ndarray, e: float, t: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """d y(t) / d h0 and d y(t) / d v0 (vertical) from the tape for particles dropped at rest from heights whose
    discrete fall reaches the ground exactly at a step boundary near t = 0.45 s, scaled by 1 + offsets."""
    steps_to_ground = int(round(0.45 / dt))
    boundary_height = G * dt**2 * steps_to_ground * (steps_to_ground + 1) / 2
    h0 = boundary_height * (1 + offsets)
    n = len(h0)
    x0 = sopt.Parameter(np.c_[np.zeros(n), h0], name="x0")
    v0 = sopt.Parameter(np.zeros((n, 2)), name="v0")
    seed = np.zeros((n, 2))
    seed[:, 1] = 1.0
    run(Projectile(x0, v0, dt=dt, restitution=e), int(round(t / dt)), seeds={"x": seed})
    return h0, x0.grad_numpy()[:, 1], v0.grad_numpy()[:, 1]


def test_time_of_impact_gradients_are_continuous_across_a_step_boundary_and_converge():
    """Impacts just before / just after a step boundary give nearly the same d(height)/d(drop height) and
    d(height)/d(v0), both near the continuous answer (1 + e) tau / t_c - e and tau - e t_c (t_c = sqrt(2 h0 / g)
    the impact time, tau = t - t_c); halving dt halves the distance. (Reflecting the kicked velocity vs instead of
    the velocity at the impact time, the post-bounce velocity would not depend on h0: dy/dh0 = -e at every dt.)"""
    e, t = 0.5, 0.8
    offsets = np.array([-2e-3, 2e-3])    # impact late in one step / early in the next
    errors = []
    for dt in (0.01, 0.005):
        h0, dh, dv = drop_gradients(dt, offsets, e, t)
        t_c = np.sqrt(2 * h0 / G)
        tau = t - t_c
        exact_h = (1 + e) * tau / t_c - e
        exact_v = tau - e * t_c
        assert abs(dh[0] - dh[1]) <= dt and abs(dv[0] - dv[1]) <= dt   # continuous up to O(dt)
        errors.append(np.abs(np.r_[dh - exact_h, dv - exact_v]).max())
    assert errors[0] <= 4 * 0.01
    assert errors[1] / errors[0] == pytest.approx(0.5, abs=0.1)


# -- bad input ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs,message", [
    ({"x0": np.zeros((2, 4))}, r"Projectile initial x must have shape \(N, dim\) with dim 2 or 3, got \(2, 4\)"),
    ({"x0": np.zeros(3)}, r"Projectile initial x must have shape \(N, dim\) with dim 2 or 3, got \(3,\)"),
    ({"v0": np.zeros((3, 2))}, r"Projectile initial v: got shape \(3, 2\), expected \(2, 2\)"),
    ({"x0": [[0.0, np.nan], [1.0, 2.0]]}, r"Projectile initial x contains 1 non-finite value"),
    ({"v0": [[0.0, np.inf], [1.0, 2.0]]}, r"Projectile initial v contains 1 non-finite value"),
    ({"dt": 0.0}, r"Projectile dt must be in \(0.0, inf\), got 0.0"),
    ({"dt": -1e-3}, r"Projectile dt must be in \(0.0, inf\), got -0.001"),
    ({"restitution": 1.5}, r"Projectile restitution must be in \[0, 1\], got 1.5"),
    ({"restitution": [0.5, -0.1]}, r"Projectile restitution must be >= 0, got -0.1"),
    ({"drag": -1.0}, r"Projectile drag must be >= 0 1/m, got -1"),
    ({"linear_drag": [0.1, 0.2, 0.3]}, r"Projectile linear_drag: got shape \(3,\), expected \(2,\) or \(1,\)"),
    ({"gravity": [0.0, -9.81, 0.0]}, r"Projectile gravity has shape \(3,\), expected \(2,\) \(shared\) or \(2, 2\)"),
    ({"gravity": [0.0, np.nan]}, r"Projectile gravity contains 1 non-finite value"),
    ({"x0": [[0.0, 1.0], [1.0, -0.25]]}, r"particle 1 starts below the ground \(height -0.25 m < ground 0 m\)"),
    ({"ground": 1.5}, r"particle 0 starts below the ground \(height 1 m < ground 1.5 m\)"),
    ({"ground": "0"}, r"Projectile ground must be a number, got '0'"),
    ({"linear_drag": 300.0}, r"Projectile dt=0.01 s is unstable for particle 0: .* = 3 >= 2 .*use dt < 0.006667 s"),
    ({"drag": [0.0, 5.0], "v0": [[0.0, 0.0], [0.0, -30.0]]},
     r"Projectile dt=0.01 s is unstable for particle 1: dt \* \(linear_drag \+ 2 \* drag \* speed\) = 3 >= 2"),
])
def test_bad_input_raises_value_error(kwargs, message):
    args = {"x0": X0, "v0": V0, "dt": 0.01, **kwargs}
    with pytest.raises(ValueError, match=message):
        Projectile(args.pop("x0"), args.pop("v0"), **args)


def test_bad_parameters_and_states_raise_value_error():
    with pytest.raises(ValueError, match=r"particle 0 starts below the ground"):
        Projectile(sopt.Parameter([[0.0, -1.0]]), np.zeros((1, 2)), dt=0.01)
    with pytest.raises(ValueError, match=r"Projectile restitution must be in \[0, 1\], got 2"):
        Projectile(X0, V0, dt=0.01, restitution=sopt.Parameter([0.5, 2.0]))
    sim = Projectile(X0, V0, dt=0.01, ground=None)
    wrong = State(x=sopt.autodiff.tape.new_tensor((3, 2)), v=sopt.autodiff.tape.new_tensor((3, 2)))
    with pytest.raises(ValueError, match=r"Projectile.step: state array 'x' has shape \(3, 2\) .* expected float32 of "
                                         r"shape \(2, 2\)"):
        sim.step(wrong)
    with pytest.raises(ValueError, match=r"Projectile.step takes no control input"):
        sim.step(sim.initial_state(), control=sopt.autodiff.tape.new_tensor((2, 2)))

