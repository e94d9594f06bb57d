"""Diffusion2D: forward against the float64 reference, gradients of every parameter kind against central
differences of it, the exact decay of discrete Fourier modes, heat conservation when insulated, the stability
bound, dispatch counts, bad input."""

from __future__ import annotations

import numpy as np
import pytest

import sopt
from sopt.losses import MSELoss
from sopt.sim.diffusion2d import Diffusion2D
from tests.sim.dispatches import dispatches_per_step
from tests.sim.fields_reference import BOUNDARIES, DX, central_fd, f32, rel_err, diffusion_rollout


def run(sim: Diffusion2D, steps: int, seed: np.ndarray | None = None) -> np.ndarray:
    """u after ``steps`` steps on a tape (backward seeded with dL/du_T = ``seed`` when given)."""
    tape = sopt.Tape()
    with tape:
        s = sim.initial_state()
        for _ in range(steps):
            s = sim.step(s)
    if seed is not None:
        tape.backward(grads={s.u: seed.astype(np.float32)})
    tape.submit()
    return s.u.to_numpy().reshape(sim.grid.shape).astype(np.float64)


def problem(shape: tuple[int, int], seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"u0": f32(rng.normal(size=shape)), "kappa": f32(rng.uniform(0.2, 1.0, shape)),
            "source": f32(rng.normal(size=shape)), "w": f32(rng.normal(size=shape))}


@pytest.mark.parametrize("boundary", BOUNDARIES)
@pytest.mark.parametrize("shared", [False, True], ids=["fields", "shared"])
def test_forward_matches_float64_reference(boundary, shared):
    p = problem((7, 6), 1)
    kappa, source = (f32([0.6]), f32([0.8])) if shared else (p["kappa"], p["source"])
    dt = 0.9 * DX ** 2 / (4 * kappa.max())
    sim = Diffusion2D(p["u0"], kappa, DX, dt, boundary=boundary, boundary_value=0.4, source=source)
    got = run(sim, 40)
    want = diffusion_rollout(p["u0"], 40, kappa=kappa, source=source, dt=dt, dx=DX, boundary=boundary, value=0.4)
    assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max()
    assert np.abs(want - p["u0"]).max() > 0.1   # the field did evolve


@pytest.mark.parametrize("shape", [(5, 4), (8, 7)], ids=["5x4", "8x7"])
@pytest.mark.parametrize("boundary", BOUNDARIES)
@pytest.mark.parametrize("case", ["fields", "shared"])
def test_gradients_match_finite_differences(shape, boundary, case):
    """fields: conductivity and source fields and u0 as Parameters; shared: (1,) conductivity and source
    Parameters, u0 a constant (the first step's adjoint then writes no dL/du)."""
    p = problem(shape, 2)
    steps = 8
    if case == "fields":
        kappa, source = p["kappa"], p["source"]
    else:
        kappa, source = f32([0.7]), f32([0.3])
    dt = 0.8 * DX ** 2 / (4 * kappa.max())
    k_par, s_par = sopt.Parameter(kappa, name="kappa"), sopt.Parameter(source, name="source")
    u_par = sopt.Parameter(p["u0"], name="u0") if case == "fields" else None
    sim = Diffusion2D(u_par if u_par is not None else p["u0"], k_par, DX, dt, boundary=boundary,
                      boundary_value=0.3, source=s_par)
    run(sim, steps, seed=p["w"])

    def loss(k: np.ndarray, s: np.ndarray, u0: np.ndarray) -> float:
        u = diffusion_rollout(u0, steps, kappa=k, source=s, dt=dt, dx=DX, boundary=boundary, value=0.3)
        return float(np.sum(p["w"] * u))

    want = {"conductivity": central_fd(lambda k: loss(k, source, p["u0"]), kappa),
            "source": central_fd(lambda s: loss(kappa, s, p["u0"]), source)}
    got = {"conductivity": k_par.grad_numpy(), "source": s_par.grad_numpy()}
    if u_par is not None:
        want["u0"] = central_fd(lambda u: loss(kappa, source, u), p["u0"])
        got["u0"] = u_par.grad_numpy()
    assert [name for name, _ in sim.named_parameters()] == list(got)
    for name in want:
        assert got[name].shape == want[name].shape
        assert rel_err(got[name], want[name]) < 1e-3, name


