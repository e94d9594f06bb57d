"""Wave2D: forward against the float64 reference, gradients of every parameter kind against central
differences of it, standing modes at the discrete dispersion relation (with and without damping), momentum
conservation when insulated, the CFL bound, rollout with recomputation, dispatch counts, bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest

import sopt
from sopt.sim.rollout import rollout
from sopt.sim.wave2d import Wave2D
from tests.sim.dispatches import dispatches_per_step
from tests.sim.fields_reference import BOUNDARIES, DX, central_fd, f32, rel_err, wave_rollout


def cfl(c_max: float) -> float:
    return DX / (c_max * math.sqrt(2))


def run(sim: Wave2D, steps: int, seeds: tuple[np.ndarray, np.ndarray] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(u, v) after ``steps`` steps on a tape (backward seeded with dL/du_T, dL/dv_T = ``seeds`` when given)."""
    tape = sopt.Tape()
    with tape:
        s = sim.initial_state()
        for _ in range(steps):
            s = sim.step(s)
    if seeds is not None:
        tape.backward(grads={s.u: seeds[0].astype(np.float32), s.v: seeds[1].astype(np.float32)})
    tape.submit()
    out = s.numpy()
    return out["u"].astype(np.float64), out["v"].astype(np.float64)


def problem(shape: tuple[int, int], seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"u0": f32(rng.normal(size=shape)), "v0": f32(rng.normal(size=shape)),
            "c": f32(rng.uniform(0.5, 1.5, shape)), "damping": f32(rng.uniform(0.0, 3.0, shape)),
            "wu": f32(rng.normal(size=shape)), "wv": f32(rng.normal(size=shape))}


@pytest.mark.parametrize("boundary", BOUNDARIES)
@pytest.mark.parametrize("shared", [False, True], ids=["fields", "shared"])
def test_forward_matches_float64_reference(boundary, shared):
    p = problem((7, 6), 1)
    c, damping = (f32([1.2]), f32([0.5])) if shared else (p["c"], p["damping"])
    dt = 0.9 * cfl(c.max())
    sim = Wave2D(p["u0"], c, DX, dt, v0=p["v0"], damping=damping, boundary=boundary, boundary_value=0.4)
    u, v = run(sim, 40)
    want_u, want_v = wave_rollout(p["u0"], p["v0"], 40, c=c, damping=damping, dt=dt, dx=DX, boundary=boundary,
                                  value=0.4)
    assert np.abs(u - want_u).max() <= 1e-5 * np.abs(want_u).max()
    assert np.abs(v - want_v).max() <= 1e-5 * np.abs(want_v).max()


@pytest.mark.parametrize("shape", [(5, 4), (8, 7)], ids=["5x4", "8x7"])
@pytest.mark.parametrize("boundary", BOUNDARIES)
@pytest.mark.parametrize("case", ["fields", "shared"])
def test_gradients_match_finite_differences(shape, boundary, case):
    """fields: c and damping fields, u0 and v0 as Parameters; shared: (1,) c and damping Parameters, u0 a
    Parameter, v0 a constant (the first step's adjoint then writes no dL/dv)."""
    p = problem(shape, 2)
    steps = 10
    c, damping = (p["c"], p["damping"]) if case == "fields" else (f32([1.1]), f32([0.7]))
    dt = 0.8 * cfl(c.max())
    pars = {"c": sopt.Parameter(c, name="c"), "damping": sopt.Parameter(damping, name="damping"),
            "u0": sopt.Parameter(p["u0"], name="u0")}
    if case == "fields":
        pars["v0"] = sopt.Parameter(p["v0"], name="v0")
    sim = Wave2D(pars["u0"], pars["c"], DX, dt, v0=pars.get("v0", p["v0"]), damping=pars["damping"],
                 boundary=boundary, boundary_value=0.3)
    run(sim, steps, seeds=(p["wu"], p["wv"]))

    values = {"c": c, "damping": damping, "u0": p["u0"], "v0": p["v0"]}

    def loss(name: str, x: np.ndarray) -> float:
        a = {**values, name: x}
        u, v = wave_rollout(a["u0"], a["v0"], steps, c=a["c"], damping=a["damping"], dt=dt, dx=DX,
                            boundary=boundary, value=0.3)
        return float(np.sum(p["wu"] * u) + np.sum(p["wv"] * v))

    assert [name for name, _ in sim.named_parameters()] == list(pars)
    for name, par in pars.items():
        want = central_fd(lambda x: loss(name, x), values[name])
        assert par.grad_numpy().shape == want.shape
        assert rel_err(par.grad_numpy(), want) < 1e-3, name


