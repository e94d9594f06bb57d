"""NVIDIA Warp (1.19) implementations of benchmarks/physics.py's cases, for comparison with sopt.

Each integrator is sopt's (sopt/sim/spring_system.py, projectile.py, diffusion2d.py; kernels in slang_lib/sim/)
written as Warp kernels the way Warp's own examples write them (warp/examples/benchmarks/benchmark_cloth_warp.py:
one thread per spring adding its force into both ends with ``wp.atomic_add``, one per particle integrating),
differentiated by Warp's generated adjoints through ``wp.Tape``. Every step writes new arrays (the tape needs
every state for the backward): states live in one (T + 1, ...) array per quantity, each step reading row t
and writing row t + 1 through views made once, so zeroing all gradients is one memset per quantity rather than
one per step.

Two ways to run one iteration (zero the gradients, forward rollout on a tape, ``tape.backward(loss)``):

* ``graph=False`` (framework ``warp``): the Python loop launches every kernel, forward and adjoint;
* ``graph=True`` (``warp_graph``, Warp's fastest path): that same iteration is run once eagerly (kernel
  compilation), then captured once with ``wp.ScopedCapture`` and replayed with ``wp.capture_launch`` (one
  CUDA-graph launch per iteration; on the CPU Warp 1.19 records the launches and replays them).

``build(kind, problem, device, graph)`` returns a :class:`WarpRun`.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import warp as wp


# -- the run ------------------------------------------------------------------------------------------------------
class WarpRun:
    """One case set up on ``device``.

    ``forward()`` launches the rollout and the loss into ``loss`` (zeroed first); ``params``: name -> array
    whose ``.grad`` is the gradient compared; ``zero``: the gradient buffers the iteration clears (every array
    the tape touches, one buffer per quantity) and the force accumulators.
    """

    def __init__(self, device: Any, forward: Callable[[], None], loss: wp.array, params: dict[str, wp.array],
                 zero: list[wp.array], graph: bool) -> None:
        self.device = device
        self._forward = forward
        self._loss = loss
        self.params = params
        self._zero = zero
        self.tape: wp.Tape | None = None
        self.graph = None
        if graph:
            self._record()                     # compiles and loads the modules: capture cannot
            wp.synchronize_device(device)
            with wp.ScopedCapture(device=device) as capture:
                self._record()
            self.graph = capture.graph

    def _record(self) -> None:
        with wp.ScopedDevice(self.device):
            for a in self._zero:
                a.zero_()
            self._loss.zero_()
            self.tape = wp.Tape()
            with self.tape:
                self._forward()
            self.tape.backward(self._loss)

    def iteration(self) -> None:
        if self.graph is not None:
            wp.capture_launch(self.graph)
        else:
            self._record()

    def gradients(self) -> dict[str, np.ndarray]:
        return {name: a.grad.numpy().astype(np.float64) for name, a in self.params.items()}

    def loss(self) -> float:
        return float(self._loss.numpy()[0])


def _rows(a: wp.array) -> list[wp.array]:
    """Views of a (T + 1, ...) array's rows, made once (each carries its gradient's row)."""
    return [a[t] for t in range(a.shape[0])]


# -- A, B, C: cloth ---------------------------------------------------------------------------------------------
@wp.kernel
def cloth_spring_forces(x: wp.array(dtype=wp.vec3), v: wp.array(dtype=wp.vec3), springs: wp.array2d(dtype=wp.int32),
                        rest_length: wp.array(dtype=float), stiffness: wp.array(dtype=float), damping: float,
                        force: wp.array(dtype=wp.vec3)):
    """Spring s = (a, b): d = (x_b - x_a) / l, T = k (l - L) + c (v_b - v_a).d; +T d on a, -T d on b."""
    s = wp.tid()
    a = springs[s, 0]
    b = springs[s, 1]
    dx = x[b] - x[a]
    dv = v[b] - v[a]
    length = wp.length(dx)
    d = dx / length
    tension = stiffness[s] * (length - rest_length[s]) + damping * wp.dot(dv, d)
    f = tension * d
    wp.atomic_add(force, a, f)
    wp.atomic_sub(force, b, f)


@wp.kernel
def cloth_integrate(x: wp.array(dtype=wp.vec3), v: wp.array(dtype=wp.vec3), force: wp.array(dtype=wp.vec3),
                    pinned: wp.array(dtype=wp.int32), mass: float, gravity: wp.vec3, dt: float,
                    x_out: wp.array(dtype=wp.vec3), v_out: wp.array(dtype=wp.vec3)):
    """Semi-implicit Euler: v' = v + dt (F / m + g), x' = x + dt v'; pinned: x' = x, v' = 0."""
    i = wp.tid()
    if pinned[i] != 0:
        x_out[i] = x[i]
        v_out[i] = wp.vec3(0.0, 0.0, 0.0)
    else:
        v_new = v[i] + dt * (force[i] / mass + gravity)
        x_out[i] = x[i] + dt * v_new
        v_out[i] = v_new


