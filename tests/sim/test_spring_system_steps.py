"""SpringSystem.steps (sopt/sim/spring_system_steps.py): the fused multi-step kernels against n calls of step on
a tape (final state and every gradient), both layouts (groupshared; strided global memory with more particles
than threads), ground and pinned particles, dispatch counts, and a finite-difference check against the float64
reference."""

from __future__ import annotations

from typing import Callable

import numpy as np
import pytest

import sopt
from sopt.runtime import device as dev
from sopt.sim.grid_barrier import max_groups
from sopt.sim.spring_system import SpringSystem
from tests.sim.test_spring_system import (assert_close, chain2d_per_element, cloth3d_shared_ground, current_values,
                                          reference_run, triangle2d_landing)

P = sopt.Parameter


def tape_run(sim: SpringSystem, steps: int, fused: bool, seeds: tuple[np.ndarray, np.ndarray],
             chunks: list[int] | None = None) -> dict[str, np.ndarray]:
    """Final x, v and every Parameter's gradient of <seed_x, x_T> + <seed_v, v_T>, through ``steps`` calls of
    step or through ``sim.steps`` (in calls of ``chunks`` steps each, default one call)."""
    for p in sim.parameters():
        p.zero_grad()
    tape = sopt.Tape()
    with tape:
        s = sim.initial_state()
        if fused:
            for k in chunks or [steps]:
                s = sim.steps(s, k)
        else:
            for _ in range(steps):
                s = sim.step(s)
    tape.backward(grads={s.x: seeds[0].astype(np.float32), s.v: seeds[1].astype(np.float32)})
    tape.submit()
    out = {"x": s.x.to_numpy().astype(np.float64), "v": s.v.to_numpy().astype(np.float64)}
    for name, p in sim.named_parameters():
        out[name] = np.asarray(p.grad_numpy(), np.float64).copy()
    return out


def compare_with_steps(sim: SpringSystem, steps: int, chunks: list[int] | None = None, rtol: float = 1e-5) -> None:
    rng = np.random.default_rng(1)
    seeds = (rng.normal(size=(sim.n_particles, sim.dim)), rng.normal(size=(sim.n_particles, sim.dim)))
    want = tape_run(sim, steps, False, seeds)
    got = tape_run(sim, steps, True, seeds, chunks)
    assert set(got) == set(want)
    # positions: relative to the displacement, but float32 positions resolve nothing below a few ulp of |x|
    # (the fused kernels' reciprocal square root moves a short run's positions by about that much)
    x0 = sim.coefficient("x0").numpy()
    err = float(np.abs(got["x"] - want["x"]).max())
    floor = 4 * float(np.spacing(np.float32(np.abs(want["x"]).max())))
    assert err < rtol * float(np.abs(want["x"] - x0).max()) + floor, f"positions differ by {err:.3g}"
    if np.abs(want["v"]).max() == 0:   # every particle landed (and stuck) or is pinned
        np.testing.assert_array_equal(got["v"], want["v"])
    else:
        assert_close(got["v"], want["v"], rtol, "velocity")
    for name in want:
        if name not in ("x", "v"):
            assert_close(got[name], want[name], rtol, f"dL/d{name}")


# -- configurations (no actuators: steps takes no control) --------------------------------------------------------
def chain2d_shared_free(rng: np.random.Generator) -> SpringSystem:
    """5 particles, 2D, shared trainable coefficients, nothing pinned, no ground."""
    x0 = np.linspace(0.0, 1.0, 5)[:, None] * [1.5, 0.4] + rng.normal(0, 0.02, (5, 2))
    return SpringSystem(P(x0, name="x0"), [[0, 1], [1, 2], [3, 2], [3, 4], [0, 2]],
                        v0=P(rng.normal(0, 0.3, (5, 2)), name="v0"), stiffness=P([60.0], name="k"),
                        damping=P([0.3], name="c"), rest_length=P([0.4], name="l0"), mass=P([0.7], name="m"),
                        gravity=P([0.3, -9.81], name="g"), dt=2e-3)


def cloth3d_per_element_ground_pinned(rng: np.random.Generator) -> SpringSystem:
    """3 x 3 cloth, 3D, per-element trainable coefficients, one pinned particle, falling onto the ground."""
    base = SpringSystem.cloth(3, 3, 0.1, dim=3, origin=(0.0, 0.008, 0.0), stiffness=1.0, dt=1e-3)
    n, s_count = base.n_particles, base.n_springs
    x0 = base.coefficient("x0").numpy() + rng.normal(0, 0.003, (n, 3))
    v0 = rng.normal(0, 0.3, (n, 3)) + [0.0, -0.8, 0.0]
    lengths = np.linalg.norm(x0[base.springs[:, 1]] - x0[base.springs[:, 0]], axis=1)
    return SpringSystem(P(x0, name="x0"), base.springs, v0=P(v0, name="v0"),
                        stiffness=P(rng.uniform(30, 60, s_count), name="k"),
                        damping=P(rng.uniform(0.05, 0.2, s_count), name="c"),
                        rest_length=P(lengths * rng.uniform(0.9, 1.1, s_count), name="l0"),
                        mass=P(rng.uniform(0.05, 0.1, n), name="m"), gravity=P([0.2, -9.81, 0.1], name="g"),
                        pinned=[8], ground=0.0, dt=2e-3)


