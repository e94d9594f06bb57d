"""SpringSystem (sopt/sim/spring_system.py): forward against the float64 reference, tape gradients of every
coefficient kind against central differences of the reference, known physical answers, bad input."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
import slangpy as spy

import sopt
from sopt.runtime import device as dev
from sopt.sim import rollout
from sopt.sim.spring_system import SpringSystem
from tests.sim.dispatches import dispatches_per_step
from tests.sim.spring_system_reference import SpringParams
from tests.sim.spring_system_reference import rollout as ref_rollout

COEFFICIENTS = ("stiffness", "damping", "rest_length", "mass", "gravity")


def reference_params(sim: SpringSystem, values: dict[str, np.ndarray]) -> SpringParams:
    return SpringParams(sim.springs, values["stiffness"], values["damping"], values["rest_length"], values["mass"],
                        values["gravity"], sim.dt, sim.pinned_mask, sim.ground, sim.actuators, sim.actuation_strength)


def current_values(sim: SpringSystem) -> dict[str, np.ndarray]:
    """Every coefficient's and initial array's values as float64 (shared ones as shape (1,))."""
    return {name: sim.coefficient(name).numpy() for name in COEFFICIENTS + ("x0", "v0")}


def reference_run(sim: SpringSystem, values: dict[str, np.ndarray], steps: int,
                  controls: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    return ref_rollout(reference_params(sim, values), values["x0"], values["v0"], steps, controls)


def control_tensors(controls: np.ndarray | None) -> list[Any]:
    """One leaf tensor with a gradient buffer per step (as an MLP's output would be)."""
    if controls is None:
        return []
    device = dev.get_device()
    return [spy.Tensor.from_numpy(device, np.ascontiguousarray(c, np.float32)).with_grads(zero=True)
            for c in controls]


def gpu_run(sim: SpringSystem, steps: int, controls: np.ndarray | None = None,
            seeds: tuple[np.ndarray, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """x, v after ``steps`` steps; with ``seeds`` (dL/dx_T, dL/dv_T) also every Parameter's gradient and
    dL/dcontrol (``"control"``, (steps, A))."""
    tensors = control_tensors(controls)
    tape = sopt.Tape()
    with tape:
        s = sim.initial_state()
        for t in range(steps):
            s = sim.step(s, tensors[t] if tensors else None)
    if seeds is not None:
        tape.backward(grads={s.x: seeds[0].astype(np.float32), s.v: seeds[1].astype(np.float32)})
    tape.submit()
    out = {"x": s.x.to_numpy().astype(np.float64), "v": s.v.to_numpy().astype(np.float64)}
    if seeds is not None:
        for name, p in sim.named_parameters():
            out[name] = np.asarray(p.grad_numpy(), np.float64)
        if tensors:
            out["control"] = np.stack([t.grad.to_numpy() for t in tensors]).astype(np.float64)
    return out


def assert_close(got: np.ndarray, want: np.ndarray, rtol: float, what: str) -> float:
    """max |got - want| / max |want| < rtol; returns that error."""
    scale = float(np.abs(want).max())
    assert scale > 0, f"{what}: the reference is all zero, the comparison would prove nothing"
    err = float(np.abs(got - want).max()) / scale
    assert err < rtol, f"{what}: relative error {err:.3g} >= {rtol:g}"
    return err


# -- configurations: every coefficient kind, shared and per element, 2D and 3D, two sizes each ------------------
def chain2d_per_element(rng: np.random.Generator) -> tuple[SpringSystem, np.ndarray | None]:
    """4 particles, 2D, every coefficient per element and trainable, first particle pinned."""
    n, s_count = 4, 3
    x0 = np.array([[0.0, 0.0], [0.5, 0.1], [1.0, -0.1], [1.4, 0.2]]) + rng.normal(0, 0.02, (n, 2))
    springs = np.array([[0, 1], [2, 1], [2, 3]])
    lengths = np.linalg.norm(x0[springs[:, 1]] - x0[springs[:, 0]], axis=1)
    P = sopt.Parameter
    sim = SpringSystem(P(x0, name="x0"), springs, v0=P(rng.normal(0, 0.5, (n, 2)), name="v0"),
                       stiffness=P(rng.uniform(40, 80, s_count), name="k"),
                       damping=P(rng.uniform(0.1, 0.5, s_count), name="c"),
                       rest_length=P(lengths * rng.uniform(0.8, 1.1, s_count), name="l0"),
                       mass=P(rng.uniform(0.5, 1.5, n), name="m"), gravity=P([0.4, -9.81], name="g"),
                       pinned=[0], dt=2e-3)
    return sim, None


def chain2d_shared_actuated(rng: np.random.Generator) -> tuple[SpringSystem, np.ndarray | None]:
    """6 particles, 2D, every coefficient shared and trainable, two actuated springs."""
    P = sopt.Parameter
    x0 = np.linspace(0.0, 1.0, 6)[:, None] * [2.0, -0.6] + rng.normal(0, 0.02, (6, 2))
    sim = SpringSystem(P(x0, name="x0"), [[0, 1], [1, 2], [2, 3], [3, 4], [4, 5]],
                       v0=P(rng.normal(0, 0.3, (6, 2)), name="v0"), stiffness=P([60.0], name="k"),
                       damping=P([0.3], name="c"), rest_length=P([0.38], name="l0"), mass=P([0.7], name="m"),
                       gravity=P([0.0, -9.81], name="g"), pinned=[0], actuators=[1, 3], actuation_strength=0.3,
                       dt=2e-3)
    return sim, rng.uniform(-1, 1, (12, 2))


def cloth3d_per_element_ground(rng: np.random.Generator) -> tuple[SpringSystem, np.ndarray | None]:
    """3 x 3 cloth, 3D, per-element coefficients, falling onto the ground, three actuators."""
    base = SpringSystem.cloth(3, 3, 0.1, dim=3, origin=(0.0, 0.008, 0.0), stiffness=1.0, dt=1e-3)
    n, s_count = base.n_particles, base.n_springs
    P = sopt.Parameter
    x0 = base.coefficient("x0").numpy() + rng.normal(0, 0.003, (n, 3))
    v0 = rng.normal(0, 0.3, (n, 3)) + [0.0, -0.8, 0.0]
    lengths = np.linalg.norm(x0[base.springs[:, 1]] - x0[base.springs[:, 0]], axis=1)
    sim = SpringSystem(P(x0, name="x0"), base.springs, v0=P(v0, name="v0"),
                       stiffness=P(rng.uniform(30, 60, s_count), name="k"),
                       damping=P(rng.uniform(0.05, 0.2, s_count), name="c"),
                       rest_length=P(lengths * rng.uniform(0.9, 1.1, s_count), name="l0"),
                       mass=P(rng.uniform(0.05, 0.1, n), name="m"), gravity=P([0.2, -9.81, 0.1], name="g"),
                       pinned=[8], ground=0.0, actuators=[0, 5, 13], actuation_strength=0.2, dt=2e-3)
    return sim, rng.uniform(-1, 1, (15, 3))


def cloth3d_shared_ground(rng: np.random.Generator) -> tuple[SpringSystem, np.ndarray | None]:
    """2 x 4 cloth, 3D, shared coefficients, top corners pinned, bottom row landing on the ground."""
    P = sopt.Parameter
    base = SpringSystem.cloth(2, 4, 0.1, dim=3, origin=(0.0, 0.004, 0.0), pin="top_corners", stiffness=1.0, dt=1e-3)
    x0 = base.coefficient("x0").numpy() + rng.normal(0, 0.002, (8, 3))
    v0 = rng.normal(0, 0.2, (8, 3)) + [0.3, -0.5, 0.0]
    sim = SpringSystem(P(x0, name="x0"), base.springs, v0=P(v0, name="v0"), stiffness=P([50.0], name="k"),
                       damping=P([0.1], name="c"), rest_length=P([0.11], name="l0"), mass=P([0.08], name="m"),
                       gravity=P([0.0, -9.81, 0.0], name="g"), pinned=base.pinned_mask, ground=-0.001, dt=2e-3)
    return sim, None


def triangle2d_landing(rng: np.random.Generator) -> tuple[SpringSystem, np.ndarray | None]:
    """3 particles, 2D, per-element coefficients, thrown sideways onto the ground: each lands (sticks) at its own
    step, so the final positions depend on the rollout through the contact's time of impact."""
    P = sopt.Parameter
    x0 = np.array([[0.0, 0.03], [0.1, 0.045], [0.05, 0.09]]) + rng.normal(0, 0.002, (3, 2))
    v0 = rng.normal(0, 0.1, (3, 2)) + [0.6, -1.5]
    springs = np.array([[0, 1], [1, 2], [2, 0]])
    lengths = np.linalg.norm(x0[springs[:, 1]] - x0[springs[:, 0]], axis=1)
    sim = SpringSystem(P(x0, name="x0"), springs, v0=P(v0, name="v0"), stiffness=P(rng.uniform(20, 40, 3), name="k"),
                       damping=P(rng.uniform(0.05, 0.1, 3), name="c"),
                       rest_length=P(lengths * rng.uniform(0.95, 1.05, 3), name="l0"),
                       mass=P(rng.uniform(0.05, 0.1, 3), name="m"), gravity=P([0.0, -9.81], name="g"), ground=0.0,
                       dt=2e-3)
    return sim, None


CONFIGS = {
    "chain2d_per_element": (chain2d_per_element, 12),
    "chain2d_shared_actuated": (chain2d_shared_actuated, 12),
    "cloth3d_per_element_ground": (cloth3d_per_element_ground, 15),
    "cloth3d_shared_ground": (cloth3d_shared_ground, 15),
    "triangle2d_landing": (triangle2d_landing, 40),
}


@pytest.mark.parametrize("config", list(CONFIGS))
def test_gradients_match_finite_differences(config: str) -> None:
    make, steps = CONFIGS[config]
    rng = np.random.default_rng(7)
    sim, controls = make(rng)
    n, dim = sim.n_particles, sim.dim
    seeds = (rng.normal(size=(n, dim)), rng.normal(size=(n, dim)))
    got = gpu_run(sim, steps, controls, seeds)
    values = current_values(sim)

    def loss(vals: dict[str, np.ndarray], ctrl: np.ndarray | None) -> float:
        x, v = reference_run(sim, vals, steps, ctrl)
        return float((seeds[0] * x).sum() + (seeds[1] * v).sum())

    names = [name for name, _ in sim.named_parameters()]
    assert sorted(names) == sorted(COEFFICIENTS + ("x0", "v0"))
    targets = [(name, values[name]) for name in names] + ([("control", controls)] if controls is not None else [])
    for name, base in targets:
        fd = np.zeros_like(base)
        for idx in np.ndindex(base.shape):
            h = 1e-6 * max(1.0, abs(base[idx]))
            plus, minus = base.copy(), base.copy()
            plus[idx] += h
            minus[idx] -= h
            if name == "control":
                fd[idx] = (loss(values, plus) - loss(values, minus)) / (2 * h)
            else:
                fd[idx] = (loss({**values, name: plus}, controls) - loss({**values, name: minus}, controls)) / (2 * h)
        assert_close(got[name].reshape(fd.shape), fd, 1e-4, f"{config} dL/d{name}")
    if sim.ground is not None:   # the rollout must have exercised the contact
        x, _ = reference_run(sim, values, steps, controls)
        assert (x[:, 1] == sim.ground).sum() >= 2


def test_forward_matches_reference_32x32_cloth() -> None:
    sim = SpringSystem.cloth(32, 32, 0.02, dim=3, pin="top_row", stiffness=100.0, damping=0.05, mass=0.05,
                             gravity=(0.5, -9.81, 1.0), dt=1e-3)
    assert sim.n_springs == 3906 and sim.n_particles == 1024
    assert sim.pinned_mask.sum() == 32 and sim.pinned_mask[-32:].all()
    got = gpu_run(sim, 30)
    want = reference_run(sim, current_values(sim), 30, None)
    x0 = sim.coefficient("x0").numpy()
    assert_close(got["x"] - x0, want[0] - x0, 1e-4, "32x32 cloth displacement")
    assert_close(got["v"], want[1], 1e-4, "32x32 cloth velocity")


@pytest.mark.parametrize("config", list(CONFIGS))
def test_forward_matches_reference(config: str) -> None:
    make, _ = CONFIGS[config]
    sim, controls = make(np.random.default_rng(3))
    steps = 24
    if controls is not None:
        controls = np.resize(controls, (steps, controls.shape[1]))
    got = gpu_run(sim, steps, controls)
    x, v = reference_run(sim, current_values(sim), steps, controls)
    x0 = sim.coefficient("x0").numpy()
    assert_close(got["x"] - x0, x - x0, 1e-4, f"{config} displacement")
    assert_close(got["v"], v, 1e-4, f"{config} velocity")


# -- physics ----------------------------------------------------------------------------------------------------
def trajectory(sim: SpringSystem, steps: int) -> np.ndarray:
    """x at steps 0..steps, (steps + 1, N, dim), in one submission."""
    tape = sopt.Tape()
    with tape:
        result = rollout(sim, sim.initial_state(), steps, observe="x", at=range(steps + 1))
    tape.submit()
    return result.trajectory.to_numpy().reshape(steps + 1, sim.n_particles, sim.dim).astype(np.float64)


@pytest.mark.parametrize("dim", [2, 3])
def test_period_of_a_mass_on_a_spring(dim: int) -> None:
    m, k, dt = 0.5, 200.0, 1e-3
    direction = (1.0, 2.0) if dim == 2 else (1.0, 2.0, -2.0)
    sim = SpringSystem.chain(2, 1.0, dim=dim, direction=direction, stiffness=k, mass=m, rest_length=0.9,
                             gravity=np.zeros(dim), dt=dt)
    xs = trajectory(sim, 800)
    stretch = np.linalg.norm(xs[:, 1] - xs[:, 0], axis=1) - 0.9
    crossings = np.flatnonzero(np.sign(stretch[:-1]) != np.sign(stretch[1:]))
    times = dt * (crossings + stretch[crossings] / (stretch[crossings] - stretch[crossings + 1]))
    assert len(times) >= 4
    period = 2 * float(np.mean(np.diff(times)))
    assert period == pytest.approx(2 * math.pi * math.sqrt(m / k), rel=1e-4)   # dt error: (w dt)^2 / 24 = 2e-5
    # the motion stays along the spring (the pinned end does not move)
    assert np.allclose(xs[:, 0], 0.0)
    amplitude = np.abs(stretch).max()
    assert amplitude == pytest.approx(0.1, rel=1e-2)   # undamped: symplectic Euler keeps the amplitude


def test_hanging_chain_sag_at_rest() -> None:
    n, m, k, g, spacing = 4, 0.1, 100.0, 9.81, 0.25
    sim = SpringSystem.chain(n, spacing * (n - 1), dim=2, direction=(0.0, -1.0), stiffness=k, damping=10.0, mass=m,
                             gravity=(0.0, -g), dt=3e-3)
    x = trajectory(sim, 600)[-1]
    stretch = np.linalg.norm(np.diff(x, axis=0), axis=1) - spacing
    weight_below = m * g * np.arange(n - 1, 0, -1)
    np.testing.assert_allclose(stretch, weight_below / k, rtol=1e-4)
    want_y = -np.concatenate([[0.0], np.cumsum(spacing + weight_below / k)])
    np.testing.assert_allclose(x[:, 1], want_y, atol=1e-5)
    np.testing.assert_allclose(x[:, 0], 0.0, atol=1e-6)


def test_momentum_and_energy_of_a_free_cloth() -> None:
    """No pins, no gravity, no damping: pairwise forces keep the momentum; symplectic Euler keeps the energy
    within a small band."""
    rng = np.random.default_rng(5)
    base = SpringSystem.cloth(4, 3, 0.1, dim=3, stiffness=1.0, dt=1e-3)
    masses = rng.uniform(0.05, 0.15, base.n_particles)
    v0 = rng.normal(0, 0.5, (base.n_particles, 3))
    stiffness = rng.uniform(20, 40, base.n_springs)
    sim = SpringSystem(base.coefficient("x0").numpy(), base.springs, v0=v0, stiffness=stiffness, mass=masses,
                       gravity=(0.0, 0.0, 0.0), dt=1e-3)
    steps = 400
    tape = sopt.Tape()
    with tape:
        result = rollout(sim, sim.initial_state(), steps, observe="x", at=range(steps + 1))
        final = result.state
    tape.submit()
    xs = result.trajectory.to_numpy().reshape(steps + 1, -1, 3).astype(np.float64)
    v_final = final.v.to_numpy().astype(np.float64)
    momentum0 = (masses[:, None] * v0).sum(0)
    np.testing.assert_allclose((masses[:, None] * v_final).sum(0), momentum0, atol=1e-5)
    # centre of mass moves uniformly
    com = (masses[:, None] * xs).sum(1) / masses.sum()
    np.testing.assert_allclose(com[-1] - com[0], steps * 1e-3 * momentum0 / masses.sum(), atol=1e-5)

    rest = np.linalg.norm(np.diff(xs[0][base.springs], axis=1)[:, 0], axis=1)

    def energy(x: np.ndarray, v: np.ndarray) -> float:
        l = np.linalg.norm(x[base.springs[:, 1]] - x[base.springs[:, 0]], axis=1)
        return 0.5 * float((masses * (v ** 2).sum(1)).sum() + (stiffness * (l - rest) ** 2).sum())

    # velocities between positions (x_{t+1} - x_t = dt v_{t+1})
    vel = np.diff(xs, axis=0) / 1e-3
    energies = np.array([energy(xs[t + 1], vel[t]) for t in range(steps)])
    e0 = 0.5 * float((masses * (v0 ** 2).sum(1)).sum())
    assert np.abs(energies - e0).max() < 0.02 * e0
    assert energies[100:].std() > 1e-4 * e0   # energy moved between kinetic and potential: the springs acted


def test_ground_contact_sticks_and_stops() -> None:
    """A level dumbbell thrown sideways lands flat on the ground and sticks where it landed."""
    sim = SpringSystem([[0.0, 0.3], [0.2, 0.3]], [[0, 1]], v0=[[0.5, 0.0], [0.5, 0.0]], stiffness=50.0, damping=0.2,
                       mass=0.05, ground=0.1, dt=2e-3)
    xs = trajectory(sim, 200)
    ground = float(np.float32(0.1))                               # as the GPU stores it
    assert xs[:, :, 1].min() == ground                            # never below the ground
    landed = int(np.flatnonzero(xs[:, 0, 1] == ground)[0])
    assert (xs[landed:, :, 1] == ground).all()
    # sticky: once down, it stays where it landed
    np.testing.assert_array_equal(xs[landed:], np.broadcast_to(xs[landed], xs[landed:].shape))
    # where free flight meets the ground: x = 0.5 t, 0.3 - g t^2 / 2 = 0.1
    t_hit = math.sqrt(2 * 0.2 / 9.81)
    assert xs[landed, 0, 0] == pytest.approx(0.5 * t_hit, abs=2e-3)
    assert xs[landed, 1, 0] - xs[landed, 0, 0] == pytest.approx(0.2, abs=1e-6)


def test_actuator_moves_the_rest_length() -> None:
    """A critically damped mass on an actuated spring settles at l0 (1 + strength u)."""
    sim = SpringSystem.chain(2, 1.0, dim=2, stiffness=100.0, damping=14.0, mass=0.5, gravity=(0.0, 0.0),
                             actuators=[0], actuation_strength=0.4, dt=1e-3)
    tape = sopt.Tape()
    u = spy.Tensor.from_numpy(dev.get_device(), np.array([0.5], np.float32))
    with tape:
        s = sim.initial_state()
        for _ in range(1000):
            s = sim.step(s, u)
    tape.submit()
    assert s.x.to_numpy()[1, 0] == pytest.approx(1.0 * (1 + 0.4 * 0.5), rel=1e-4)


def test_dispatches_per_step() -> None:
    for ground, backward in ((None, 2), (-1.0, 3)):
        sim = SpringSystem.chain(3, 1.0, dim=2, stiffness=sopt.Parameter([50.0]), ground=ground, dt=1e-3)
        assert dispatches_per_step(sim, "x")[:2] == (1, backward)


def test_recomputing_rollout_gives_the_stored_gradients() -> None:
    """sopt.sim.rollout with a state budget re-runs steps on child tapes: the simulator's adjoint (and its
    reused scratch) must give the gradients of the store-every-state run."""
    rng = np.random.default_rng(11)
    sim = SpringSystem.chain(5, 1.0, dim=3, direction=(1.0, 0.5, 0.2), stiffness=sopt.Parameter(rng.uniform(40, 60, 4)),
                             damping=sopt.Parameter([0.2]), dt=2e-3)
    seed = rng.normal(size=(5, 3)).astype(np.float32)
    grads = []
    for budget in (None, 12):
        for p in sim.parameters():
            p.zero_grad()
        tape = sopt.Tape()
        with tape:
            result = rollout(sim, sim.initial_state(), 24, budget=budget)
        tape.backward(grads={result.state.x: seed})
        tape.submit()
        assert (len(result.plan.segments) > 1) == (budget is not None)   # the budget made it recompute
        grads.append([p.grad_numpy().copy() for p in sim.parameters()])
    for stored, recomputed in zip(*grads):
        np.testing.assert_allclose(recomputed, stored, rtol=1e-5, atol=1e-7 * np.abs(stored).max())


# -- bad input --------------------------------------------------------------------------------------------------
X3 = np.array([[0.0, 0.0], [1.0, 0.0], [2.0, 0.0]])
S2 = np.array([[0, 1], [1, 2]])


@pytest.mark.parametrize("kwargs, match", [
    (dict(springs=[[0, 1], [1, 3]]), r"springs\[1\] = \[1, 3\] has an index out of range \[0, 3\)"),
    (dict(springs=[[0, 1], [2, 2]]), r"springs\[1\] = \[2, 2\] joins a particle to itself"),
    (dict(springs=[[0, 1.5]]), r"springs must hold integer indices, got 1.5"),
    (dict(springs=np.zeros((0, 2), int)), r"springs must have shape \(S, 2\) with S >= 1"),
    (dict(x0=[[0.0, 0.0], [0.0, 0.0], [1.0, 0.0]]), r"springs\[0\] = \[0, 1\] joins particles that coincide"),
    (dict(x0=[[0.0, 0.0], [np.nan, 0.0], [2.0, 0.0]]), r"x0 contains 1 non-finite value"),
    (dict(x0=np.zeros((3, 4))), r"x0 must have shape \(N, 2\) or \(N, 3\), got \(3, 4\)"),
    (dict(v0=np.zeros((2, 2))), r"initial v: got shape \(2, 2\), expected \(3, 2\)"),
    (dict(v0=[[0.0, 0.0], [np.inf, 0.0], [0.0, 0.0]]), r"initial v contains 1 non-finite value"),
    (dict(mass=[1.0, 0.0, 1.0]), r"mass must be > 0 kg, got 0"),
    (dict(mass=[1.0, 1.0]), r"mass: got shape \(2,\), expected \(3,\) or \(1,\)"),
    (dict(stiffness=[10.0, 10.0, 10.0]), r"stiffness: got shape \(3,\), expected \(2,\) or \(1,\)"),
    (dict(stiffness=-1.0), r"stiffness must be >= 0 N/m, got -1"),
    (dict(damping=-0.5), r"damping must be >= 0 N s/m, got -0.5"),
    (dict(gravity=[0.0, -9.81, 0.0]), r"gravity: got shape \(3,\), expected \(2,\)"),
    (dict(dt=0.0), r"dt must be in \(0.0, inf\), got 0.0"),
    (dict(dt=0.3), r"dt = 0.3 s is unstable .* dt must be below 0.1414 s"),
    (dict(damping=30.0, dt=0.07), r"dt = 0.07 s is unstable"),
    (dict(pinned=[0, 3]), r"pinned index 3 is out of range \[0, 3\)"),
    (dict(pinned=[True, False]), r"pinned: a boolean mask must have shape \(3,\)"),
    (dict(actuators=[0, 2]), r"actuators: spring index 2 is out of range \[0, 2\)"),
    (dict(actuators=[1, 1]), r"actuators must be distinct springs, got \[1, 1\]"),
    (dict(ground=float("nan")), r"ground must be finite"),
])
def test_bad_input(kwargs: dict[str, Any], match: str) -> None:
    args = dict(x0=X3, springs=S2, stiffness=100.0, dt=1e-3)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        SpringSystem(args.pop("x0"), args.pop("springs"), **args)


def test_bad_step_arguments() -> None:
    sim = SpringSystem(X3, S2, stiffness=100.0, actuators=[1], dt=1e-3)
    s = sim.initial_state()
    with pytest.raises(ValueError, match=r"has 1 actuator\(s\); pass a \(1,\) control"):
        sim.step(s)
    with pytest.raises(ValueError, match=r"control has shape \(2,\), expected \(1,\)"):
        sim.step(s, np.zeros(2))
    with pytest.raises(ValueError, match=r"control contains 1 non-finite"):
        sim.step(s, np.array([np.nan]))
    with pytest.raises(ValueError, match=r"state array 'x' has shape \(2, 2\)"):
        sim.step(SpringSystem(X3[:2], [[0, 1]], stiffness=1.0, dt=1e-3).initial_state(), np.zeros(1))
    passive = SpringSystem(X3, S2, stiffness=100.0, dt=1e-3)
    with pytest.raises(ValueError, match=r"no actuators, got a control"):
        passive.step(passive.initial_state(), np.zeros(1))
    with pytest.raises(ValueError, match=r"cloth pin must be one of 'none', 'top_corners', 'top_row', got 'corners'"):
        SpringSystem.cloth(3, 3, 0.1, pin="corners", stiffness=1.0, dt=1e-3)
    with pytest.raises(ValueError, match=r"chain n must be >= 2, got 1"):
        SpringSystem.chain(1, 1.0, stiffness=1.0, dt=1e-3)