def test_shared_gradients_sum_over_many_waves():
    """A shared coefficient's gradient is reduced per wave, then added atomically: on 40 x 37 cells (many
    waves and workgroups) it still equals the finite difference."""
    shape, steps = (40, 37), 5
    p = problem(shape, 8)
    kappa, source = f32([0.6]), f32([-0.4])
    dt = 0.9 * DX ** 2 / (4 * 0.6)
    k_par, s_par = sopt.Parameter(kappa, name="kappa"), sopt.Parameter(source, name="source")
    run(Diffusion2D(p["u0"], k_par, DX, dt, boundary_value=1.0, source=s_par), steps, seed=p["w"])

    def loss(k: np.ndarray, s: np.ndarray) -> float:
        u = diffusion_rollout(p["u0"], steps, kappa=k, source=s, dt=dt, dx=DX, boundary="dirichlet", value=1.0)
        return float(np.sum(p["w"] * u))
    assert rel_err(k_par.grad_numpy(), central_fd(lambda k: loss(k, source), kappa)) < 1e-4
    assert rel_err(s_par.grad_numpy(), central_fd(lambda s: loss(kappa, s), source)) < 1e-4


def test_mse_loss_usage_gradient():
    """The documented usage: MSELoss of the final state, gradient w.r.t. a conductivity field."""
    p = problem((6, 5), 3)
    target = f32(np.random.default_rng(4).normal(size=(6, 5)))
    dt = 0.9 * DX ** 2 / (4 * p["kappa"].max())
    k_par = sopt.Parameter(p["kappa"], name="kappa")
    sim = Diffusion2D(p["u0"], k_par, DX, dt, boundary="insulated")
    tape = sopt.Tape()
    with tape:
        s = sim.initial_state()
        for _ in range(10):
            s = sim.step(s)
        loss = MSELoss()(s.u, target.astype(np.float32))
    tape.backward(loss)
    tape.submit()

    def mse(k: np.ndarray) -> float:
        u = diffusion_rollout(p["u0"], 10, kappa=k, source=0.0, dt=dt, dx=DX, boundary="insulated")
        return float(np.mean((u - target) ** 2))
    assert abs(loss.item() - mse(p["kappa"])) <= 1e-5 * mse(p["kappa"])
    assert rel_err(k_par.grad_numpy(), central_fd(mse, p["kappa"])) < 1e-3


def test_training_with_an_optimiser():
    """Adam fits a conductivity field (and a source) to a final state: the Parameters live in the optimiser's
    arena then (views at offsets, alternating sides); the loss falls and the last gradient still equals the
    finite difference at the moved values."""
    from sopt.optim import Adam
    shape, steps = (6, 5), 10
    p = problem(shape, 9)
    dt = 0.9 * DX ** 2 / 4   # stable for kappa <= 0.9
    target = diffusion_rollout(p["u0"], steps, kappa=0.2 + 0.4 * (p["kappa"] - 0.2), source=0.0, dt=dt, dx=DX,
                               boundary="insulated")
    s_par = sopt.Parameter(np.zeros(shape), name="source")
    k_par = sopt.Parameter(np.full(shape, 0.4), name="kappa")
    opt = Adam([s_par, k_par], lr=0.01)
    sim = Diffusion2D(p["u0"], k_par, DX, dt, boundary="insulated", source=s_par)
    tape = sopt.Tape()
    losses = []
    for it in range(31):
        with tape:
            s = sim.initial_state()
            for _ in range(steps):
                s = sim.step(s)
            loss = MSELoss()(s.u, target.astype(np.float32))
        tape.backward(loss)
        if it < 30:
            opt.step(tape.encoder)
        tape.submit()
        losses.append(loss.item())
    assert losses[-1] < 0.3 * losses[0]
    sim.check_stability()
    k_now, s_now = f32(k_par.numpy()), f32(s_par.numpy())

    def mse(k: np.ndarray, src: np.ndarray) -> float:
        u = diffusion_rollout(p["u0"], steps, kappa=k, source=src, dt=dt, dx=DX, boundary="insulated")
        return float(np.mean((u - target) ** 2))
    assert rel_err(k_par.grad_numpy(), central_fd(lambda k: mse(k, s_now), k_now)) < 1e-3
    assert rel_err(s_par.grad_numpy(), central_fd(lambda src: mse(k_now, src), s_now)) < 1e-3