def cloth3d_strided(rng: np.random.Generator, shared: bool) -> SpringSystem:
    """9 x 9 cloth (81 particles) on groups of 64 threads: each thread loops over up to two particles. Mixed
    coefficients: per-spring stiffness, shared damping, constant rest length and mass, trainable gravity; top
    corners pinned; the bottom rows land on the ground."""
    base = SpringSystem.cloth(9, 9, 0.05, dim=3, origin=(0.0, 0.003, 0.0), pin="top_corners", stiffness=1.0,
                              dt=1e-3)
    n, s_count = base.n_particles, base.n_springs
    x0 = base.coefficient("x0").numpy() + rng.normal(0, 0.002, (n, 3))
    v0 = rng.normal(0, 0.2, (n, 3)) + [0.1, -0.6, 0.0]
    sim = SpringSystem(P(x0, name="x0"), base.springs, v0=P(v0, name="v0"),
                       stiffness=P(rng.uniform(30, 60, s_count), name="k"), damping=P([0.1], name="c"),
                       mass=0.02, gravity=P([0.0, -9.81, 0.2], name="g"), pinned=base.pinned_mask, ground=0.0,
                       dt=1e-3)
    fused = sim.fused_steps
    assert (fused.threads, fused.groups, fused.shared) == (   # the automatic choice
        {"forward": 128, "backward": 128}, {"forward": 1, "backward": 1}, True)
    fused.threads, fused.shared = {"forward": 64, "backward": 64}, shared
    return sim


def with_layout(make: Callable[[np.random.Generator], SpringSystem], threads: int, groups: tuple[int, int],
                shared: bool = False) -> Callable[[np.random.Generator], SpringSystem]:
    """``make`` with the fused kernels' layout set: ``threads`` per group, (forward, backward) ``groups``."""
    def made(rng: np.random.Generator) -> SpringSystem:
        sim = make(rng)
        fused = sim.fused_steps
        fused.threads, fused.shared = {"forward": threads, "backward": threads}, shared
        fused.groups = {"forward": groups[0], "backward": groups[1]}
        return sim
    return made


CONFIGS: dict[str, tuple[Callable[[np.random.Generator], SpringSystem], int, list[int] | None]] = {
    "chain2d_per_element_pinned": (lambda rng: chain2d_per_element(rng)[0], 12, None),
    "chain2d_shared_free": (chain2d_shared_free, 12, [5, 7]),
    "cloth3d_per_element_ground_pinned": (cloth3d_per_element_ground_pinned, 15, None),
    "cloth3d_shared_ground_pinned": (lambda rng: cloth3d_shared_ground(rng)[0], 15, [4, 11]),
    "triangle2d_landing": (lambda rng: triangle2d_landing(rng)[0], 40, None),
    "cloth3d_strided_shared": (lambda rng: cloth3d_strided(rng, True), 10, None),
    "cloth3d_strided_global": (lambda rng: cloth3d_strided(rng, False), 10, [3, 7]),
    # one particle per thread in global memory: the *_reg kernels (springs and their gradient sums in registers)
    "cloth3d_registers": (with_layout(lambda rng: cloth3d_strided(rng, False), 128, (1, 1)), 10, [3, 7]),
    "chain2d_registers": (with_layout(lambda rng: chain2d_per_element(rng)[0], 32, (1, 1)), 12, None),
    "landing_registers": (with_layout(lambda rng: cloth3d_per_element_ground_pinned(rng), 32, (1, 1)), 15, None),
}


@pytest.mark.parametrize("config", list(CONFIGS))
def test_fused_steps_equal_single_steps(config: str) -> None:
    make, steps, chunks = CONFIGS[config]
    sim = make(np.random.default_rng(7))
    fused = sim.fused_steps
    registers = fused.groups["forward"] * fused.threads["forward"] >= sim.n_particles and not fused.shared
    assert (fused.register_degree("backward") > 0) == registers == config.endswith("_registers")
    compare_with_steps(sim, steps, chunks)
    if sim.ground is not None:   # the contact was exercised
        x, _ = reference_run(sim, current_values(sim), steps, None)
        assert (x[:, 1] == sim.ground).sum() >= 2


