"""Diffusion2D.steps (temporal blocking, K steps per dispatch): the final field and every gradient against n
recorded calls of step, on tiles smaller than the field and not dividing it; dispatch counts; the memory it
keeps; a finite-difference check against the float64 reference; eager use; Parameters in an optimiser's
arena; bad input."""

from __future__ import annotations

import numpy as np
import pytest

import sopt
from sopt.runtime import device as dev
from sopt.sim.diffusion2d import Diffusion2D
from sopt.sim.grid2d import TemporalBlocking
from tests.sim.fields_reference import BOUNDARIES, DX, central_fd, diffusion_rollout, f32, rel_err

K = 4
# 20 x 24 cells: 3 x 3 forward tiles of 7 x 9 (the last row and column cut short), 4 x 5 backward tiles of
# 6 x 5 (likewise); regions of 15 x 17 and 14 x 13 cells with the halo of K
SMALL = TemporalBlocking(steps=K, forward_tile=(7, 9), backward_tile=(6, 5))
SHAPE = (20, 24)


def problem(shape: tuple[int, int], seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"u0": f32(rng.normal(size=shape)), "kappa": f32(rng.uniform(0.2, 1.0, shape)),
            "source": f32(rng.normal(size=shape)), "w": f32(rng.normal(size=shape))}


def rollout(sim: Diffusion2D, n: int, fused: bool, seed: np.ndarray | None) -> np.ndarray:
    """u after n steps recorded on a tape (``sim.steps(s, n)`` or n x ``sim.step``), backward seeded with
    dL/du_n = ``seed`` when given, into Parameters' gradients zeroed first."""
    for p in sim.parameters():
        p.zero_grad()
    tape = sopt.Tape()
    with tape:
        s = sim.initial_state()
        if fused:
            s = sim.steps(s, n)
        else:
            for _ in range(n):
                s = sim.step(s)
    if seed is not None:
        tape.backward(grads={s.u: seed.astype(np.float32)})
    tape.submit()
    return s.u.to_numpy().reshape(sim.grid.shape).astype(np.float64)


def make(p: dict[str, np.ndarray], case: str, boundary: str, blocking: TemporalBlocking = SMALL
         ) -> tuple[Diffusion2D, dict[str, sopt.Parameter]]:
    """fields: conductivity, source and u0 Parameter fields; shared: (1,) conductivity and source Parameters,
    u0 a Parameter; shared_const_u0: the same with u0 a constant (no dL/du0 is written); u0_only: constant
    conductivity and source fields, u0 a Parameter (only the state's gradient is computed)."""
    if case in ("fields", "u0_only"):
        kappa, source = p["kappa"], p["source"]
    else:
        kappa, source = f32([0.7]), f32([-0.3])
    params = {}
    if case != "u0_only":
        params = {"conductivity": sopt.Parameter(kappa, name="kappa"), "source": sopt.Parameter(source, name="source")}
    if case != "shared_const_u0":
        params["u0"] = sopt.Parameter(p["u0"], name="u0")
    dt = 0.9 * DX ** 2 / (4 * kappa.max())
    sim = Diffusion2D(params.get("u0", p["u0"]), params.get("conductivity", kappa), DX, dt, boundary=boundary,
                      boundary_value=0.4, source=params.get("source", source), blocking=blocking)
    return sim, params


@pytest.mark.parametrize("n", [1, K - 1, K, 2 * K + 3])
@pytest.mark.parametrize("boundary", BOUNDARIES)
@pytest.mark.parametrize("case", ["fields", "shared", "shared_const_u0", "u0_only"])
def test_steps_equal_n_steps_with_gradients(n, boundary, case):
    p = problem(SHAPE, 1)
    sim, params = make(p, case, boundary)
    assert_steps_equal_n_steps(p, sim, params, n)


def assert_steps_equal_n_steps(p: dict[str, np.ndarray], sim: Diffusion2D, params: dict[str, sopt.Parameter],
                               n: int) -> None:
    """``sim.steps(s, n)`` and n calls of step give the same field and gradients (to 1e-5), which moved."""
    want_u = rollout(sim, n, fused=False, seed=p["w"])
    want = {name: par.grad_numpy() for name, par in params.items()}
    got_u = rollout(sim, n, fused=True, seed=p["w"])
    got = {name: par.grad_numpy() for name, par in params.items()}
    assert np.abs(got_u - want_u).max() <= 1e-5 * np.abs(want_u).max()
    assert np.abs(want_u - p["u0"]).max() > 0.05   # the field moved
    for name in want:
        assert np.abs(want[name]).max() > 0, name
        assert rel_err(got[name], want[name]) < 1e-5, name