def mode(shape: tuple[int, int], p: int, q: int, boundary: str) -> tuple[np.ndarray, float]:
    """An eigenvector of the discrete Laplacian and its eigenvalue's magnitude lambda (1/m^2): sines vanishing
    on the Dirichlet ghosts, cosines with zero slope at the insulated faces."""
    H, W = shape
    i, j = np.arange(H)[:, None], np.arange(W)[None, :]
    if boundary == "dirichlet":
        v = np.sin(np.pi * p * (i + 1) / (H + 1)) * np.sin(np.pi * q * (j + 1) / (W + 1))
        s = np.sin(np.pi * p / (2 * (H + 1))) ** 2 + np.sin(np.pi * q / (2 * (W + 1))) ** 2
    else:
        v = np.cos(np.pi * p * (i + 0.5) / H) * np.cos(np.pi * q * (j + 0.5) / W)
        s = np.sin(np.pi * p / (2 * H)) ** 2 + np.sin(np.pi * q / (2 * W)) ** 2
    return f32(v), 4.0 / DX ** 2 * s


@pytest.mark.parametrize("boundary", BOUNDARIES)
def test_standing_mode_follows_the_discrete_dispersion_relation(boundary):
    """u0 = mode, v0 = 0, uniform c: u_n = mode cos((n + 1/2) theta) / cos(theta / 2) with
    cos(theta) = 1 - dt^2 c^2 lambda / 2 (symplectic Euler's exact solution): constant amplitude, the discrete
    frequency; at one step to float32 precision, over 150 steps (several periods) to 3e-6."""
    shape, c = (9, 8), 1.3
    dt = 0.7 * cfl(c)
    u0, lam = mode(shape, 2, 1, boundary)
    theta = math.acos(1 - dt ** 2 * c ** 2 * lam / 2)
    exact = lambda n: math.cos((n + 0.5) * theta) / math.cos(theta / 2)   # noqa: E731
    sim = Wave2D(u0, c, DX, dt, boundary=boundary)
    state = sim.initial_state()
    for n in range(1, 151):
        state = sim.step(state)
        if n in (1, 37, 150):
            u = state.u.to_numpy().reshape(shape)
            assert np.abs(u - exact(n) * u0).max() <= (1e-7 if n == 1 else 3e-6), n
    assert 150 * theta > 4 * 2 * math.pi                    # several periods
    # the continuous frequency c sqrt(lambda) would be far off: the test sees the discrete relation
    continuous = math.cos(150 * dt * c * math.sqrt(lam))
    assert abs(continuous - exact(150)) > 0.05


@pytest.mark.parametrize("boundary", BOUNDARIES)
def test_damped_mode_amplitude(boundary):
    """With a uniform damping gamma a mode stays a mode; its amplitudes (a, b) of u and v follow the scalar
    step b' = (1 - dt gamma) b - dt c^2 lambda a, a' = a + dt b' (and decay)."""
    shape, c, gamma = (8, 7), 1.0, 2.5
    dt = 0.8 * cfl(c)
    u0, lam = mode(shape, 1, 2, boundary)
    sim = Wave2D(u0, c, DX, dt, damping=gamma, boundary=boundary)
    u, v = run(sim, 60)
    a, b = 1.0, 0.0
    for _ in range(60):
        b = (1 - dt * gamma) * b - dt * c ** 2 * lam * a
        a = a + dt * b
    assert np.abs(u - a * u0).max() <= 2e-6 and np.abs(v - b * u0).max() <= 2e-6 * c * math.sqrt(lam)
    assert math.hypot(a, b / (c * math.sqrt(lam))) < 0.3


def test_insulated_walls_conserve_momentum():
    """Insulated, uniform c, no damping: sum_i v_i is conserved (the Laplacian's rows sum to 0), so
    sum_i u_i grows by dt sum_i v_0 per step; to float32 rounding while the field moves."""
    rng = np.random.default_rng(7)
    shape = (8, 7)
    u0, v0 = f32(rng.normal(size=shape)), f32(rng.normal(size=shape) + 0.5)
    dt = 0.9 * cfl(1.0)
    steps = 100
    u, v = run(Wave2D(u0, 1.0, DX, dt, v0=v0, boundary="insulated"), steps)
    assert abs(v.sum() - v0.sum()) <= 2e-5 * np.abs(v0).sum()
    assert abs(u.sum() - (u0.sum() + steps * dt * v0.sum())) <= 2e-5 * np.abs(u0).sum()
    assert np.abs(v - v0).max() > 1


