"""NBody: forward against the float64 reference, tape gradients against finite differences of it, Kepler's
period, conservation of momentum and energy, and argument checks."""

from __future__ import annotations

import numpy as np
import pytest

import sopt
from sopt.losses import MSELoss
from sopt.sim.nbody import G_SI, NBody
from tests.sim import nbody_reference as ref


def _bodies(n: int, dim: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Positions spread over [-1, 1]^dim (no close pairs), velocities ~0.3, masses in [0.5, 1.5] (float32 values)."""
    rng = np.random.default_rng(seed)
    while True:
        x0 = rng.uniform(-1.0, 1.0, (n, dim))
        d = np.linalg.norm(x0[:, None] - x0[None], axis=2) + 10 * np.eye(n)
        if d.min() > 0.4:
            break
    v0 = rng.normal(0.0, 0.3, (n, dim))
    m = rng.uniform(0.5, 1.5, n)
    return tuple(a.astype(np.float32).astype(np.float64) for a in (x0, v0, m))


def _rollout(sim: NBody, steps: int) -> list[sopt.sim.State]:
    """Every state of a rollout (initial included), recorded on one tape and submitted once."""
    tape = sopt.Tape()
    with tape:
        states = [sim.initial_state()]
        for _ in range(steps):
            states.append(sim.step(states[-1]))
    tape.submit()
    return states


def _rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm(np.asarray(a) - b) / np.linalg.norm(b))


# -- forward ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dim,n", [(2, 3), (3, 7)])
def test_forward_matches_float64_reference(dim: int, n: int) -> None:
    x0, v0, m = _bodies(n, dim, seed=n)
    steps, dt, eps = 40, 0.01, 0.1
    sim = NBody(x0, v0, m, dt=dt, G=1.0, softening=eps)
    states = _rollout(sim, steps)
    want = ref.rollout(x0, v0, m, 1.0, np.float32(eps), dt, steps)
    for t in (0, 1, steps // 2, steps):
        got = states[t].numpy()
        for k, name in enumerate("xva"):
            np.testing.assert_allclose(got[name], want[t][k], rtol=1e-4, atol=1e-4 * np.abs(want[t][k]).max(),
                                       err_msg=f"{name} after {t} steps")
    # the bodies moved well beyond the tolerance: the comparison is not of the initial state
    assert np.abs(want[-1][0] - x0).max() > 0.05


def test_default_G_is_si_and_softening_default_is_newtonian() -> None:
    # Earth-Moon-like pair in SI units: a(x0) must be G m / r^2 with the SI constant and no softening
    x0 = np.array([[0.0, 0.0, 0.0], [3.844e8, 0.0, 0.0]])
    m = np.array([5.972e24, 7.342e22])
    sim = NBody(x0, np.zeros((2, 3)), m, dt=60.0)
    a = sim.initial_state().a.to_numpy().reshape(2, 3)
    np.testing.assert_allclose(a[:, 0], [G_SI * m[1] / 3.844e8**2, -G_SI * m[0] / 3.844e8**2], rtol=1e-5)
    np.testing.assert_array_equal(a[:, 1:], 0.0)


# -- gradients --------------------------------------------------------------------------------------------------
def _tape_gradients(x0, v0, m, G, eps, dt, steps, seeds, shared_mass=False, trainable=("x0", "v0", "masses", "G",
                                                                                         "softening")):
    p = {"x0": x0, "v0": v0, "masses": m[:1] if shared_mass else m, "G": np.array([G]), "softening": np.array([eps])}
    args = {k: sopt.Parameter(v, name=k) if k in trainable else v for k, v in p.items()}
    sim = NBody(args["x0"], args["v0"], args["masses"], dt=dt, G=args["G"], softening=args["softening"])
    tape = sopt.Tape()
    with tape:
        s = sim.initial_state()
        for _ in range(steps):
            s = sim.step(s)
    tape.backward(grads={s[name]: seeds[name].astype(np.float32) for name in "xva"})
    tape.submit()
    return {name: prm.grad_numpy() for name, prm in sim.named_parameters()}


def _fd_gradients(x0, v0, m, G, eps, dt, steps, seeds, shared_mass=False, h=1e-6):
    """Central differences of L = sum(seeds . final state) through the float64 reference."""
    p = {"x0": x0, "v0": v0, "masses": m[:1] if shared_mass else m, "G": np.array([G]), "softening": np.array([eps])}

    def loss(q):
        x, v, a = ref.rollout(q["x0"], q["v0"], q["masses"], q["G"][0], q["softening"][0], dt, steps)[-1]
        return (seeds["x"] * x).sum() + (seeds["v"] * v).sum() + (seeds["a"] * a).sum()

    out = {}
    for name, value in p.items():
        g = np.zeros_like(value)
        for idx in np.ndindex(value.shape):
            plus = {k: v.copy() for k, v in p.items()}
            minus = {k: v.copy() for k, v in p.items()}
            plus[name][idx] += h
            minus[name][idx] -= h
            g[idx] = (loss(plus) - loss(minus)) / (2 * h)
        out[name] = g
    return out


@pytest.mark.parametrize("dim,n", [(2, 3), (3, 3), (2, 7), (3, 7)])
def test_gradients_match_finite_differences(dim: int, n: int) -> None:
    x0, v0, m = _bodies(n, dim, seed=10 + n + dim)
    G, eps, dt, steps = 1.0, np.float32(0.2).item(), 0.02, 12
    rng = np.random.default_rng(dim * n)
    seeds = {k: rng.normal(size=(n, dim)) for k in "xva"}
    got = _tape_gradients(x0, v0, m, G, eps, dt, steps, seeds)
    want = _fd_gradients(x0, v0, m, G, eps, dt, steps, seeds)
    assert set(got) == {"x0", "v0", "masses", "G", "softening"}
    for name in want:
        assert np.linalg.norm(want[name]) > 1e-3, name   # a gradient that is there to be matched
        assert _rel(got[name], want[name]) < 1e-3, (name, got[name], want[name])


@pytest.mark.parametrize("dim", [2, 3])
def test_shared_mass_gradient_with_constant_initial_state(dim: int) -> None:
    # only the shared mass trains: its gradient sums every body's, and flows through the constant initial state
    n = 7
    x0, v0, m = _bodies(n, dim, seed=3 + dim)
    rng = np.random.default_rng(5)
    seeds = {k: rng.normal(size=(n, dim)) for k in "xva"}
    args = (x0, v0, m, 1.0, np.float32(0.2).item(), 0.02, 12, seeds)
    got = _tape_gradients(*args, shared_mass=True, trainable=("masses",))
    want = _fd_gradients(*args, shared_mass=True)["masses"]
    assert list(got) == ["masses"] and got["masses"].shape == (1,)
    assert abs(got["masses"][0] - want[0]) < 1e-3 * abs(want[0]), (got, want)


def test_shared_gradients_sum_over_many_waves() -> None:
    # 40 bodies: G's, the softening's and a shared mass's gradients add up over several waves of threads
    n, dim = 40, 3
    rng = np.random.default_rng(11)
    x0 = (rng.uniform(-2.0, 2.0, (n, dim))).astype(np.float32).astype(np.float64)
    v0 = rng.normal(0.0, 0.2, (n, dim)).astype(np.float32).astype(np.float64)
    m = np.full(n, 0.25)
    seeds = {k: rng.normal(size=(n, dim)) for k in "xva"}
    args = (x0, v0, m, 1.0, np.float32(0.3).item(), 0.02, 8, seeds)
    got = _tape_gradients(*args, shared_mass=True, trainable=("masses", "G", "softening"))
    want = _fd_gradients(*args, shared_mass=True)
    for name in ("masses", "G", "softening"):
        assert abs(got[name][0] - want[name][0]) < 1e-3 * abs(want[name][0]), (name, got[name], want[name])


def test_mse_loss_gradient_of_masses_and_positions() -> None:
    # the documented use: a loss on the final positions, gradients for the masses and the initial positions
    n, dim, dt, steps = 3, 2, 0.02, 15
    x0, v0, m = _bodies(n, dim, seed=21)
    target = (x0 + 0.1).astype(np.float32)
    masses, pos = sopt.Parameter(m, name="m"), sopt.Parameter(x0, name="x0")
    sim = NBody(pos, v0, masses, dt=dt, G=1.0, softening=0.1)
    tape = sopt.Tape()
    with tape:
        s = sim.initial_state()
        for _ in range(steps):
            s = sim.step(s)
        loss = MSELoss()(s.x, target)
    tape.backward(loss)
    tape.submit()

    def ref_loss(mm, xx):
        x = ref.rollout(xx, v0, mm, 1.0, np.float32(0.1).item(), dt, steps)[-1][0]
        return ((x - target) ** 2).mean()

    assert abs(loss.item() - ref_loss(m, x0)) < 1e-5 * ref_loss(m, x0) + 1e-7
    h = 1e-6
    fd_m = [(ref_loss(m + h * e, x0) - ref_loss(m - h * e, x0)) / (2 * h) for e in np.eye(n)]
    fd_x = [(ref_loss(m, x0 + h * e.reshape(n, dim)) - ref_loss(m, x0 - h * e.reshape(n, dim))) / (2 * h)
            for e in np.eye(n * dim)]
    assert _rel(masses.grad_numpy(), np.array(fd_m)) < 1e-3
    assert _rel(pos.grad_numpy().ravel(), np.array(fd_x)) < 1e-3


# -- physics ----------------------------------------------------------------------------------------------------
def _kepler(m1: float, m2: float, a: float, e: float) -> tuple[np.ndarray, np.ndarray, float]:
    """Two bodies at pericenter of an orbit of semi-major axis a and eccentricity e (G = 1, centre of mass at
    rest at the origin), and Kepler's period 2 pi sqrt(a^3 / (G (m1 + m2)))."""
    M = m1 + m2
    r = np.array([a * (1 - e), 0.0])
    w = np.array([0.0, np.sqrt(M * (1 + e) / (a * (1 - e)))])   # vis-viva at pericenter
    x0 = np.stack([-m2 / M * r, m1 / M * r])
    v0 = np.stack([-m2 / M * w, m1 / M * w])
    return x0, v0, 2 * np.pi * np.sqrt(a**3 / M)


def _measured_period(xs: np.ndarray, dt: float) -> float:
    """Time at which the separation's angle, unwrapped, first reaches 2 pi (linear between steps)."""
    rel = xs[:, 1] - xs[:, 0]
    angle = np.unwrap(np.arctan2(rel[:, 1], rel[:, 0]))
    k = int(np.flatnonzero(angle >= 2 * np.pi)[0])
    return dt * (k - 1 + (2 * np.pi - angle[k - 1]) / (angle[k] - angle[k - 1]))


def test_kepler_period_is_second_order_and_energy_is_conserved() -> None:
    m1, m2 = 1.0, 0.5
    x0, v0, period = _kepler(m1, m2, a=1.0, e=0.5)
    errors = {}
    for n in (200, 400):   # steps per orbit
        dt = period / n
        sim = NBody(x0, v0, [m1, m2], dt=dt, G=1.0)
        states = _rollout(sim, int(1.05 * n))
        xs = np.array([s.x.to_numpy().reshape(2, 2) for s in states], np.float64)
        errors[n] = _measured_period(xs, dt) / period - 1
        if n == 400:
            energy = np.array([sim.energy(s) for s in states])
            drift = np.abs(energy / energy[0] - 1)
    # leapfrog: the period error is O(dt^2), so halving dt divides it by 4
    assert abs(errors[400]) < 2e-3, errors
    assert 3.5 < errors[200] / errors[400] < 4.5, errors
    # energy: bounded oscillation over the orbit (largest at pericenter), back to its start after a period
    assert drift.max() < 1e-3, drift.max()
    assert drift[400] < 1e-5, drift[400]


def test_total_momentum_is_conserved_with_unequal_masses() -> None:
    rng = np.random.default_rng(7)
    n, steps = 7, 400
    x0, v0, _ = _bodies(n, 3, seed=7)
    m = rng.uniform(0.1, 3.0, n)   # a factor ~30 between masses
    sim = NBody(x0, v0, m, dt=0.005, G=1.0, softening=0.05)
    states = _rollout(sim, steps)
    p0, p1 = sim.momentum(states[0]), sim.momentum(states[-1])
    scale = float((m * np.linalg.norm(v0, axis=1)).sum())
    mv0 = m[:, None] * states[0].numpy()["v"]
    mv1 = m[:, None] * states[-1].numpy()["v"]
    assert np.abs(mv1 - mv0).max() > 0.1 * scale            # the bodies' momenta changed a lot...
    assert np.linalg.norm(p1 - p0) < 1e-5 * scale, (p0, p1)  # ...their sum did not (float32 rounding)
    assert np.linalg.norm(p0) > 0.1 * scale                  # and it is not trivially zero


# -- bad input --------------------------------------------------------------------------------------------------
X2 = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
V2 = np.zeros((3, 2))
M2 = np.ones(3)


@pytest.mark.parametrize("kwargs,match", [
    ({"masses": [1.0, 0.0, 1.0]}, r"NBody masses must be > 0 kg, got 0"),
    ({"masses": [1.0, -2.0, 1.0]}, r"NBody masses must be > 0 kg, got -2"),
    ({"masses": [1.0, 1.0]}, r"NBody masses: got shape \(2,\), expected \(3,\) or \(1,\)"),
    ({"masses": [1.0, np.nan, 1.0]}, r"NBody masses contains 1 non-finite"),
    ({"x0": np.array([[0.0, 0.0], [1.0, 0.0], [1.0, 0.0]])}, r"bodies 1 and 2 start at the same position"),
    ({"x0": np.zeros((3, 4))}, r"NBody x0 must have shape \(N, 2\) or \(N, 3\).*got \(3, 4\)"),
    ({"x0": np.zeros(3)}, r"NBody x0 must have shape \(N, 2\) or \(N, 3\).*got \(3,\)"),
    ({"x0": [[0.0, np.nan], [1.0, 0.0], [0.0, 1.0]]}, r"NBody x0 contains 1 non-finite"),
    ({"v0": np.zeros((3, 3))}, r"NBody initial v: got shape \(3, 3\), expected \(3, 2\)"),
    ({"v0": [[0.0, 0.0], [np.inf, 0.0], [0.0, 0.0]]}, r"NBody initial v contains 1 non-finite"),
    ({"dt": 0.0}, r"NBody dt must be in \(0.0, inf\), got 0.0"),
    ({"dt": -1e-3}, r"NBody dt must be in \(0.0, inf\)"),
    ({"G": 0.0}, r"NBody G must be > 0"),
    ({"softening": -0.1}, r"NBody softening must be >= 0 m, got -0.1"),
    ({"softening": [0.1, 0.2]}, r"NBody softening: got shape \(2,\), expected \(1,\)"),
])
def test_bad_arguments_raise(kwargs: dict, match: str) -> None:
    args = {"x0": X2, "v0": V2, "masses": M2, "dt": 1e-3, "G": 1.0, **kwargs}
    with pytest.raises(ValueError, match=match):
        NBody(args.pop("x0"), args.pop("v0"), args.pop("masses"), **args)


def test_coincident_bodies_are_allowed_with_softening() -> None:
    x0 = np.array([[0.5, 0.5], [0.5, 0.5], [0.0, 1.0]])
    sim = NBody(x0, V2, M2, dt=1e-3, G=1.0, softening=0.1)
    a = sim.initial_state().a.to_numpy().reshape(3, 2)
    np.testing.assert_allclose(a, ref.accelerations(x0, M2, 1.0, np.float32(0.1).item()), rtol=1e-5, atol=1e-6)


def test_step_rejects_a_state_of_another_shape_and_a_control() -> None:
    sim = NBody(X2, V2, M2, dt=1e-3, G=1.0, softening=0.1)
    other = NBody(np.zeros((3, 3)) + np.arange(3)[:, None], np.zeros((3, 3)), M2, dt=1e-3, G=1.0)
    with pytest.raises(ValueError, match=r"NBody.step: state array 'x' has shape \(3, 3\).*expected float32 of "
                                         r"shape \(3, 2\)"):
        sim.step(other.initial_state())
    with pytest.raises(ValueError, match=r"NBody.step takes no control input, got Tensor"):
        sim.step(sim.initial_state(), control=other.initial_state().x)