def mode(shape: tuple[int, int], p: int, q: int, boundary: str) -> tuple[np.ndarray, float]:
    """An eigenvector of the discrete Laplacian on the grid and the sum of sin^2 terms of its eigenvalue
    (lambda = 4 / dx^2 * that sum): sines vanishing on the Dirichlet ghosts, cosines with zero slope at the
    insulated faces."""
    H, W = shape
    i, j = np.arange(H)[:, None], np.arange(W)[None, :]
    if boundary == "dirichlet":
        v = np.sin(np.pi * p * (i + 1) / (H + 1)) * np.sin(np.pi * q * (j + 1) / (W + 1))
        s = np.sin(np.pi * p / (2 * (H + 1))) ** 2 + np.sin(np.pi * q / (2 * (W + 1))) ** 2
    else:
        v = np.cos(np.pi * p * (i + 0.5) / H) * np.cos(np.pi * q * (j + 0.5) / W)
        s = np.sin(np.pi * p / (2 * H)) ** 2 + np.sin(np.pi * q / (2 * W)) ** 2
    return f32(v), s


@pytest.mark.parametrize("boundary", BOUNDARIES)
def test_fourier_mode_decays_by_the_exact_factor(boundary):
    """u = mode is multiplied by 1 - 4 dt kappa / dx^2 * s per step: to float32 precision after one step (a
    high mode), and after 100, 200, 300 steps (the slowest-decaying non-constant mode, so that rounding errors,
    which excite the other modes, decay faster than it)."""
    kappa, shape = 0.7, (9, 7)
    dt = 0.9 * DX ** 2 / (4 * kappa)
    u, s = mode(shape, 3, 2, boundary)
    factor = 1 - 4 * dt * kappa / DX ** 2 * s
    sim = Diffusion2D(u, kappa, DX, dt, boundary=boundary)
    one = run(sim, 1)
    # a few float32 ulps of the amplitude 1 (CUDA contracts a * b + c into FMAs, rounding differently from
    # lavapipe); a wrong stencil is off by ~1e-2
    assert np.abs(one - factor * u).max() <= 5e-7
    assert abs(factor) < 0.8   # a decay a wrong stencil would not reproduce

    u, s = mode(shape, 1, 1 if boundary == "dirichlet" else 0, boundary)
    factor = 1 - 4 * dt * kappa / DX ** 2 * s
    sim = Diffusion2D(u, kappa, DX, dt, boundary=boundary)
    state = sim.initial_state()
    for n in range(1, 301):
        state = sim.step(state)
        if n % 100 == 0:
            got = state.u.to_numpy().reshape(shape)
            assert np.abs(got - factor ** n * u).max() <= 1e-4 * factor ** n, n   # float32 roundoff over 300 steps (CUDA FMAs: 5.6e-5)
    assert factor ** 300 < 0.5


def test_total_heat_conserved_when_insulated():
    """sum_i u_i changes only by dt * sum_i s_i per step (no flux through insulated faces), to float32 rounding,
    while heat moves between cells of different conductivity."""
    rng = np.random.default_rng(5)
    shape = (8, 7)
    u0 = f32(300 + 20 * rng.normal(size=shape))
    kappa = f32(rng.uniform(0.1, 1.0, shape))
    source = f32(rng.normal(size=shape))
    dt = DX ** 2 / (4 * kappa.max())
    steps = 200
    u = run(Diffusion2D(u0, kappa, DX, dt, boundary="insulated", source=source), steps)
    expected = u0.sum() + steps * dt * source.sum()
    # float32 keeps ~3e-5 K of a 300 K cell: 200 steps x 56 cells of such roundings, partly cancelling
    assert abs(u.sum() - expected) <= 1e-6 * np.abs(u0).sum()
    assert np.abs(u - u0).max() > 10
    # through Dirichlet walls 10 K colder than the mean heat does leave: the test above is not vacuous
    walls = run(Diffusion2D(u0, kappa, DX, dt, boundary="dirichlet", boundary_value=float(u0.mean()) - 10,
                            source=source), steps)
    assert expected - walls.sum() > 1e-3 * np.abs(u0).sum()


