"""FusedSpringSteps: n steps of a :class:`~sopt.sim.SpringSystem` in one forward dispatch and one adjoint
dispatch (kernels in slang_lib/sim/spring_system_steps.slang); ``SpringSystem.steps`` runs through it.

Each dispatch loops over the steps itself. Its G thread groups of T threads loop over the particles with
stride G T, so any size runs, and synchronise between steps: with G = 1 by a group barrier, with G > 1 by a grid
barrier (CUDA only; G at most the multiprocessor count, so every group is resident and none waits for a group
that cannot start). Layouts (:func:`default_layout`):

- one group (Vulkan; on CUDA up to GRID_MIN_PARTICLES particles): T the smallest of 32, 64, 128, 256, 512, 1024
  that gives every particle its own thread (capped at 1024 for the forward and 512 for the adjoint), the state
  in groupshared memory up to 1024 particles;
- several groups (CUDA, more than GRID_MIN_PARTICLES particles): the smallest T of 64, 128, 256 for which
  G = ceil(N / T) groups fit one per multiprocessor, else G = the multiprocessor count of 256 threads.

When every particle has its own thread and none has more than 16 springs, the multi-group kernels keep each
particle's springs (and in the adjoint the sums of its springs' gradients over the steps) in registers, so a
step reads only the neighbours' state from the previous step (``*_reg`` kernels). A small cloth runs faster in
one group and a larger one on several, hence GRID_MIN_PARTICLES.

Why the one-group caps: Slang emits no launch bounds for CUDA, so a group of T threads launches only if its
kernel needs at most 65536 / T registers per thread; the forward needs 48, the adjoint up to 63 (sm_90), no
margin below a 1024-thread group's 64 (see the .slang file); the register kernels run in groups of at most
256 threads (255 registers each). When N <= 1024 in one group the state a step reads sits in groupshared
memory (x, v and, in the adjoint, dL/dF: 3 N D floats, at most 36 KB), else in global memory (L2-resident).

What the adjoint needs: the forward keeps the state before every step, x_t and v_t (and with ground the net
spring force F_t, from which the contact's adjoint recomputes the pre-contact velocity), in one pooled array
of shape (n, 2 or 3, N, dim): 4 n N dim (2 or 3) bytes, e.g. 24 MB for 1000 steps of a 32 x 32 cloth, 393 MB
for a 128 x 128 one. Storing every state rather than every k-th plus a recompute keeps the adjoint to one
pass per step (a recompute would add a forward gather per step) at a memory cost that fits a GPU for the
benchmark sizes; runs longer than 2^31 elements of that array are split into several fused calls.

Gradients: per-spring and per-particle coefficients are added into their own address by the one thread that
owns the element (the lower-index end of a spring, a particle's thread), every step (register kernels: once,
summed over the steps), without atomics; shared coefficients and gravity are summed per thread over all steps,
then over the group (a fixed tree), then over the groups in group order, and added once. Outside a tape the
forward runs at once and keeps only two states (a ping-pong).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import numpy as np
import slangpy as spy

from sopt.runtime import device as dev
from sopt.autodiff import tape as tp
from sopt.runtime.kernel import Kernel, dummy
from sopt.sim.grid_barrier import SteppingDispatch, max_groups
from sopt.sim.state import State

if TYPE_CHECKING:
    from sopt.sim.spring_system import SpringSystem

_MODULE = "sim/spring_system_steps"
SHARED_CAPACITY = 1024          # spring_system_steps.slang's SHARED_CAPACITY (particles)
THREAD_CHOICES = (32, 64, 128, 256, 512, 1024)
MAX_THREADS = {"forward": 1024, "backward": 512}   # by register use (see the module docstring)
MAX_ELEMENTS = 2**31 - 1        # int32 element offsets in the kernel

_COEFFICIENTS = ("stiffness", "damping", "rest_length", "mass", "gravity")


GRID_THREADS = (64, 128, 256)   # group sizes of the multi-group layout, by preference
GRID_MIN_PARTICLES = 256        # CUDA: larger systems take several groups
REGISTER_DEGREES = (4, 8, 16)   # springs per particle the *_reg kernels hold in registers
REGISTER_MAX_THREADS = 256      # ... in groups of at most this many threads (255 registers per thread)


def threads_for(n_particles: int, limit: int) -> int:
    """The group size for ``n_particles``: the smallest of THREAD_CHOICES that is >= N, at most ``limit``."""
    return next((t for t in THREAD_CHOICES if t >= min(n_particles, limit)), limit)


def default_layout(n_particles: int, multiprocessors: int | None) -> tuple[dict[str, int], dict[str, int], bool]:
    """(threads, groups, shared) for a system of ``n_particles``: see the module docstring. ``multiprocessors``
    is the CUDA device's count (None: no grid barrier, one group)."""
    if n_particles <= GRID_MIN_PARTICLES or not multiprocessors or multiprocessors < 2:
        threads = {which: threads_for(n_particles, limit) for which, limit in MAX_THREADS.items()}
        return threads, {"forward": 1, "backward": 1}, n_particles <= SHARED_CAPACITY
    t = next((t for t in GRID_THREADS if -(-n_particles // t) <= multiprocessors), GRID_THREADS[-1])
    groups = min(-(-n_particles // t), multiprocessors)
    return {"forward": t, "backward": t}, {"forward": groups, "backward": groups}, False


# the generic entry points of spring_system_steps.slang: <dim, threads, shared> and <dim, threads, degree>
_KERNELS = {(which, reg): Kernel(_MODULE, f"spring_steps_{which}{'_reg' if reg else ''}_kernel")
            for which in ("forward", "backward") for reg in (False, True)}


@functools.lru_cache(maxsize=None)   # one declaration per variant: a dispatch looks it up
def _kernel(which: str, dim: int, threads: int, shared: bool, degree: int) -> Kernel:
    """The compute kernel ``spring_steps_<which>_kernel<dim, threads, shared>`` (``which``: forward or backward),
    or with ``degree`` > 0 ``spring_steps_<which>_reg_kernel<dim, threads, degree>``."""
    return _KERNELS[(which, degree > 0)].specialise(dim, threads, degree if degree else int(shared))


def _mode(c: Any) -> int:
    """Gradient mode of a Coefficient: 0 constant, 1 per element, 2 shared."""
    return 0 if not c.trainable else (2 if c.shared else 1)


class FusedSpringSteps:
    """The fused multi-step run of one SpringSystem (no actuators).

    ``threads`` ({"forward": T, "backward": T}, the group sizes), ``groups`` (likewise, G) and ``shared`` (the
    groupshared layout, allowed for N <= SHARED_CAPACITY with G = 1) are chosen by :func:`default_layout`; they
    may be set to other allowed values (tests run several particles per thread on small systems that way, and
    several groups on CUDA).
    """

    def __init__(self, sim: "SpringSystem") -> None:
        if sim.n_actuators:
            raise ValueError(f"FusedSpringSteps: the system has {sim.n_actuators} actuator(s), which need a per-step "
                             "control; use SpringSystem.step")
        self.sim = sim
        self.threads, self.groups, self.shared = default_layout(sim.n_particles, max_groups())
        topo = sim.topology_host
        n = sim.n_particles
        packed = np.concatenate([topo["offsets"], topo["incident"].ravel(), topo["pinned"]]).astype(np.int32)
        self.max_degree = int(np.diff(topo["offsets"]).max())   # springs of the best-connected particle
        self._incident_at = n + 1
        self._pinned_at = n + 1 + topo["incident"].size
        self._topology = dev.get_device().create_buffer(
            size=4 * packed.size, usage=spy.BufferUsage.shader_resource | spy.BufferUsage.unordered_access,
            data=packed)
        self._kernels = SteppingDispatch("steps_args", _ARG_FIELDS, "steps_barrier", param="call", buffers=_BUFFERS,
                                         steps_topology=self._topology)
        self._scratch: spy.Tensor | None = None      # adjoint: G (N, 2 dim), dL/dF (2, N, dim), partial sums (G, 8)
        self._ping_pong: spy.Tensor | None = None    # outside a tape: two states

    def _check_layout(self) -> None:
        for which, limit in MAX_THREADS.items():
            t = self.threads.get(which)
            if t not in THREAD_CHOICES or t > limit:
                allowed = tuple(c for c in THREAD_CHOICES if c <= limit)
                raise ValueError(f"FusedSpringSteps threads[{which!r}] = {t!r}; allowed are {allowed}")
        if self.shared and self.sim.n_particles > SHARED_CAPACITY:
            raise ValueError(f"FusedSpringSteps shared = True needs N <= {SHARED_CAPACITY}, got N = "
                             f"{self.sim.n_particles}")
        most = max_groups() or 1
        for which in MAX_THREADS:
            g = self.groups.get(which)
            if not isinstance(g, int) or isinstance(g, bool) or not 1 <= g <= most:
                raise ValueError(f"FusedSpringSteps groups[{which!r}] = {g!r}; allowed are 1 to {most} (more than "
                                 "one only on CUDA, at most one group per multiprocessor)")
            if g > 1 and self.shared:
                raise ValueError(f"FusedSpringSteps groups[{which!r}] = {g} needs shared = False (groupshared "
                                 "memory is one group's)")

    def register_degree(self, which: str) -> int:
        """The springs per particle the ``which`` kernel holds in registers (0: it reads them every step)."""
        threads, groups = self.threads[which], self.groups[which]
        if self.shared or threads > REGISTER_MAX_THREADS or threads * groups < self.sim.n_particles:
            return 0
        return next((d for d in REGISTER_DEGREES if d >= self.max_degree), 0)

    def _dispatch(self, which: str, enc: spy.CommandEncoder, args: dict[str, Any], buffers: dict[str, Any]) -> None:
        """Record the kernel ``which`` of the current layout with ``args`` (StepsArgs fields) and ``buffers``."""
        threads, groups = self.threads[which], self.groups[which]
        kernel = _kernel(which, self.sim.dim, threads, self.shared, self.register_degree(which))
        self._kernels.dispatch(kernel, enc, threads, groups, args, buffers)

    def max_steps_per_call(self, parts: int) -> int:
        """Steps whose saved states (n, parts, N, dim) stay within int32 element offsets."""
        return max(1, MAX_ELEMENTS // (parts * self.sim.n_particles * self.sim.dim) - 1)

    def run(self, state: State, n: int) -> State:
        """The state ``n`` >= 1 steps after ``state`` (checked by the caller); on a tape, recorded with its adjoint
        (split into several fused calls only past :meth:`max_steps_per_call`)."""
        self._check_layout()
        limit = self.max_steps_per_call(3)
        while n > 0:
            chunk = min(n, limit)
            state = self._run(state, chunk)
            n -= chunk
        return state

    def _run(self, state: State, n: int) -> State:
        sim = self.sim
        count, dim = sim.n_particles, sim.dim
        x, v = state.x, state.v
        out = sim.new_state()
        tape = tp.current_tape()
        want_x = tape is not None and x.grad_out is not None and tape.requires_grad(x)
        want_v = tape is not None and v.grad_out is not None and tape.requires_grad(v)
        coefficients_of = {name: sim.coefficient(name) for name in _COEFFICIENTS}
        params = list({id(c.parameter): c.parameter for c in coefficients_of.values()
                       if c.parameter is not None}.values())
        backprop = tape is not None and not tape.forward_only and bool(params or want_x or want_v)
        parts = 3 if backprop and sim.ground is not None else 2
        if backprop:
            saved, rows = tp.new_tensor((n, parts, count, dim), grads=False), n
        else:
            if self._ping_pong is None:
                self._ping_pong = spy.Tensor.zeros(dev.get_device(), (2, 2, count, dim), "float")
            saved, rows = self._ping_pong, 2
        base = {"n_particles": count, "n_steps": n, "rows": rows, "parts": parts, "save": int(backprop),
                "incident_at": self._incident_at, "pinned_at": self._pinned_at, "dt": sim.dt,
                "ground": 0.0 if sim.ground is None else sim.ground, "has_ground": int(sim.ground is not None),
                "saved": int(saved.offset)}

        def coefficients() -> tuple[dict[str, Any], dict[str, Any]]:
            """Offsets and buffers of the coefficient values (fetched when recorded: a Parameter's view moves)."""
            offsets: dict[str, Any] = {}
            buffers: dict[str, Any] = {}
            for name, c in coefficients_of.items():
                values = c.values
                offsets[name] = int(values.offset)
                if name != "gravity":
                    offsets[f"{name}_stride"] = int(not c.shared)
                buffers[f"steps_{name}"] = values.storage
            return offsets, buffers

        def forward(enc: spy.CommandEncoder) -> None:
            offsets, buffers = coefficients()
            args = {**base, **offsets, "x_in": int(x.offset), "v_in": int(v.offset), "x_out": int(out.x.offset),
                    "v_out": int(out.v.offset)}
            self._dispatch("forward", enc, args, {"steps_x_in": x.storage, "steps_v_in": v.storage,
                                                  "steps_x_out": out.x.storage, "steps_v_out": out.v.storage,
                                                  "steps_saved": saved.storage, **buffers})

        def backward(enc: spy.CommandEncoder, redirect: dict[int, spy.Tensor]) -> None:
            size = 4 * count * dim + 8 * self.groups["backward"]
            if self._scratch is None or self._scratch.shape[0] < size:
                self._scratch = spy.Tensor.zeros(dev.get_device(), (size,), "float")
            offsets, buffers = coefficients()
            args = {**base, **offsets, "scratch": int(self._scratch.offset),
                    "gx_out": int(out.x.grad.offset), "gv_out": int(out.v.grad.offset)}
            grads: dict[str, Any] = {}
            for name, flag, t in (("x", want_x, x), ("v", want_v, v)):
                g = t.grad if flag else dummy(1)
                args[f"g{name}_in"], args[f"want_{name}"] = int(g.offset), int(flag)
                grads[f"steps_g{name}_in"] = g.storage
            for name, c in coefficients_of.items():
                args[f"g_{name}"] = int(c.grad.offset)
                args[f"{name}_mode"] = (2 if c.trainable else 0) if name == "gravity" else _mode(c)
                grads[f"steps_g_{name}"] = c.grad.storage
            self._dispatch("backward", enc, args, {"steps_saved": saved.storage, "steps_scratch": self._scratch.storage,
                                                   "steps_gx_out": out.x.grad.storage,
                                                   "steps_gv_out": out.v.grad.storage, **buffers, **grads})

        add_grads = [t for t, want in ((x, want_x), (v, want_v)) if want]
        tp.record(f"{type(sim).__name__}.steps", forward, backward if backprop else None, writes=out.arrays(),
                  add_grads=add_grads, params=params)
        return out


# the StepsArgs struct of spring_system_steps.slang (the member steps_args of the kernels' argument, SpringSteps call)
_ARG_FIELDS = (
    "n_particles", "n_steps", "rows", "parts", "save", "groups", "incident_at", "pinned_at", "dt", "ground",
    "has_ground", "x_in", "v_in", "x_out", "v_out", "saved", "scratch", "stiffness", "stiffness_stride", "damping",
    "damping_stride", "rest_length", "rest_length_stride", "mass", "mass_stride", "gravity", "gx_out", "gv_out",
    "gx_in", "want_x", "gv_in", "want_v", "g_stiffness", "stiffness_mode", "g_damping", "damping_mode",
    "g_rest_length", "rest_length_mode", "g_mass", "mass_mode", "g_gravity", "gravity_mode",
)

# the buffer members of SpringSteps (spring_system_steps.slang)
_BUFFERS = (
    "steps_topology", "steps_stiffness", "steps_damping", "steps_rest_length", "steps_mass", "steps_gravity",
    "steps_x_in", "steps_v_in", "steps_x_out", "steps_v_out", "steps_saved", "steps_scratch", "steps_gx_out",
    "steps_gv_out", "steps_gx_in", "steps_gv_in", "steps_g_stiffness", "steps_g_damping", "steps_g_rest_length",
    "steps_g_mass", "steps_g_gravity", "steps_barrier",
)