def test_cfl_violation_refused_with_the_bound():
    c = np.full((4, 5), 1.0)
    c[1, 2] = 2.0
    with pytest.raises(ValueError, match=r"dt=0\.036 s is unstable.*CFL condition dt <= dx / \(c_max sqrt\(2\)\) "
                                         r"= 0\.0353553 s.*c_max=2 m/s"):
        Wave2D(np.zeros((4, 5)), c, DX, 0.036)
    sim = Wave2D(np.zeros((4, 5)), c, DX, cfl(2.0))   # the bound itself is accepted
    assert sim.max_stable_dt() == pytest.approx(cfl(2.0), rel=1e-7)
    # damping lowers it: 4 / (gamma + sqrt(gamma^2 + 32 c^2 / dx^2)) = 4 / (5 + sqrt(12825)) = 0.0338273
    with pytest.raises(ValueError, match=r"dt <= 4 / \(gamma_max \+ sqrt\(gamma_max\^2 \+ 32 c_max\^2 / dx\^2\)\) "
                                         r"= 0\.0338273 s \(the CFL bound .* = 0\.0353553 s lowered by damping"):
        Wave2D(np.zeros((4, 5)), c, DX, 0.0345, damping=5.0)
    # a Parameter c is checked at construction, and on demand after training moved it
    cp = sopt.Parameter([1.0], name="c")
    sim = Wave2D(np.zeros((4, 5)), cp, DX, 0.05)
    cp.load([1.5])
    with pytest.raises(ValueError, match=r"= 0\.0471405 s"):
        sim.check_stability()


def test_rollout_with_recomputation_gives_the_same_gradient():
    """sopt.sim.rollout holding 12 of 25 states (recomputing the rest) gives the store-all gradient."""
    p = problem((6, 5), 3)
    grads = []
    for budget in (None, 12):
        c = sopt.Parameter(p["c"], name="c")
        sim = Wave2D(p["u0"], c, DX, 0.8 * cfl(p["c"].max()), v0=p["v0"], damping=0.3, boundary="insulated")
        tape = sopt.Tape()
        with tape:
            result = rollout(sim, sim.initial_state(), 24, budget=budget)
        tape.backward(grads={result.state.u: p["wu"].astype(np.float32)})
        tape.submit()
        grads.append(c.grad_numpy())
        assert budget is None or len(result.plan.segments) > 1
    assert np.abs(grads[1] - grads[0]).max() <= 1e-6 * np.abs(grads[0]).max()
    assert np.abs(grads[0]).max() > 0


def test_one_dispatch_per_step_forward_and_backward():
    c = sopt.Parameter(np.full((6, 5), 1.0), name="c")
    sim = Wave2D(np.ones((6, 5)), c, DX, 0.01)
    assert dispatches_per_step(sim, "u")[:2] == (1, 1)


GOOD = {"u0": np.zeros((4, 3)), "c": 1.0, "dx": DX, "dt": 0.01}


@pytest.mark.parametrize("change,match", [
    ({"u0": np.zeros((2, 3, 4))}, r"Wave2D u0 must be a 2-D field of shape \(H, W\).*got shape \(2, 3, 4\)"),
    ({"u0": np.full((4, 3), np.inf)}, r"Wave2D initial u contains 12 non-finite"),
    ({"v0": np.zeros((4, 4))}, r"Wave2D initial v: got shape \(4, 4\), expected \(4, 3\)"),
    ({"v0": np.array([[np.nan, 0, 0]] * 4)}, r"Wave2D initial v contains 4 non-finite"),
    ({"c": 0.0}, r"Wave2D c must be > 0 m/s, got 0"),
    ({"c": np.ones((4, 2))}, r"Wave2D c: got shape \(4, 2\), expected \(4, 3\) or \(1,\)"),
    ({"damping": -1.0}, r"Wave2D damping must be >= 0 1/s, got -1"),
    ({"damping": sopt.Parameter(np.ones((3, 4)))}, r"Wave2D damping: the Parameter has shape \(3, 4\)"),
    ({"dx": -0.1}, r"Wave2D dx must be in \(0.0, inf\), got -0.1"),
    ({"dt": 0}, r"Wave2D dt must be in \(0.0, inf\), got 0"),
    ({"boundary": "reflecting"}, r"Wave2D boundary must be 'dirichlet' or 'insulated', got 'reflecting'"),
    ({"boundary_value": "0"}, r"Wave2D boundary_value must be a number, got '0'"),
])
def test_bad_input_raises(change, match):
    with pytest.raises(ValueError, match=match):
        Wave2D(**{**GOOD, **change})


def test_bad_state_raises():
    sim = Wave2D(**GOOD)
    with pytest.raises(ValueError, match=r"Wave2D.step: the state has no array 'v'"):
        sim.step(sopt.sim.State(u=sim.initial_state().u))