@wp.kernel
def mean_squared_error_vec3(x: wp.array(dtype=wp.vec3), target: wp.array(dtype=wp.vec3), scale: float,
                            loss: wp.array(dtype=float)):
    """loss += scale |x_i - target_i|^2 (scale = 1 / element count: the mean over every component)."""
    i = wp.tid()
    d = x[i] - target[i]
    wp.atomic_add(loss, 0, scale * wp.dot(d, d))


def cloth(problem: Any, device: Any, graph: bool) -> WarpRun:
    """Parameter: per-spring stiffness (S,). Loss: mean over all elements of (x_T - target)^2."""
    steps, n = problem.steps, problem.x0.shape[0]
    with wp.ScopedDevice(device):
        x = wp.zeros((steps + 1, n), dtype=wp.vec3, requires_grad=True)
        v = wp.zeros((steps + 1, n), dtype=wp.vec3, requires_grad=True)
        force = wp.zeros((steps, n), dtype=wp.vec3, requires_grad=True)
        x[0].assign(wp.array(problem.x0.astype(np.float32), dtype=wp.vec3))
        springs = wp.array(problem.springs.astype(np.int32), dtype=wp.int32)
        rest = wp.array(problem.rest_length.astype(np.float32), dtype=float)
        stiffness = wp.array(problem.stiffness.astype(np.float32), dtype=float, requires_grad=True)
        pinned = wp.array(problem.pinned.astype(np.int32), dtype=wp.int32)
        target = wp.array(problem.target.astype(np.float32), dtype=wp.vec3)
        loss = wp.zeros(1, dtype=float, requires_grad=True)
    xs, vs, fs = _rows(x), _rows(v), _rows(force)
    gravity = wp.vec3(*[float(g) for g in problem.gravity])
    damping, mass, dt = float(problem.damping), float(problem.mass), float(problem.dt)
    n_springs = problem.springs.shape[0]

    def forward() -> None:
        force.zero_()
        for t in range(steps):
            wp.launch(cloth_spring_forces, dim=n_springs, inputs=[xs[t], vs[t], springs, rest, stiffness, damping],
                      outputs=[fs[t]])
            wp.launch(cloth_integrate, dim=n, inputs=[xs[t], vs[t], fs[t], pinned, mass, gravity, dt],
                      outputs=[xs[t + 1], vs[t + 1]])
        wp.launch(mean_squared_error_vec3, dim=n, inputs=[xs[steps], target, 1.0 / (3 * n)], outputs=[loss])

    return WarpRun(device, forward, loss, {"stiffness": stiffness},
                   [x.grad, v.grad, force.grad, stiffness.grad], graph)


# -- D: projectiles -----------------------------------------------------------------------------------------------
@wp.func
def drag_acceleration(v: wp.vec2, gravity: wp.vec2, linear_drag: float, drag: float):
    """a = g - (c1 + c2 |v|) v."""
    return gravity - (linear_drag + drag * wp.length(v)) * v