def test_more_particles_than_threads_40x40() -> None:
    """1600 particles (global memory) on the automatic layout: on CUDA 25 groups of 64 threads (a grid barrier
    between steps, the springs in registers), elsewhere one group, 1024 threads forward (thread i also steps
    particle i + 1024 when there is one), 512 in the adjoint (up to four particles each)."""
    rng = np.random.default_rng(3)
    base = SpringSystem.cloth(40, 40, 0.02, dim=3, pin="top_row", stiffness=1.0, dt=1e-3)
    x0 = base.coefficient("x0").numpy() + rng.normal(0, 0.002, (base.n_particles, 3))
    sim = SpringSystem(x0, base.springs, v0=P(rng.normal(0, 0.2, (base.n_particles, 3)), name="v0"),
                       stiffness=P(rng.uniform(50, 100, base.n_springs), name="k"), damping=P([0.05], name="c"),
                       mass=P([0.01], name="m"), gravity=(0.3, -9.81, 0.5), pinned=base.pinned_mask, dt=1e-3)
    fused = sim.fused_steps
    if dev.device_kind() == "cuda":
        layout = ({"forward": 64, "backward": 64}, {"forward": 25, "backward": 25}, False)
    else:
        layout = ({"forward": 1024, "backward": 512}, {"forward": 1, "backward": 1}, False)
    assert sim.n_particles == 1600 and (fused.threads, fused.groups, fused.shared) == layout
    compare_with_steps(sim, 5)


# Several groups wait for each other at a grid barrier: CUDA only (a software Vulkan driver may run the groups
# one after another, and the first would wait forever).
cuda_only = pytest.mark.skipif("dev.device_kind() != 'cuda'", reason="several thread groups need CUDA")


@cuda_only
@pytest.mark.parametrize("config", ["chain2d_shared_free", "cloth3d_per_element_ground_pinned",
                                    "cloth3d_strided_global", "triangle2d_landing"])
def test_several_groups_equal_single_steps(config: str) -> None:
    """The multi-group layout (groups of 64 threads, some with no particle; the forward and the adjoint with
    different group counts) equals n single steps: states, per-element and shared gradients (summed over the
    groups)."""
    make, steps, chunks = CONFIGS[config]
    sim = make(np.random.default_rng(7))
    fused = sim.fused_steps
    fused.threads, fused.groups, fused.shared = {"forward": 64, "backward": 64}, {"forward": 2, "backward": 3}, False
    compare_with_steps(sim, steps, chunks)


@cuda_only
def test_several_groups_40x40_many_particles_per_thread() -> None:
    """1600 particles on 4 groups of 64 threads (up to 7 particles per thread), 60 steps."""
    rng = np.random.default_rng(4)
    base = SpringSystem.cloth(40, 40, 0.02, dim=3, pin="top_corners", stiffness=1.0, dt=1e-3)
    sim = SpringSystem(base.coefficient("x0").numpy(), base.springs,
                       stiffness=P(rng.uniform(50, 100, base.n_springs), name="k"), damping=P([0.05], name="c"),
                       mass=P([0.01], name="m"), pinned=base.pinned_mask, dt=1e-3)
    fused = sim.fused_steps
    fused.threads, fused.groups, fused.shared = {"forward": 64, "backward": 64}, {"forward": 4, "backward": 4}, False
    compare_with_steps(sim, 60)


def test_group_count_is_checked() -> None:
    sim = chain2d_shared_free(np.random.default_rng(2))
    most = max_groups() or 1
    sim.fused_steps.groups = {"forward": 1, "backward": most + 1}
    with pytest.raises(ValueError, match=rf"groups\['backward'\] = {most + 1}; allowed are 1 to {most}"):
        sim.steps(sim.initial_state(), 2)
    if most > 1:
        sim.fused_steps.groups = {"forward": 2, "backward": 1}
        with pytest.raises(ValueError, match=r"groups\['forward'\] = 2 needs shared = False"):
            sim.steps(sim.initial_state(), 2)


def test_long_runs_split_into_fused_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    """A run whose saved states would pass int32 element offsets is split into several fused calls (the limit
    lowered here so that 12 steps take three calls) with the same result."""
    from sopt.sim import spring_system_steps
    sim = chain2d_shared_free(np.random.default_rng(2))
    per_step = 3 * sim.n_particles * sim.dim
    monkeypatch.setattr(spring_system_steps, "MAX_ELEMENTS", 5 * per_step)
    assert sim.fused_steps.max_steps_per_call(3) == 4
    tape = sopt.Tape()
    with tape:
        sim.steps(sim.initial_state(), 12)
    assert [node.name for node in tape.nodes].count("SpringSystem.steps") == 3
    tape.reset()
    compare_with_steps(sim, 12)