def test_unstable_dt_refused_with_the_bound():
    kappa = np.full((4, 5), 0.5)
    kappa[2, 3] = 2.0
    bound = DX ** 2 / (4 * 2.0)   # 1.25e-3
    with pytest.raises(ValueError,
                       match=r"dt=0\.00126 s is unstable.*dx\^2 / \(4 kappa_max\) = 0\.00125 s.*kappa_max=2"):
        Diffusion2D(np.zeros((4, 5)), kappa, DX, 0.00126)
    sim = Diffusion2D(np.zeros((4, 5)), kappa, DX, bound)   # the bound itself is stable
    assert sim.max_stable_dt() == pytest.approx(bound, rel=1e-7)

    # a Parameter conductivity is checked at construction, and on demand after training moved it
    k = sopt.Parameter(np.full((4, 5), 0.5), name="kappa")
    with pytest.raises(ValueError, match=r"dx\^2 / \(4 kappa_max\) = 0\.005 s"):
        Diffusion2D(np.zeros((4, 5)), k, DX, 0.006)
    sim = Diffusion2D(np.zeros((4, 5)), k, DX, 0.004)
    assert sim.check_stability() == pytest.approx(0.005, rel=1e-7)
    k.load(np.full((4, 5), 0.8))
    with pytest.raises(ValueError, match=r"dt=0\.004 s is unstable.*= 0\.003125 s"):
        sim.check_stability()


def test_the_maximum_principle_holds_at_the_bound():
    """At dt = dx^2 / (4 kappa_max) the explicit step is a convex average: no new extrema, ever."""
    rng = np.random.default_rng(6)
    u0 = f32(rng.uniform(-1, 1, (6, 6)))
    kappa = f32(rng.uniform(0.1, 1.0, (6, 6)))
    u = run(Diffusion2D(u0, kappa, DX, DX ** 2 / (4 * kappa.max()), boundary="insulated"), 50)
    assert u.max() <= u0.max() + 1e-6 and u.min() >= u0.min() - 1e-6


def test_one_dispatch_per_step_forward_and_backward():
    k = sopt.Parameter(np.full((6, 5), 0.5), name="kappa")
    sim = Diffusion2D(np.ones((6, 5)), k, DX, 1e-3)
    assert dispatches_per_step(sim, "u")[:2] == (1, 1)
    assert np.abs(k.grad_numpy()).sum() > 0


GOOD = {"u0": np.zeros((4, 3)), "conductivity": 0.5, "dx": DX, "dt": 1e-3}


@pytest.mark.parametrize("change,match", [
    ({"u0": np.zeros(12)}, r"Diffusion2D u0 must be a 2-D field of shape \(H, W\).*got shape \(12,\)"),
    ({"u0": np.zeros((4, 0))}, r"Diffusion2D u0 must be a 2-D field.*got shape \(4, 0\)"),
    ({"u0": np.array([[0.0, np.nan, 0.0]] * 4)}, r"Diffusion2D initial u contains 4 non-finite"),
    ({"conductivity": -0.1}, r"Diffusion2D conductivity must be > 0 m\^2/s, got -0.1"),
    ({"conductivity": np.full((4, 3), 0.5) * np.array([1, 0, 1])}, r"conductivity must be > 0.*got 0 \(4 value"),
    ({"conductivity": np.ones((3, 4))}, r"Diffusion2D conductivity: got shape \(3, 4\), expected \(4, 3\) or \(1,\)"),
    ({"conductivity": sopt.Parameter(np.ones(5))}, r"conductivity: the Parameter has shape \(5,\), expected \(4, 3\)"),
    ({"source": np.ones((4, 4))}, r"Diffusion2D source: got shape \(4, 4\), expected \(4, 3\)"),
    ({"dx": 0.0}, r"Diffusion2D dx must be in \(0.0, inf\), got 0.0"),
    ({"dt": -1e-3}, r"Diffusion2D dt must be in \(0.0, inf\), got -0.001"),
    ({"boundary": "periodic"}, r"Diffusion2D boundary must be 'dirichlet' or 'insulated', got 'periodic'"),
    ({"boundary_value": float("inf")}, r"Diffusion2D boundary_value must be finite, got inf"),
])
def test_bad_input_raises(change, match):
    with pytest.raises(ValueError, match=match):
        Diffusion2D(**{**GOOD, **change})


def test_bad_state_raises():
    sim = Diffusion2D(**GOOD)
    other = Diffusion2D(np.zeros((3, 4)), 0.5, DX, 1e-3)
    with pytest.raises(ValueError,
                       match=r"Diffusion2D.step: state array 'u' has shape \(3, 4\).*expected .* \(4, 3\)"):
        sim.step(other.initial_state())
    with pytest.raises(ValueError, match="Diffusion2D.step takes no control"):
        sim.step(sim.initial_state(), control=sim.initial_state().u)