@wp.kernel
def projectile_step(x: wp.array(dtype=wp.vec2), v: wp.array(dtype=wp.vec2), drag: wp.array(dtype=float),
                    restitution: wp.array(dtype=float), linear_drag: float, gravity: wp.vec2, dt: float,
                    ground: float, x_out: wp.array(dtype=wp.vec2), v_out: wp.array(dtype=wp.vec2)):
    """sopt's Projectile step (slang_lib/sim/projectile.slang): kick, drift; when the drift crosses the ground
    downwards, move to the time of impact toi, reflect the impact velocity's normal part scaled by e, and run
    the rest of the step from there (a rebound that does not outlast it ends at rest on the ground)."""
    i = wp.tid()
    xi = x[i]
    vi = v[i]
    c2 = drag[i]
    e = restitution[i]
    a = drag_acceleration(vi, gravity, linear_drag, c2)
    vs = vi + dt * a
    x_new = xi + dt * vs
    v_new = vs
    if x_new[1] < ground and vs[1] < 0.0:
        base = wp.min(xi[1], ground)   # adjoint: to xi[1] only when below the ground (as sopt's)
        toi = wp.clamp((base - xi[1]) / vs[1], 0.0, dt)
        rest = dt - toi
        p = xi + toi * vs
        v_impact = vi + toi * a
        r = wp.vec2(v_impact[0], -e * v_impact[1])
        v_bounce = r + rest * drag_acceleration(r, gravity, linear_drag, c2)
        if v_bounce[1] < 0.0:
            v_bounce = wp.vec2(v_bounce[0], 0.0)
        x_new = wp.vec2(p[0], base) + rest * v_bounce
        v_new = v_bounce
    x_out[i] = x_new
    v_out[i] = v_new


@wp.kernel
def mean_squared_error_vec2(x: wp.array(dtype=wp.vec2), target: wp.array(dtype=wp.vec2), scale: float,
                            loss: wp.array(dtype=float)):
    i = wp.tid()
    d = x[i] - target[i]
    wp.atomic_add(loss, 0, scale * wp.dot(d, d))


def projectile(problem: Any, device: Any, graph: bool) -> WarpRun:
    """Parameters: per-particle drag (N,), restitution (N,) and v0 (N, 2) (row 0 of the velocity array)."""
    steps, n = problem.steps, problem.x0.shape[0]
    with wp.ScopedDevice(device):
        x = wp.zeros((steps + 1, n), dtype=wp.vec2, requires_grad=True)
        v = wp.zeros((steps + 1, n), dtype=wp.vec2, requires_grad=True)
        x[0].assign(wp.array(problem.x0.astype(np.float32), dtype=wp.vec2))
        v[0].assign(wp.array(problem.v0.astype(np.float32), dtype=wp.vec2))
        drag = wp.array(problem.drag.astype(np.float32), dtype=float, requires_grad=True)
        restitution = wp.array(problem.restitution.astype(np.float32), dtype=float, requires_grad=True)
        target = wp.array(problem.target.astype(np.float32), dtype=wp.vec2)
        loss = wp.zeros(1, dtype=float, requires_grad=True)
    xs, vs = _rows(x), _rows(v)
    gravity = wp.vec2(*[float(g) for g in problem.gravity])
    c1, dt, ground = float(problem.linear_drag), float(problem.dt), float(problem.ground)

    def forward() -> None:
        for t in range(steps):
            wp.launch(projectile_step, dim=n, inputs=[xs[t], vs[t], drag, restitution, c1, gravity, dt, ground],
                      outputs=[xs[t + 1], vs[t + 1]])
        wp.launch(mean_squared_error_vec2, dim=n, inputs=[xs[steps], target, 1.0 / (2 * n)], outputs=[loss])

    return WarpRun(device, forward, loss, {"drag": drag, "restitution": restitution, "v0": vs[0]},
                   [x.grad, v.grad, drag.grad, restitution.grad], graph)