def test_dispatches() -> None:
    """One forward and one adjoint dispatch for the whole run, with and without ground."""
    for ground in (None, -1.0):
        sim = SpringSystem.chain(5, 1.0, dim=3, stiffness=P(np.full(4, 50.0)), damping=P([0.1]), ground=ground,
                                 dt=1e-3)
        tape = sopt.Tape()
        with tape:
            s = sim.initial_state()
            before = dev.dispatch_count()
            s = sim.steps(s, 9)
            forward = dev.dispatch_count() - before
        before = dev.dispatch_count()
        tape.backward(grads={s.x: np.ones((5, 3), np.float32)})
        backward = dev.dispatch_count() - before
        tape.submit()
        assert (forward, backward) == (1, 1)
        assert np.abs(sim.stiffness.parameter.grad_numpy()).max() > 0


def test_eager_steps_match_single_steps() -> None:
    """Outside a tape steps runs at once (one dispatch, no saved states), in both layouts."""
    rng = np.random.default_rng(5)
    for shared in (True, False):
        sim = SpringSystem.cloth(3, 4, 0.1, dim=2, pin="top_corners", stiffness=40.0, damping=0.1, mass=0.05,
                                 v0=rng.normal(0, 0.3, (12, 2)), ground=0.02, dt=2e-3)
        sim.fused_steps.shared = shared
        s = sim.initial_state()
        for _ in range(25):
            s = sim.step(s)
        want = s.numpy()
        before = dev.dispatch_count()
        got = sim.steps(sim.initial_state(), 25).numpy()
        assert dev.dispatch_count() - before == 1   # initial_state is a buffer copy, no dispatch
        for name in ("x", "v"):
            np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-6)


def test_gradients_match_finite_differences() -> None:
    """The fused adjoint against central differences of the float64 reference (contact, time of impact)."""
    rng = np.random.default_rng(7)
    sim, _ = triangle2d_landing(rng)
    steps = 40
    seeds = (rng.normal(size=(sim.n_particles, sim.dim)), rng.normal(size=(sim.n_particles, sim.dim)))
    got = tape_run(sim, steps, True, seeds)
    values = current_values(sim)

    def loss(vals: dict[str, np.ndarray]) -> float:
        x, v = reference_run(sim, vals, steps, None)
        return float((seeds[0] * x).sum() + (seeds[1] * v).sum())

    names = [name for name, _ in sim.named_parameters()]
    assert sorted(names) == sorted(["stiffness", "damping", "rest_length", "mass", "gravity", "x0", "v0"])
    for name in names:
        base = values[name]
        fd = np.zeros_like(base)
        for idx in np.ndindex(base.shape):
            h = 1e-6 * max(1.0, abs(base[idx]))
            plus, minus = base.copy(), base.copy()
            plus[idx] += h
            minus[idx] -= h
            fd[idx] = (loss({**values, name: plus}) - loss({**values, name: minus})) / (2 * h)
        assert_close(got[name].reshape(fd.shape), fd, 1e-4, f"dL/d{name}")


def test_steps_arguments() -> None:
    sim = SpringSystem.chain(3, 1.0, stiffness=50.0, dt=1e-3)
    s = sim.initial_state()
    assert sim.steps(s, 0) is s
    with pytest.raises(ValueError, match=r"steps n must be >= 0, got -1"):
        sim.steps(s, -1)
    with pytest.raises(ValueError, match=r"state array 'x' has shape \(2, 2\)"):
        sim.steps(SpringSystem.chain(2, 1.0, stiffness=50.0, dt=1e-3).initial_state(), 3)
    actuated = SpringSystem.chain(3, 1.0, stiffness=50.0, actuators=[1], dt=1e-3)
    with pytest.raises(ValueError, match=r"has 1 actuator\(s\); pass a \(1,\) control"):
        actuated.steps(actuated.initial_state(), 3)   # the per-step path, which needs a control
    sim.fused_steps.threads = {"forward": 1024, "backward": 1024}
    with pytest.raises(ValueError, match=r"threads\['backward'\] = 1024; allowed are \(32, 64, 128, 256, 512\)"):
        sim.steps(s, 2)
    sim.fused_steps.threads = {"forward": 1024, "backward": 512}
    big = SpringSystem.cloth(33, 32, 0.02, stiffness=50.0, dt=1e-3)
    big.fused_steps.shared = True
    with pytest.raises(ValueError, match=r"shared = True needs N <= 1024, got N = 1056"):
        big.steps(big.initial_state(), 1)