def test_steps_default_blocking_on_many_tiles():
    """The default blocking (K = 8, 48 x 48 forward and 32 x 32 backward tiles) on 70 x 53 cells: 2 x 2 and
    3 x 2 tiles, none of them full at the far edges; 2K + 3 steps."""
    p = problem((70, 53), 2)
    sim, params = make(p, "fields", "dirichlet", TemporalBlocking())
    n = 2 * 8 + 3
    want_u = rollout(sim, n, fused=False, seed=p["w"])
    want = {name: par.grad_numpy() for name, par in params.items()}
    got_u = rollout(sim, n, fused=True, seed=p["w"])
    assert np.abs(got_u - want_u).max() <= 1e-5 * np.abs(want_u).max()
    for name, par in params.items():
        assert rel_err(par.grad_numpy(), want[name]) < 1e-5, name


def test_gradients_match_float64_finite_differences():
    """dL/dkappa (a field), dL/ds (shared) and dL/du0 of L = sum w * u_n through 2K + 3 fused steps against
    central differences of the float64 reference, on 9 x 11 cells cut into 2 x 2 forward tiles."""
    shape, n = (9, 11), 2 * K + 3
    p = problem(shape, 3)
    k_par = sopt.Parameter(p["kappa"], name="kappa")
    s_par = sopt.Parameter(f32([0.5]), name="source")
    u_par = sopt.Parameter(p["u0"], name="u0")
    dt = 0.8 * DX ** 2 / (4 * p["kappa"].max())
    blocking = TemporalBlocking(steps=K, forward_tile=(5, 6), backward_tile=(4, 7))
    sim = Diffusion2D(u_par, k_par, DX, dt, boundary="dirichlet", boundary_value=0.3, source=s_par, blocking=blocking)
    rollout(sim, n, fused=True, seed=p["w"])

    def loss(k: np.ndarray, s: np.ndarray, u0: np.ndarray) -> float:
        u = diffusion_rollout(u0, n, kappa=k, source=s, dt=dt, dx=DX, boundary="dirichlet", value=0.3)
        return float(np.sum(p["w"] * u))
    src = f32([0.5])
    assert rel_err(k_par.grad_numpy(), central_fd(lambda k: loss(k, src, p["u0"]), p["kappa"])) < 1e-3
    assert rel_err(s_par.grad_numpy(), central_fd(lambda s: loss(p["kappa"], s, p["u0"]), src)) < 1e-3
    assert rel_err(u_par.grad_numpy(), central_fd(lambda u: loss(p["kappa"], src, u), p["u0"])) < 1e-3