# -- E: heat diffusion ------------------------------------------------------------------------------------------
@wp.kernel
def heat_step(u: wp.array2d(dtype=float), kappa: wp.array2d(dtype=float), r: float, boundary_value: float,
              u_out: wp.array2d(dtype=float)):
    """u'_i = u_i + r sum_f kappa_f (u_f - u_i) over the faces row - 1, row + 1, col - 1, col + 1 (sopt's
    order), kappa_f = (kappa_i + kappa_n) / 2; a Dirichlet face: kappa_i (boundary_value - u_i)."""
    row, col = wp.tid()
    ui = u[row, col]
    ki = kappa[row, col]
    flux = float(0.0)
    if row > 0:
        flux = flux + 0.5 * (ki + kappa[row - 1, col]) * (u[row - 1, col] - ui)
    else:
        flux = flux + ki * (boundary_value - ui)
    if row < u.shape[0] - 1:
        flux = flux + 0.5 * (ki + kappa[row + 1, col]) * (u[row + 1, col] - ui)
    else:
        flux = flux + ki * (boundary_value - ui)
    if col > 0:
        flux = flux + 0.5 * (ki + kappa[row, col - 1]) * (u[row, col - 1] - ui)
    else:
        flux = flux + ki * (boundary_value - ui)
    if col < u.shape[1] - 1:
        flux = flux + 0.5 * (ki + kappa[row, col + 1]) * (u[row, col + 1] - ui)
    else:
        flux = flux + ki * (boundary_value - ui)
    u_out[row, col] = ui + r * flux


@wp.kernel
def mean_squared_error_grid(u: wp.array2d(dtype=float), target: wp.array2d(dtype=float), scale: float,
                            loss: wp.array(dtype=float)):
    row, col = wp.tid()
    d = u[row, col] - target[row, col]
    wp.atomic_add(loss, 0, scale * d * d)


def heat(problem: Any, device: Any, graph: bool) -> WarpRun:
    """Parameter: the conductivity field (H, W)."""
    steps = problem.steps
    h, w = problem.u0.shape
    with wp.ScopedDevice(device):
        u = wp.zeros((steps + 1, h, w), dtype=float, requires_grad=True)
        u[0].assign(wp.array(problem.u0.astype(np.float32), dtype=float))
        kappa = wp.array(problem.conductivity.astype(np.float32), dtype=float, requires_grad=True)
        target = wp.array(problem.target.astype(np.float32), dtype=float)
        loss = wp.zeros(1, dtype=float, requires_grad=True)
    us = _rows(u)
    r = float(problem.dt) / float(problem.dx) ** 2
    b = float(problem.boundary_value)

    def forward() -> None:
        for t in range(steps):
            wp.launch(heat_step, dim=(h, w), inputs=[us[t], kappa, r, b], outputs=[us[t + 1]])
        wp.launch(mean_squared_error_grid, dim=(h, w), inputs=[us[steps], target, 1.0 / (h * w)], outputs=[loss])

    return WarpRun(device, forward, loss, {"conductivity": kappa}, [u.grad, kappa.grad], graph)


# -- entry point -----------------------------------------------------------------------------------------------
BUILDERS = {"cloth": cloth, "projectile": projectile, "heat": heat}


def build(kind: str, problem: Any, device: Any, graph: bool) -> WarpRun:
    """The Warp run of a case of ``kind`` ("cloth", "projectile" or "heat"); ``graph``: replay a captured graph."""
    return BUILDERS[kind](problem, device, graph)


# -- memory ---------------------------------------------------------------------------------------------------------
_CU_MEMPOOL_ATTR_USED_MEM_HIGH = 8   # CUmemPool_attribute (cuda.h)


def reset_mempool_high(device: Any) -> bool:
    """Reset the device's default memory pool's used-memory high-water mark (what
    ``wp.get_mempool_used_mem_high`` reads; Warp allocates from that pool) to the memory in use now, through
    the CUDA driver (Warp has no call for it). False where that is not possible (then the mark is the
    process's)."""
    import ctypes

    try:
        cuda = ctypes.CDLL("libcuda.so.1")
        handle = ctypes.c_int()
        pool = ctypes.c_void_p()
        zero = ctypes.c_uint64(0)
        if cuda.cuDeviceGet(ctypes.byref(handle), int(device.ordinal)) != 0:
            return False
        if cuda.cuDeviceGetDefaultMemPool(ctypes.byref(pool), handle) != 0:
            return False
        return cuda.cuMemPoolSetAttribute(pool, _CU_MEMPOOL_ATTR_USED_MEM_HIGH, ctypes.byref(zero)) == 0
    except (OSError, AttributeError):
        return False
