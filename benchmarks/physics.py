"""Physics benchmark: sopt against PyTorch eager and NVIDIA Warp 1.19 (its Tape, and a CUDA graph), one run.

Cases (float32; every framework runs sopt's integrator on the same initial conditions, built once in numpy here):

* ``A``: cloth 32 x 32 (``SpringSystem.cloth``, 3906 springs, top corners pinned), 1000 steps, dt 1e-3 s;
  loss = mean over every component of (x_T - target)^2 (the mean squared distance to the target / 3);
  gradient w.r.t. the per-spring stiffness.
* ``B``: the same at 128 x 128 (64770 springs).
* ``C``: cloth 1024 x 1024 for 1000 steps: sopt with ``rollout(..., budget_bytes=4 GiB)`` (``--c-budget-gib``),
  the others storing every state (an out-of-memory failure is printed as ``OOM``). Then ``C512``: 512 x 512,
  sopt storing every state against sopt within the budget (target: budgeted <= 1.5x the store-all time).
* ``D``: 65536 independent 2D projectiles with quadratic drag, bouncing on the ground (time-of-impact contact
  with restitution), 1000 steps, dt 1e-3 s; loss on the final positions; gradient w.r.t. the per-particle
  drag, restitution and initial velocity v0.
* ``E``: Diffusion2D 512 x 512 (Dirichlet boundaries), 2000 steps; loss on the final field; gradient w.r.t. the
  conductivity field.

Cloth: spacing 0.02 m, mass 0.01 kg per particle, stiffness uniform in [900, 1100] N/m per spring (seeded),
damping 1 N s/m, gravity (0, -9.81, 0), target = the initial grid 5 cm lower. Projectiles: x0 in [0, 1] x
[0.05, 1] m, speed 1..4 m/s at -45..75 degrees, drag 0.05..0.2 1/m, restitution 0.6..0.9, ground at 0.
Heat: dx = 1 mm, conductivity 1e-4 m^2/s x (1 + 0.5 in a disk + 0.1 noise), dt = 0.2 dx^2 / kappa_max, u0 and
the target two Gaussian blobs.

Frameworks (``--frameworks``):

* ``sopt``: a ``sopt.Tape``; each iteration clears the parameters' gradients, records
  ``sopt.sim.rollout(sim, sim.initial_state(), T[, budget_bytes=...])`` and a ``sopt.losses.MSELoss``, then
  ``tape.backward(loss)`` and one ``tape.submit()`` (as ``sopt.train.Trainer`` drives a tape);
* ``torch``: benchmarks/physics_torch.py, vectorised eager PyTorch with autograd (CUDA when available);
* ``warp``: benchmarks/physics_warp.py, Warp kernels and ``wp.Tape`` launched from Python;
* ``warp_graph``: the same Warp iteration captured once with ``wp.ScopedCapture``, replayed with
  ``wp.capture_launch`` (a CUDA graph; Warp 1.19 also records and replays one on the CPU, which the tests use).

A framework that cannot be imported is reported "not installed" and skipped; an out-of-memory error is
reported, not raised. Per case and framework: ms per iteration (forward rollout + backward, gradients zeroed
first; the median of ``--repeats`` iterations after ``--warmup``, each timed on the host from its start to
the device's synchronisation), peak device memory (sopt: ``sopt.autodiff.tape.peak_allocated_bytes()``, the tape's
pools, plus the parameters' values and gradients, not the simulator's constant arrays; torch:
``torch.cuda.max_memory_allocated``; Warp: the CUDA memory pool's used-memory high-water mark,
``wp.get_mempool_used_mem_high``, reset before each run through the driver), the loss, and each framework's
gradient difference from sopt's: max |g - g_sopt| / max |g_sopt| over every parameter array (flagged when
> 1e-3); then sopt's speed-up over each (their ms / sopt's ms).

Run (from the repository root; sopt need not be installed):

    SOPT_DEVICE=cuda python3 benchmarks/physics.py --json physics.json
    python3 benchmarks/physics.py --small          # tiny sizes and steps: a smoke test on CPU / lavapipe
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import math
import pathlib
import statistics
import sys
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))   # this checkout's sopt, not an installed one

import slangpy as spy  # noqa: E402

import sopt  # noqa: E402
from sopt.runtime import device as dev  # noqa: E402
from sopt.autodiff import tape as tp  # noqa: E402
from sopt.losses import MSELoss  # noqa: E402
from sopt.sim import Diffusion2D, Projectile, SpringSystem, rollout  # noqa: E402

FRAMEWORKS = ("sopt", "torch", "warp", "warp_graph")
CASE_KEYS = ("A", "B", "C", "D", "E")
GRAD_FLAG = 1e-3          # gradient difference from sopt's above this is flagged
GIB = 1 << 30
# issue 11's targets: sopt's least speed-up over a framework (their ms / sopt's ms), per case
TARGETS = {"A": {"torch": 50.0, "warp_graph": 1.0}, "B": {"torch": 50.0, "warp_graph": 1.0},
           "D": {"torch": 20.0, "warp_graph": 1.0}, "E": {"torch": 20.0, "warp_graph": 1.0}}
BUDGET_RATIO_TARGET = 1.5   # C512: budgeted time / store-all time


# -- problems: the arrays every framework starts from (numpy, float32) -----------------------------------------
@dataclass
class Cloth:
    """A cloth grid as ``SpringSystem.cloth(nx, ny, spacing, dim=3, pin="top_corners")`` builds it."""

    nx: int
    ny: int
    spacing: float      # m
    steps: int
    dt: float           # s
    x0: np.ndarray      # (N, 3) m
    springs: np.ndarray  # (S, 2) particle pairs, SpringSystem.cloth's order
    rest_length: np.ndarray  # (S,) m: the spring lengths in x0
    stiffness: np.ndarray  # (S,) N/m (the parameter)
    damping: float      # N s/m, shared
    mass: float         # kg, shared
    gravity: np.ndarray  # (3,) m/s^2
    pinned: np.ndarray  # (N,) bool
    target: np.ndarray  # (N, 3) m

    kind = "cloth"

    @property
    def state_bytes(self) -> int:
        """Bytes of one state (x and v) without gradients."""
        return 2 * self.x0.size * 4


def cloth_problem(nx: int, ny: int, steps: int, seed: int, dt: float = 1e-3) -> Cloth:
    spacing = 0.02
    r, c = np.divmod(np.arange(nx * ny), nx)
    x0 = np.zeros((nx * ny, 3), np.float32)
    x0[:, 0], x0[:, 1] = c * spacing, r * spacing
    idx = np.arange(nx * ny).reshape(ny, nx)
    springs = np.concatenate([
        np.stack([idx[:, :-1].ravel(), idx[:, 1:].ravel()], 1),        # horizontal
        np.stack([idx[:-1, :].ravel(), idx[1:, :].ravel()], 1),        # vertical
        np.stack([idx[:-1, :-1].ravel(), idx[1:, 1:].ravel()], 1),     # shear /
        np.stack([idx[:-1, 1:].ravel(), idx[1:, :-1].ravel()], 1),     # shear \
    ]).astype(np.int64)
    x64 = x0.astype(np.float64)   # SpringSystem's rest lengths: float64 norms of the float32 grid, rounded
    rest = np.linalg.norm(x64[springs[:, 1]] - x64[springs[:, 0]], axis=1).astype(np.float32)
    pinned = np.zeros(nx * ny, bool)
    pinned[[idx[-1, 0], idx[-1, -1]]] = True
    rng = np.random.default_rng(seed)
    stiffness = rng.uniform(900.0, 1100.0, len(springs)).astype(np.float32)
    target = x0 - np.array([0.0, 0.05, 0.0], np.float32)
    return Cloth(nx, ny, spacing, steps, dt, x0, springs, rest, stiffness, 1.0, 0.01,
                 np.array([0.0, -9.81, 0.0], np.float32), pinned, target)


@dataclass
class Projectiles:
    """Independent 2D particles (axis 1 up) with drag, bouncing on the ground at ``ground``."""

    steps: int
    dt: float
    x0: np.ndarray          # (N, 2) m
    v0: np.ndarray          # (N, 2) m/s (a parameter)
    drag: np.ndarray        # (N,) 1/m (a parameter)
    restitution: np.ndarray  # (N,) (a parameter)
    linear_drag: float      # 1/s
    gravity: np.ndarray     # (2,) m/s^2
    ground: float           # m
    target: np.ndarray      # (N, 2) m

    kind = "projectile"


def projectile_problem(n: int, steps: int, dt: float, seed: int) -> Projectiles:
    rng = np.random.default_rng(seed)
    x0 = np.stack([rng.uniform(0.0, 1.0, n), rng.uniform(0.05, 1.0, n)], 1).astype(np.float32)
    speed = rng.uniform(1.0, 4.0, n)
    angle = np.radians(rng.uniform(-45.0, 75.0, n))
    v0 = np.stack([speed * np.cos(angle), speed * np.sin(angle)], 1).astype(np.float32)
    drag = rng.uniform(0.05, 0.2, n).astype(np.float32)
    restitution = rng.uniform(0.6, 0.9, n).astype(np.float32)
    target = np.stack([rng.uniform(0.0, 4.0, n), rng.uniform(0.0, 0.5, n)], 1).astype(np.float32)
    return Projectiles(steps, dt, x0, v0, drag, restitution, 0.0, np.array([0.0, -9.81], np.float32), 0.0, target)


@dataclass
class Heat:
    """Diffusion2D on H x W cells with Dirichlet boundaries."""

    steps: int
    dx: float               # m
    dt: float               # s
    u0: np.ndarray          # (H, W) K
    conductivity: np.ndarray  # (H, W) m^2/s (the parameter)
    boundary_value: float   # K
    target: np.ndarray      # (H, W) K

    kind = "heat"


def heat_problem(h: int, w: int, steps: int, seed: int) -> Heat:
    rng = np.random.default_rng(seed)
    yy, xx = np.meshgrid((np.arange(h) + 0.5) / h, (np.arange(w) + 0.5) / w, indexing="ij")

    def blob(cy: float, cx: float, width: float) -> np.ndarray:
        return np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / (2 * width ** 2))

    disk = ((yy - 0.55) ** 2 + (xx - 0.45) ** 2) < 0.2 ** 2
    kappa = (1e-4 * (1.0 + 0.5 * disk + 0.1 * rng.uniform(0.0, 1.0, (h, w)))).astype(np.float32)
    dx = 1e-3
    dt = 0.2 * dx ** 2 / float(kappa.max())
    u0 = (blob(0.4, 0.35, 0.12) + 0.5 * blob(0.7, 0.6, 0.08)).astype(np.float32)
    target = (0.8 * blob(0.5, 0.5, 0.15)).astype(np.float32)
    return Heat(steps, dx, dt, u0, kappa, 0.0, target)


# -- cases ----------------------------------------------------------------------------------------------------------
@dataclass
class Variant:
    """One row of a case: ``label`` as printed, run by ``framework`` with ``budget_bytes`` (sopt's rollout)."""

    label: str
    framework: str
    budget_bytes: int | None = None


@dataclass
class Case:
    key: str
    title: str
    make: Callable[[], Any]      # builds the problem (only for the cases asked for)
    variants: list[Variant]
    note: Callable[[Any], str] | None = None
    problem: Any = field(default=None, repr=False)


def _all(sopt_budget: int | None = None) -> list[Variant]:
    return [Variant("sopt", "sopt", sopt_budget), Variant("torch", "torch"), Variant("warp", "warp"),
            Variant("warp_graph", "warp_graph")]


def _budget(small: bool, nx: int, ny: int, gib: float) -> int:
    """sopt's budget in bytes: ``gib`` GiB, or 8 cloth states (x, v with gradients) at the small sizes."""
    return 8 * 2 * (2 * nx * ny * 3 * 4) if small else int(gib * GIB)


def _size(n: float) -> str:
    """Bytes in GiB, MiB or KiB, whichever reads best."""
    for unit, scale in (("GiB", GIB), ("MiB", 1 << 20)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n / 1024:.3g} KiB"


def _store_all_note(p: Cloth) -> str:
    state = p.state_bytes
    return (f"storing every state: (T + 1) x (x, v) with gradients = {_size((p.steps + 1) * 2 * state)} (sopt); "
            f"Warp also keeps a force array per step: {_size(((p.steps + 1) * 2 + p.steps) * state)}")


def make_cases(keys: list[str], small: bool, seed: int, budget_gib: float) -> list[Case]:
    """The cases ``keys`` (C adds C512) at full or ``small`` size."""
    if small:
        sizes = {"A": (5, 4, 40), "B": (8, 6, 40), "C": (10, 8, 40), "C512": (8, 8, 40)}
        projectiles, heat = (64, 60, 1e-2), (12, 10, 30)
    else:
        sizes = {"A": (32, 32, 1000), "B": (128, 128, 1000), "C": (1024, 1024, 1000), "C512": (512, 512, 1000)}
        projectiles, heat = (65536, 1000, 1e-3), (512, 512, 2000)

    def cloth_case(key: str) -> Case:
        nx, ny, steps = sizes[key]
        springs = (nx - 1) * ny + nx * (ny - 1) + 2 * (nx - 1) * (ny - 1)
        return Case(key, f"cloth {nx}x{ny} ({nx * ny} particles, {springs} springs), {steps} steps, dt 1e-3 s; "
                         "gradient w.r.t. the per-spring stiffness",
                    functools.partial(cloth_problem, nx, ny, steps, seed), [])

    cases = []
    for key in keys:
        if key in ("A", "B"):
            case = cloth_case(key)
            case.variants = _all()
            cases.append(case)
        elif key == "C":
            big, mid = cloth_case("C"), cloth_case("C512")
            budget = _budget(small, *sizes["C"][:2], budget_gib)
            big.title += f"; sopt within {_size(budget)}, the others storing every state"
            big.variants = _all(budget)
            big.note = _store_all_note
            mid.key = "C512"
            budget = _budget(small, *sizes["C512"][:2], budget_gib)
            mid.title += f"; sopt storing every state vs within {_size(budget)}"
            mid.variants = [Variant("sopt", "sopt"), Variant("sopt_budget", "sopt", budget)]
            mid.note = _store_all_note
            cases += [big, mid]
        elif key == "D":
            n, steps, dt = projectiles
            cases.append(Case("D", f"{n} projectiles with drag and ground contact, {steps} steps, dt {dt:g} s; "
                                   "gradient w.r.t. per-particle drag, restitution and v0",
                              functools.partial(projectile_problem, n, steps, dt, seed), _all()))
        elif key == "E":
            h, w, steps = heat
            cases.append(Case("E", f"Diffusion2D {h}x{w}, {steps} steps; gradient w.r.t. the conductivity field",
                              functools.partial(heat_problem, h, w, steps, seed), _all()))
        else:
            raise ValueError(f"--cases: unknown case {key!r}; allowed: {', '.join(CASE_KEYS)}")
    return cases


# -- sopt -----------------------------------------------------------------------------------------------------------
class SoptRun:
    """One case on a sopt.Tape: ``sim`` from ``initial_state()``, ``steps`` steps, MSE of the final state's
    ``observe`` array against ``target``; gradients into ``params``."""

    def __init__(self, sim: Any, params: dict[str, sopt.Parameter], observe: str, target: np.ndarray, steps: int,
                 budget_bytes: int | None) -> None:
        self.sim, self.params, self.observe, self.steps, self.budget_bytes = sim, params, observe, steps, budget_bytes
        self.target = spy.Tensor.from_numpy(dev.get_device(), np.ascontiguousarray(target, np.float32))
        self.tape = sopt.Tape()
        self.mse = MSELoss()
        self._loss: Any = None

    def iteration(self) -> None:
        tape = self.tape
        with tape:
            for p in self.params.values():      # no optimiser step to zero them: clear in the same submission
                tp.clear(tape.encoder, p.grad)
            final = rollout(self.sim, self.sim.initial_state(), self.steps, budget_bytes=self.budget_bytes).state
            self._loss = self.mse(final[self.observe], self.target)
        tape.backward(self._loss)
        tape.submit()

    def gradients(self) -> dict[str, np.ndarray]:
        return {name: p.grad_numpy().astype(np.float64) for name, p in self.params.items()}

    def loss(self) -> float:
        return float(self._loss.item())

    @property
    def param_bytes(self) -> int:
        return sum(8 * p.size for p in self.params.values())   # values and gradients

    def close(self) -> None:
        self.tape.release()


def sopt_run(problem: Any, budget_bytes: int | None) -> SoptRun:
    if problem.kind == "cloth":
        k = sopt.Parameter(problem.stiffness, name="stiffness")
        sim = SpringSystem.cloth(problem.nx, problem.ny, problem.spacing, dim=3, pin="top_corners", stiffness=k,
                                 dt=problem.dt, damping=problem.damping, mass=problem.mass,
                                 gravity=problem.gravity)
        if not np.array_equal(sim.springs, problem.springs) or not np.array_equal(
                sim.pinned_mask, problem.pinned):
            raise AssertionError("benchmarks/physics.py's cloth differs from SpringSystem.cloth's")
        return SoptRun(sim, {"stiffness": k}, "x", problem.target, problem.steps, budget_bytes)
    if problem.kind == "projectile":
        params = {"drag": sopt.Parameter(problem.drag, name="drag"),
                  "restitution": sopt.Parameter(problem.restitution, name="restitution"),
                  "v0": sopt.Parameter(problem.v0, name="v0")}
        sim = Projectile(problem.x0, params["v0"], dt=problem.dt, gravity=problem.gravity, drag=params["drag"],
                         linear_drag=problem.linear_drag, restitution=params["restitution"], ground=problem.ground)
        return SoptRun(sim, params, "x", problem.target, problem.steps, budget_bytes)
    kappa = sopt.Parameter(problem.conductivity, name="conductivity")
    sim = Diffusion2D(problem.u0, kappa, problem.dx, problem.dt, boundary="dirichlet",
                      boundary_value=problem.boundary_value)
    return SoptRun(sim, {"conductivity": kappa}, "u", problem.target, problem.steps, budget_bytes)


# -- frameworks: import, device, synchronisation, memory --------------------------------------------------------
_OOM_WORDS = ("out of memory", "out_of_memory", "out_of_device_memory", "failed to allocate", "outofmemory")


def is_oom(exc: BaseException) -> bool:
    """Whether ``exc`` is a device (or host) allocation failure of any of the frameworks."""
    if isinstance(exc, MemoryError):
        return True
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(exc, getattr(torch.cuda, "OutOfMemoryError", ())):
        return True
    text = f"{type(exc).__name__} {exc}".lower()
    return any(w in text for w in _OOM_WORDS)


class Framework:
    """What the harness needs of a framework; ``missing`` holds why it cannot run here (None: it can)."""

    name = ""
    missing: str | None = None
    device_name = ""
    memory_how = ""

    def build(self, problem: Any, variant: Variant) -> Any:
        raise NotImplementedError

    def sync(self) -> None:
        raise NotImplementedError

    def memory_start(self) -> None:
        pass

    def memory_peak(self, run: Any) -> int | None:
        """Peak device bytes since :meth:`memory_start` (``run``: the case's run, None if building it failed)."""
        return None

    def cleanup(self) -> None:
        gc.collect()


class SoptFramework(Framework):
    name = "sopt"
    memory_how = "sopt.autodiff.tape.peak_allocated_bytes() + parameters"

    def __init__(self) -> None:
        device = dev.get_device()
        self.device_name = f"{device.info.adapter_name} [{dev.device_kind()}]"
        self._base = 0

    def build(self, problem: Any, variant: Variant) -> SoptRun:
        return sopt_run(problem, variant.budget_bytes)

    def sync(self) -> None:
        dev.synchronize()

    def memory_start(self) -> None:
        tp.reset_peak_allocated_bytes()
        self._base = tp.allocated_bytes()

    def memory_peak(self, run: SoptRun | None) -> int:
        return tp.peak_allocated_bytes() - self._base + (run.param_bytes if run is not None else 0)


class TorchFramework(Framework):
    name = "torch"

    def __init__(self) -> None:
        try:
            import torch
            from benchmarks import physics_torch
        except ImportError as exc:
            self.missing = f"not installed ({exc})"
            return
        self.torch, self.impl = torch, physics_torch
        self.cuda = torch.cuda.is_available()
        self.device = torch.device("cuda" if self.cuda else "cpu")
        self.device_name = f"torch {torch.__version__} on " + (torch.cuda.get_device_name() if self.cuda else "CPU")
        self.memory_how = "torch.cuda.max_memory_allocated" if self.cuda else "n/a on CPU"
        self._base = 0

    def build(self, problem: Any, variant: Variant) -> Any:
        return self.impl.build(problem.kind, problem, self.device)

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize()

    def memory_start(self) -> None:
        if self.cuda:
            self.torch.cuda.empty_cache()
            self.torch.cuda.reset_peak_memory_stats()
            self._base = self.torch.cuda.memory_allocated()

    def memory_peak(self, run: Any) -> int | None:
        return self.torch.cuda.max_memory_allocated() - self._base if self.cuda else None

    def cleanup(self) -> None:
        gc.collect()
        if self.cuda:
            self.torch.cuda.empty_cache()


class WarpFramework(Framework):
    def __init__(self, graph: bool) -> None:
        self.name = "warp_graph" if graph else "warp"
        self.graph = graph
        try:
            import warp as wp
            wp.config.log_level = wp.LOG_WARNING   # no greeting, no module-load lines between the tables
            wp.init()
            from benchmarks import physics_warp
        except ImportError as exc:
            self.missing = f"not installed ({exc})"
            return
        self.wp, self.impl = wp, physics_warp
        self.device = wp.get_device("cuda:0" if wp.is_cuda_available() else "cpu")
        self.device_name = f"warp {wp.config.version} on {self.device.name} ({self.device.alias})"
        self.pool = self.device.is_cuda and wp.is_mempool_enabled(self.device)
        self.memory_how = "wp.get_mempool_used_mem_high" if self.pool else "n/a (no CUDA memory pool)"
        self._base = 0

    def build(self, problem: Any, variant: Variant) -> Any:
        return self.impl.build(problem.kind, problem, self.device, self.graph)

    def sync(self) -> None:
        self.wp.synchronize_device(self.device)

    def memory_start(self) -> None:
        if self.pool:
            self.wp.synchronize_device(self.device)
            if not self.impl.reset_mempool_high(self.device):
                self.memory_how = "wp.get_mempool_used_mem_high (not reset: since the process started)"
            self._base = self.wp.get_mempool_used_mem_current(self.device)

    def memory_peak(self, run: Any) -> int | None:
        return self.wp.get_mempool_used_mem_high(self.device) - self._base if self.pool else None

    def cleanup(self) -> None:
        gc.collect()
        self.wp.synchronize_device(self.device)   # the pool gives freed memory back at a synchronisation


def load_frameworks(names: list[str]) -> dict[str, Framework]:
    out: dict[str, Framework] = {}
    for name in names:
        if name == "sopt":
            out[name] = SoptFramework()
        elif name == "torch":
            out[name] = TorchFramework()
        elif name in ("warp", "warp_graph"):
            out[name] = WarpFramework(graph=name == "warp_graph")
        else:
            raise ValueError(f"--frameworks: unknown framework {name!r}; allowed: {', '.join(FRAMEWORKS)}")
    return out


# -- measuring ------------------------------------------------------------------------------------------------------
def grad_difference(grads: dict[str, np.ndarray], reference: dict[str, np.ndarray]) -> dict[str, float]:
    """Per parameter array: max |g - g_ref| / max |g_ref|."""
    out = {}
    for name, ref in reference.items():
        scale = float(np.abs(ref).max())
        diff = float(np.abs(grads[name].reshape(ref.shape) - ref).max())
        out[name] = diff / scale if scale > 0 else (0.0 if diff == 0 else math.inf)
    return out


def measure(fw: Framework, case: Case, variant: Variant, repeats: int, warmup: int) -> dict[str, Any]:
    """One row: ``variant`` of ``case`` timed, its memory, loss and gradients (in ``_grads``, not printed)."""
    row: dict[str, Any] = {"case": case.key, "framework": variant.label, "status": "ok"}
    if fw.device_name:
        row["device"] = fw.device_name
    if variant.budget_bytes is not None:
        row["budget_bytes"] = variant.budget_bytes
    if fw.missing:
        row["status"] = fw.missing
        return row
    run = None
    try:
        fw.memory_start()
        run = fw.build(case.problem, variant)
        for _ in range(warmup):
            run.iteration()
            fw.sync()
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            run.iteration()
            fw.sync()
            times.append(time.perf_counter() - start)
        row["_grads"] = run.gradients()
        row["grad_scale"] = {name: float(np.abs(g).max()) for name, g in row["_grads"].items()}
        row["loss"] = run.loss()
        row["peak_bytes"] = fw.memory_peak(run)
        row["param_bytes"] = int(getattr(run, "param_bytes", 0))
        row["memory_how"] = fw.memory_how
        row["ms"] = 1e3 * statistics.median(times)
        row["ms_samples"] = [1e3 * t for t in times]
    except Exception as exc:   # noqa: BLE001 -- one framework's failure must not end the run
        if is_oom(exc):
            row["status"] = "OOM"
            try:
                row["peak_bytes"] = fw.memory_peak(run)   # reached before failing
                row["memory_how"] = fw.memory_how
            except Exception:   # noqa: BLE001 -- the peak is a courtesy; the row says OOM either way
                pass
        else:
            row["status"] = "error"
            traceback.print_exc()
        row["error"] = f"{type(exc).__name__}: {str(exc).strip()[:300]}"
    finally:
        close = getattr(run, "close", None)
        if close is not None:
            close()
        del run
        fw.cleanup()
    return row


def compare(rows: list[dict[str, Any]], judge: bool) -> None:
    """Add each row's gradient difference from the case's sopt row and sopt's speed-up over it; ``judge``: also
    whether the speed-up meets issue 11's target (at the full sizes only)."""
    ref = next((r for r in rows if r["framework"] == "sopt" and r["status"] == "ok"), None)
    if ref is None:
        return
    for r in rows:
        if r is ref or r["status"] != "ok":
            continue
        per = grad_difference(r["_grads"], ref["_grads"])
        r["grad_diff"] = per
        r["grad_diff_max"] = max(per.values())
        r["speedup_of_sopt"] = r["ms"] / ref["ms"]
        target = TARGETS.get(r["case"], {}).get(r["framework"])
        if judge and target is not None:
            r["target_speedup"] = target
            r["target_met"] = r["speedup_of_sopt"] >= target


def _mib(n: int | None) -> str:
    if n is None:
        return "n/a"
    mib = n / 2**20
    return f"{mib:.1f}" if mib >= 10 else f"{mib:.3f}"


def print_case(case: Case, rows: list[dict[str, Any]], judge: bool, out: Callable[[str], None]) -> None:
    out(f"{'framework':<12} {'ms/iter':>10} {'(min..max)':>21} {'peak MiB':>10} {'loss':>12} "
        f"{'grad diff vs sopt':>18}  memory measured by")
    for r in rows:
        if r["status"] != "ok":
            detail = f" ({r['error']})" if "error" in r else ""
            if r.get("peak_bytes") is not None:
                detail += f", {_mib(r['peak_bytes'])} MiB in use when it failed"
            out(f"{r['framework']:<12} {r['status']}{detail}")
            continue
        lo, hi = min(r["ms_samples"]), max(r["ms_samples"])
        diff = "-" if "grad_diff_max" not in r else f"{r['grad_diff_max']:.2e}"
        flag = "  <-- DISAGREES (> 1e-3)" if r.get("grad_diff_max", 0.0) > GRAD_FLAG else ""
        out(f"{r['framework']:<12} {r['ms']:>10.2f} {f'({lo:.2f}..{hi:.2f})':>21} {_mib(r['peak_bytes']):>10} "
            f"{r['loss']:>12.6g} {diff:>18}  {r['memory_how']}{flag}")
        if r.get("budget_bytes") and r.get("peak_bytes") is not None:
            # the budget bounds what the rollout holds (states, their gradients, recompute tapes); the trained
            # parameters and their gradients are the user's and exist with or without a rollout
            held = r["peak_bytes"] - r.get("param_bytes", 0)
            ratio = held / r["budget_bytes"]
            out(f"{'':<12} rollout peak {_size(held)} = {ratio:.3f}x the budget of {_size(r['budget_bytes'])} "
                f"({'within' if ratio <= 1 else 'OVER'}; plus {_size(r.get('param_bytes', 0))} of parameters "
                "and their gradients)")
    speed = [f"{r['speedup_of_sopt']:.2f}x vs {r['framework']}" for r in rows
             if "speedup_of_sopt" in r and not r["framework"].startswith("sopt")]
    if speed:
        out("sopt speed-up (their ms / sopt's ms): " + ", ".join(speed))
    targets = [f"{r['target_speedup']:g}x vs {r['framework']}: {'met' if r['target_met'] else 'MISSED'}"
               for r in rows if "target_met" in r]
    if targets:
        out("targets (issue 11): " + ", ".join(targets))
    if case.key == "C512":
        ok = {r["framework"]: r for r in rows if r["status"] == "ok"}
        if "sopt" in ok and "sopt_budget" in ok:
            ratio = ok["sopt_budget"]["ms"] / ok["sopt"]["ms"]
            ok["sopt_budget"]["time_vs_store_all"] = ratio
            met = "met" if ratio <= BUDGET_RATIO_TARGET else "MISSED"
            verdict = f" (target <= {BUDGET_RATIO_TARGET:g}x: {met})" if judge else ""
            out(f"budgeted / store-all time: {ratio:.2f}x{verdict}")


def print_summary(rows: list[dict[str, Any]], out: Callable[[str], None]) -> None:
    """One line per case: ms per iteration of each framework (or its status), sopt's speed-ups."""
    labels = list(dict.fromkeys(r["framework"] for r in rows))
    out("\nsummary: ms per iteration (forward rollout + backward), peak MiB in brackets")
    out(f"{'case':<6}" + "".join(f"{label:>22}" for label in labels))
    for key in dict.fromkeys(r["case"] for r in rows):
        cells = []
        for label in labels:
            r = next((r for r in rows if r["case"] == key and r["framework"] == label), None)
            if r is None:
                cells.append("")
            elif r["status"] == "ok":
                cells.append(f"{r['ms']:.2f} ({_mib(r['peak_bytes'])})")
            else:
                cells.append(r["status"] if len(r["status"]) <= 20 else r["status"][:17] + "...")
        out(f"{key:<6}" + "".join(f"{c:>22}" for c in cells))


def run(case_keys: list[str], framework_names: list[str], *, small: bool = False, repeats: int = 10,
        warmup: int = 2, budget_gib: float = 4.0, seed: int = 0,
        out: Callable[[str], None] = print) -> list[dict[str, Any]]:
    """Run the cases ``case_keys`` with the frameworks ``framework_names``; print as it goes; the rows
    (``_grads`` removed: the gradients are compared here)."""
    frameworks = load_frameworks(framework_names)
    for fw in frameworks.values():
        out(f"{fw.name:<11} {fw.missing or fw.device_name}")
    rows: list[dict[str, Any]] = []
    for case in make_cases(case_keys, small, seed, budget_gib):
        out(f"\ncase {case.key}: {case.title}")
        case.problem = case.make()
        if case.note is not None:
            out(case.note(case.problem))
        case_rows = [measure(frameworks[v.framework], case, v, repeats, warmup)
                     for v in case.variants if v.framework in frameworks]
        compare(case_rows, judge=not small)
        print_case(case, case_rows, not small, out)
        for r in case_rows:
            r.pop("_grads", None)
        rows += case_rows
        case.problem = None   # C's arrays are large
        gc.collect()
    print_summary(rows, out)
    return rows


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", default=",".join(CASE_KEYS), help="comma-separated from A, B, C, D, E (default all)")
    ap.add_argument("--frameworks", default=",".join(FRAMEWORKS),
                    help="comma-separated from sopt, torch, warp, warp_graph (default all)")
    ap.add_argument("--repeats", type=int, default=10, help="timed iterations per framework and case (default 10)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed iterations first (default 2)")
    ap.add_argument("--small", action="store_true", help="tiny sizes and steps (a smoke test on CPU / lavapipe)")
    ap.add_argument("--c-budget-gib", type=float, default=4.0, help="sopt's memory budget in case C (default 4)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None, metavar="PATH", help="also write every row as JSON")
    args = ap.parse_args(argv)
    args.cases = [c.strip().upper() for c in args.cases.split(",") if c.strip()]
    args.frameworks = [f.strip() for f in args.frameworks.split(",") if f.strip()]
    for c in args.cases:
        if c not in CASE_KEYS:
            ap.error(f"--cases: unknown case {c!r}; allowed: {', '.join(CASE_KEYS)}")
    for f in args.frameworks:
        if f not in FRAMEWORKS:
            ap.error(f"--frameworks: unknown framework {f!r}; allowed: {', '.join(FRAMEWORKS)}")
    if args.repeats < 1 or args.warmup < 0:
        ap.error(f"--repeats must be >= 1 and --warmup >= 0, got {args.repeats} and {args.warmup}")
    if not args.c_budget_gib > 0:
        ap.error(f"--c-budget-gib must be > 0, got {args.c_budget_gib}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    print(f"physics benchmark: cases {','.join(args.cases)}; {args.repeats} timed iterations after {args.warmup} "
          f"warm-up{' (--small sizes)' if args.small else ''}")
    rows = run(args.cases, args.frameworks, small=args.small, repeats=args.repeats, warmup=args.warmup,
               budget_gib=args.c_budget_gib, seed=args.seed)
    if args.json:
        meta = {"args": {k: v for k, v in vars(args).items() if k != "json"},
                "sopt_device": f"{dev.get_device().info.adapter_name} [{dev.device_kind()}]"}
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "rows": rows}, f, indent=1)
    errors = [r for r in rows if r["status"] == "error"]
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