@pytest.mark.parametrize("n", [1, K, 2 * K + 3])
def test_dispatches_ceil_n_over_k_each_way(n):
    """Forward: ceil(n / K) dispatches; backward: as many (u0 a constant: no gradient copy into it)."""
    p = problem(SHAPE, 4)
    k_par = sopt.Parameter(p["kappa"], name="kappa")
    sim = Diffusion2D(p["u0"], k_par, DX, 1e-3, blocking=SMALL)
    blocks = -(-n // K)
    tape = sopt.Tape()
    with tape:
        s = sim.initial_state()
        before = dev.dispatch_count()
        s = sim.steps(s, n)
        forward = dev.dispatch_count() - before
    before = dev.dispatch_count()
    tape.backward(grads={s.u: p["w"].astype(np.float32)})
    backward = dev.dispatch_count() - before
    tape.submit()
    assert (forward, backward) == (blocks, blocks)
    assert np.abs(k_par.grad_numpy()).max() > 0


def test_tape_keeps_block_starts_only_when_differentiated():
    """With a gradient to compute the tape's pool holds the ceil(n/K) - 1 inner block starts and two adjoint
    fields besides the output; with none, nothing but the output (two scratch fields of the simulator serve)."""
    p = problem(SHAPE, 5)
    n, cells = 5 * K + 1, SHAPE[0] * SHAPE[1]
    blocks = -(-n // K)
    k_par = sopt.Parameter(p["kappa"], name="kappa")
    for kappa, extra in ((k_par, (blocks - 1 + 2) * cells), (p["kappa"], 0)):
        sim = Diffusion2D(p["u0"], kappa, DX, 1e-3, blocking=SMALL)
        tape = sopt.Tape()
        with tape:
            s = sim.initial_state()
            before = tape.pool_bytes
            s = sim.steps(s, n)
        assert tape.pool_bytes - before == 4 * (2 * cells + extra)   # the output u and its gradient, + extra
        tape.submit()
        want = diffusion_rollout(p["u0"], n, kappa=p["kappa"], source=0.0, dt=1e-3, dx=DX, boundary="dirichlet")
        got = s.u.to_numpy().reshape(SHAPE)
        assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max()


def test_eager_steps_equal_steps():
    """Outside a tape steps runs at once: the same field as n eager steps, ceil(n / K) dispatches; n = 0
    returns the state itself."""
    p = problem(SHAPE, 6)
    sim = Diffusion2D(p["u0"], p["kappa"], DX, 2e-3, boundary="insulated", source=p["source"], blocking=SMALL)
    start = sim.initial_state()
    assert sim.steps(start, 0) is start
    before = dev.dispatch_count()
    got = sim.steps(start, 3 * K + 2)
    assert dev.dispatch_count() - before == 4
    s = start
    for _ in range(3 * K + 2):
        s = sim.step(s)
    want = s.u.to_numpy()
    assert np.abs(got.u.to_numpy() - want).max() <= 1e-5 * np.abs(want).max()
    # a second call reuses the scratch fields; starting from the first call's output continues the rollout
    again = sim.steps(got, 3 * K + 2)
    ref = diffusion_rollout(p["u0"], 6 * K + 4, kappa=p["kappa"], source=p["source"], dt=2e-3, dx=DX,
                            boundary="insulated")
    assert np.abs(again.u.to_numpy().reshape(SHAPE) - ref).max() <= 1e-5 * np.abs(ref).max()


def test_parameters_in_an_optimiser_arena():
    """Parameters stepped by Adam live at offsets of the optimiser's arena, alternating sides: after two
    optimiser steps the fused gradients still equal those of n x step at the moved values."""
    from sopt.optim import Adam
    p = problem(SHAPE, 7)
    sim, params = make(p, "fields", "dirichlet")
    opt = Adam(list(params.values()), lr=0.01)
    n = 2 * K + 1
    for _ in range(2):
        rollout(sim, n, fused=True, seed=p["w"])
        opt.step()
    want_u = rollout(sim, n, fused=False, seed=p["w"])
    want = {name: par.grad_numpy() for name, par in params.items()}
    got_u = rollout(sim, n, fused=True, seed=p["w"])
    assert np.abs(got_u - want_u).max() <= 1e-5 * np.abs(want_u).max()
    for name, par in params.items():
        assert rel_err(par.grad_numpy(), want[name]) < 1e-5, name


@pytest.mark.parametrize("blocking,match", [
    (TemporalBlocking(steps=9), r"Diffusion2D blocking.steps must be in \[1, 8\], got 9"),
    (TemporalBlocking(steps=0), r"Diffusion2D blocking.steps must be >= 1, got 0"),
    (TemporalBlocking(forward_tile=(49, 48)), r"forward_tile \(49, 48\) with a halo of 8 cells needs a region of "
                                              r"65 x 64 = 4160 cells; the kernel's thread group holds at most 4096"),
    (TemporalBlocking(backward_tile=(32, 33)), r"backward_tile \(32, 33\) .* holds at most 2304"),
    (TemporalBlocking(forward_tile=(0, 4)), r"Diffusion2D blocking.forward_tile rows must be >= 1, got 0"),
    (TemporalBlocking(backward_tile=[4, 4]), r"backward_tile must be a \(rows, cols\) tuple, got \[4, 4\]"),
    ("fast", r"blocking must be a sopt.sim.grid2d.TemporalBlocking, got str"),
])
def test_bad_blocking_raises(blocking, match):
    with pytest.raises(ValueError, match=match):
        Diffusion2D(np.zeros((4, 3)), 0.5, DX, 1e-3, blocking=blocking)


def test_bad_steps_arguments_raise():
    sim = Diffusion2D(np.zeros((4, 3)), 0.5, DX, 1e-3)
    with pytest.raises(ValueError, match=r"Diffusion2D.steps n must be >= 0, got -1"):
        sim.steps(sim.initial_state(), -1)
    other = Diffusion2D(np.zeros((3, 4)), 0.5, DX, 1e-3)
    with pytest.raises(ValueError, match=r"Diffusion2D.steps: state array 'u' has shape \(3, 4\)"):
        sim.steps(other.initial_state(), 2)
    square = Diffusion2D(np.zeros((4, 4)), 0.5, DX, 1e-3)
    transposed = square.initial_state().u.view((4, 4), (1, 4))
    with pytest.raises(ValueError, match=r"Diffusion2D.steps: state array 'u' must be contiguous"):
        square.steps(sopt.sim.State(u=transposed), 2)
