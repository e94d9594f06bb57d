"""The one SlangPy device sopt runs on (the kernels loaded onto it are declared in :mod:`sopt.runtime.kernel`).

Selection: CUDA where an NVIDIA driver works, else Vulkan (a GPU, or Mesa's software driver lavapipe).
``SOPT_DEVICE=cuda|vulkan`` forces one. SlangPy's CPU device is never used: it cannot dispatch calls.

Compiled shaders are cached on disk (``SOPT_CACHE_DIR``, default ``$XDG_CACHE_HOME/sopt`` or
``~/.cache/sopt``) so that a second process does not recompile every kernel. A kernel's first compile can
take seconds (tens on the software driver, most of it the driver's compile at the pipeline's first run, which
:func:`compiling` makes happen at the compile); it reports each one on the ``"sopt"`` logger (stderr by
default; ``logging.getLogger("sopt").setLevel(logging.WARNING)`` silences it) when the disk cache has not
seen that kernel before, numbered, with how long it took (:func:`compiles` lists them; :func:`compile_seconds`
is the time first uses took, which the Trainer's progress bar leaves out of its rate).
An unwritable cache folder is reported once and sopt runs without a disk cache.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import hashlib
import logging
import os
import pathlib
import sys
import tempfile
import threading
import time
import warnings
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import slangpy as spy
from slangpy.experimental.gridarg import GridArg

_PACKAGE_DIR = pathlib.Path(__file__).resolve().parents[1]   # sopt/



class _StderrHandler(logging.StreamHandler):
    """A StreamHandler writing to whatever ``sys.stderr`` is when a record comes (not the one at import): so
    ``contextlib.redirect_stderr`` catches compile notices, and tqdm's ``logging_redirect_tqdm`` (the Trainer's,
    which prints them above its bar) recognises it as the console handler it replaces."""

    @property   # type: ignore[override]
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        pass   # always the current sys.stderr


log = logging.getLogger("sopt")
if not log.handlers:
    # compile notices should reach a user who configured no logging; their own config can still take over
    _handler = _StderrHandler()
    _handler.setFormatter(logging.Formatter("sopt: %(message)s"))
    log.addHandler(_handler)
    log.setLevel(logging.INFO)
    log.propagate = False


def slang_lib_path() -> pathlib.Path:
    """Folder of sopt's Slang sources: inside the installed package, else beside it in a source tree."""
    for candidate in (_PACKAGE_DIR / "slang_lib", _PACKAGE_DIR.parent / "slang_lib"):
        if (candidate / "optim").is_dir():
            return candidate
    raise FileNotFoundError(
        f"sopt's Slang sources were not found in {_PACKAGE_DIR / 'slang_lib'} nor {_PACKAGE_DIR.parent / 'slang_lib'}; "
        "reinstall sopt (pip install .)"
    )


def cache_dir() -> pathlib.Path:
    """On-disk shader cache folder (``SOPT_CACHE_DIR`` overrides)."""
    if os.environ.get("SOPT_CACHE_DIR"):
        return pathlib.Path(os.environ["SOPT_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return pathlib.Path(base) / "sopt"


class DeviceUnavailableError(RuntimeError):
    """No usable GPU backend: neither CUDA nor Vulkan could create a device."""


_KINDS = {"cuda": spy.DeviceType.cuda, "vulkan": spy.DeviceType.vulkan}
_device: spy.Device | None = None
_disk_cache: pathlib.Path | None = None   # the writable cache folder of the device's kind, None without one
_compiled_here: set[str] = set()           # compile labels already checked in this process
_sources_digest: str | None = None
_unwritable_warned: set[pathlib.Path] = set()
_dispatches = 0
_compiles: list[tuple[str, float]] = []   # (label, seconds) of each compile the disk cache had not seen
_compile_seconds = 0.0                     # seconds in first uses of kernels in this process (compiles or loads)
_announced = False                         # whether this process said where compiled kernels go


def _cuda_driver_missing() -> str | None:
    """Why CUDA can't work here (no driver library), or None; checked before SlangPy logs its own errors."""
    try:
        ctypes.CDLL("libcuda.so.1" if sys.platform != "win32" else "nvcuda.dll")
        return None
    except OSError as exc:
        return f"NVIDIA driver library not loadable ({exc})"


_torch_index: int | None = None   # the torch CUDA device whose context sopt's device shares, if any


def _torch_context_handles() -> list[Any] | None:
    """Native handles of torch's current CUDA context when torch is already imported and has CUDA, else None: a
    device made on them shares torch's context (spy.create_torch_device does the same), so arrays pass between
    sopt and torch without copies. torch is never imported here: importing it costs seconds."""
    global _torch_index
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available():
        return None
    torch.cuda.init()
    index = torch.cuda.current_device()
    torch.cuda.current_stream()   # makes torch create its context on that device
    with torch.cuda.device(index):
        handles = spy.get_cuda_current_context_native_handles()
    _torch_index = index
    return handles


def torch_device_index() -> int | None:
    """The torch CUDA device (its index) whose context sopt's device shares, or None (Vulkan, or a CUDA device made
    before torch was imported). sopt.torch passes arrays without copies only on that device."""
    get_device()
    return _torch_index


def _create(kind: str) -> spy.Device:
    global _torch_index
    handles = None
    if kind == "cuda":
        missing = _cuda_driver_missing()
        if missing:
            raise RuntimeError(missing)
        handles = _torch_context_handles()
    global _disk_cache
    cache = _writable_cache(cache_dir() / kind)
    caches = {} if cache is None else {"shader_cache_path": str(cache / "shaders"),
                                       "module_cache_path": str(cache / "modules")}
    device = spy.Device(
        type=_KINDS[kind],
        enable_hot_reload=False,
        compiler_options={"include_paths": [str(slang_lib_path()), str(spy.SHADER_PATH)]},
        label="sopt",
        **caches,
        **({"existing_device_handles": handles} if handles else {}),
    )
    if handles is None:
        _torch_index = None
    _disk_cache = cache
    return device


def _writable_cache(folder: pathlib.Path) -> pathlib.Path | None:
    """``folder``, created, if a file can be written in it; else None after one warning (no disk cache: a
    read-only cache would otherwise make device creation fail, and SlangPy would try to delete it)."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
        return folder
    except OSError as exc:
        if folder.parent in _unwritable_warned:
            return None
        _unwritable_warned.add(folder.parent)
        warnings.warn(f"sopt's shader cache folder {str(folder)!r} is not writable ({exc.strerror or exc}); running "
                      "without a disk cache, so every process compiles its kernels again. Set SOPT_CACHE_DIR to a "
                      "writable folder to keep them.", RuntimeWarning, stacklevel=4)
        return None


def get_device() -> spy.Device:
    """The process-wide device, created on first use."""
    global _device
    if _device is not None:
        return _device
    wanted = os.environ.get("SOPT_DEVICE", "").strip().lower()
    if wanted and wanted not in _KINDS:
        raise ValueError(f"SOPT_DEVICE={os.environ['SOPT_DEVICE']!r} is not supported: allowed are "
                         f"{', '.join(repr(k) for k in _KINDS)}, or unset to pick CUDA where it works, else Vulkan")
    tried: list[str] = []
    for kind in [wanted] if wanted else ["cuda", "vulkan"]:
        try:
            _device = _create(kind)
            return _device
        except Exception as exc:  # SlangPy raises plain RuntimeErrors for missing drivers
            first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            tried.append(f"  {kind}: {first_line}")
    raise DeviceUnavailableError(
        "sopt found no GPU backend. Tried:\n" + "\n".join(tried) + "\n"
        "Install an NVIDIA driver for CUDA, or a Vulkan driver: on Debian 12 without a GPU, Mesa's software "
        "driver lavapipe >= 23 (apt-get install -t bookworm-backports mesa-vulkan-drivers). "
        "SOPT_DEVICE=cuda|vulkan picks one explicitly."
    ) from None


def device_kind() -> str:
    """'cuda' or 'vulkan': the backend of :func:`get_device`."""
    return "cuda" if get_device().info.type == spy.DeviceType.cuda else "vulkan"


def _slang_sources_digest() -> str:
    """A hash of sopt's Slang sources, so that compile notices follow edits of them."""
    global _sources_digest
    if _sources_digest is None:
        h = hashlib.sha1()
        for path in sorted(slang_lib_path().rglob("*.slang")):
            h.update(path.relative_to(slang_lib_path()).as_posix().encode())
            h.update(path.read_bytes())
        _sources_digest = h.hexdigest()
    return _sources_digest


class FirstUse:
    """What :func:`compiling` yields to the code it wraps: :meth:`run` makes the driver compile a kernel's pipeline
    there and then, so that the compile's time and notice include the driver's part."""

    __slots__ = ("waited", "driver")

    def __init__(self) -> None:
        self.waited = 0.0   # seconds waiting for GPU work submitted before (not compiling; left out of the time)
        self.driver = 0.0   # seconds of the driver's compile at the pipeline's first run

    def run(self, pipeline: spy.ComputePipeline) -> None:
        """Dispatch no thread groups of ``pipeline`` (with no arguments bound) in a command buffer of its own and
        wait for it: a Vulkan driver may compile a pipeline only when it first runs (lavapipe does, for seconds a
        kernel), which would otherwise be a silent wait at the next read of a result. The GPU work submitted
        before is waited for first, outside the time. Nothing on CUDA, whose pipelines are compiled when they are
        created, nor while :mod:`sopt.runtime.cuda_graph` captures."""
        if device_kind() != "vulkan" or capturing():
            return
        device = get_device()
        began = time.perf_counter()
        device.wait()
        ready = time.perf_counter()
        encoder = device.create_command_encoder()
        compute = encoder.begin_compute_pass()
        compute.bind_pipeline(pipeline)
        # an indirect dispatch of (0, 0, 0) groups: a direct one of 0 groups makes SlangPy's validation warn
        compute.dispatch_compute_indirect(_no_groups(device))
        compute.end()
        device.submit_command_buffer(encoder.finish())
        device.wait()
        self.waited += ready - began
        self.driver += time.perf_counter() - ready


_no_groups_buffers: dict[int, spy.Buffer] = {}


def _no_groups(device: spy.Device) -> spy.BufferOffsetPair:
    """Indirect dispatch arguments (0, 0, 0) on ``device``: no thread group runs. (The buffer is kept here: the
    pair does not keep it alive.)"""
    buffer = _no_groups_buffers.get(id(device))
    if buffer is None:
        buffer = _no_groups_buffers[id(device)] = device.create_buffer(
            size=16, usage=spy.BufferUsage.indirect_argument | spy.BufferUsage.shader_resource,
            data=np.zeros(4, np.uint32))
    return spy.BufferOffsetPair(buffer, 0)


def _announce_compiles(device_name: str) -> None:
    """The line before a process's first compile: where compiled kernels go, and that the bar leaves them out."""
    global _announced
    if _announced:
        return
    _announced = True
    where = "no disk cache" if _disk_cache is None else f"cached in {_disk_cache} afterwards"
    log.info("compiling kernels on %s at their first use (%s; the progress bar's rate and ETA leave compiling out); "
             "each is numbered and timed, the driver's compile included ...", device_name, where)


@contextlib.contextmanager
def compiling(what: str) -> Iterator[FirstUse]:
    """Wrap the first use in a process of a kernel whose compile may be slow (SlangPy's compile, the pipeline's
    creation and, through the yielded :class:`FirstUse`'s ``run``, the driver's compile at its first run): unless
    the disk cache has compiled it before (a marker per kernel and sources version, written once the body
    succeeds), logs ``compile N: what in S s`` after it, numbered, with the driver's share and the total so far
    (the first such line of a process is preceded by one saying where the cache is). Within one process each
    ``what`` is checked once; the time of every first use, cached or not, adds to :func:`compile_seconds`."""
    global _compile_seconds
    first = FirstUse()
    if what in _compiled_here:
        yield first
        return
    device_name = device_kind()
    marker = None
    if _disk_cache is not None:
        digest = hashlib.sha1(f"{_slang_sources_digest()}|{what}".encode()).hexdigest()
        marker = _disk_cache / "compiled" / digest
    compiles = marker is None or not marker.exists()
    if compiles:
        _announce_compiles(device_name)
    began = time.perf_counter()
    try:
        yield first
    finally:
        # a failed compile took its time too; the progress bar must not count it as training
        seconds = time.perf_counter() - began - first.waited
        _compile_seconds += seconds
    _compiled_here.add(what)
    if compiles:
        _compiles.append((what, seconds))
        driver = f"the driver's {first.driver:.1f} s of it; " if first.driver else ""
        log.info("compile %d: %s in %.1f s (%s%.1f s compiling in this process)", len(_compiles), what, seconds,
                 driver, sum(s for _, s in _compiles))
    if compiles and marker is not None:
        try:
            marker.parent.mkdir(exist_ok=True)
            marker.touch()
        except OSError:
            pass  # the notice repeats next time; nothing else depends on the marker


def compiles() -> list[tuple[str, float]]:
    """(kernel label, seconds) of each compile in this process that the disk cache had not seen, in order (a
    copy): what ``sopt warmup`` reports, and what a second process with the same cache no longer does."""
    return list(_compiles)


def compile_seconds() -> float:
    """Seconds this process spent in kernels' first uses (compiles, or loads from the disk cache, the driver's
    part included): time that is not training, which the Trainer's progress bar leaves out of its rate and ETA."""
    return _compile_seconds


def disk_cache() -> pathlib.Path | None:
    """The device's writable shader cache folder (``cache_dir()/<kind>``), or None when it runs without one."""
    get_device()
    return _disk_cache


def kernels_used() -> int:
    """How many distinct kernels this process has used (compiled or loaded from the disk cache)."""
    return len(_compiled_here)


def multiprocessor_count() -> int | None:
    """The fewest streaming multiprocessors of any visible CUDA device (the CUDA driver's
    CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT), or None on Vulkan or when the driver can't tell.

    Kernels whose thread groups wait for each other (a grid barrier) launch at most this many groups, one per
    multiprocessor, so that all of them are resident at once whichever device SlangPy opened. Under CUDA MPS
    with ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`` set, the process gets only that share of them
    (:func:`mps_share`)."""
    if device_kind() != "cuda":
        return None
    return _multiprocessors_available()


@functools.cache   # the driver is asked once per process, answer or not
def _multiprocessors_available() -> int | None:
    """:func:`_driver_multiprocessors` less what CUDA MPS keeps from this process (:func:`mps_share`)."""
    count = _driver_multiprocessors()
    return None if count is None else mps_share(count, os.environ.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"))


def _fewest_over_devices(query: Callable[[Any, Any], int | None]) -> int | None:
    """The least of ``query(cuda, device)`` over the visible CUDA devices, through the driver API (``cuda`` the
    loaded libcuda, ``device`` a CUdevice); None without a working driver or if any query gives None. No SlangPy
    device is created."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1" if sys.platform != "win32" else "nvcuda.dll")
        count = ctypes.c_int(0)
        if cuda.cuInit(0) != 0 or cuda.cuDeviceGetCount(ctypes.byref(count)) != 0 or count.value < 1:
            return None
        values = []
        for ordinal in range(count.value):
            device = ctypes.c_int(0)
            value = query(cuda, device) if cuda.cuDeviceGet(ctypes.byref(device), ordinal) == 0 else None
            if value is None:
                return None
            values.append(value)
        return min(values)
    except (OSError, AttributeError):
        return None


def _driver_multiprocessors() -> int | None:
    """The fewest multiprocessors of the visible CUDA devices from the driver API, None if any call fails."""
    def multiprocessors(cuda: Any, device: Any) -> int | None:
        value = ctypes.c_int(0)
        return value.value if cuda.cuDeviceGetAttribute(ctypes.byref(value), 16, device) == 0 else None   # SM count
    return _fewest_over_devices(multiprocessors)


def host_memory_available() -> int:
    """Bytes of host memory a new allocation can take now: /proc/meminfo's MemAvailable (Linux), else the
    physical memory (``os.sysconf``). lavapipe's "device" memory is this host memory too."""
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


@functools.cache   # the driver is asked once per process, answer or not
def cuda_memory_total() -> int | None:
    """Bytes of memory of the smallest visible CUDA device (the driver's cuDeviceTotalMem), or None without a
    working CUDA driver; asks the driver only, so no SlangPy device is created (configs are checked before).
    Asked once per process (a device's total memory does not change): ``sopt run`` checks its config several
    times (the defaults, after each override, the result), and each ask loads the driver and queries every device."""
    def total_memory(cuda: Any, device: Any) -> int | None:
        total = ctypes.c_size_t(0)
        return total.value if cuda.cuDeviceTotalMem_v2(ctypes.byref(total), device) == 0 else None
    return _fewest_over_devices(total_memory)


def mps_share(count: int, percentage: str | None) -> int:
    """The multiprocessors of ``count`` that CUDA MPS lets a client with ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`` =
    ``percentage`` use (rounded down, at least 1); ``count`` when unset or not a number in (0, 100]."""
    try:
        share = float(percentage) if percentage is not None else 100.0
    except ValueError:
        return count
    if not 0.0 < share <= 100.0:
        return count
    return max(1, int(count * share / 100.0))


class BoundKernel:
    """A compute kernel whose arguments stay bound between dispatches.

    ``kernel.dispatch(vars=...)`` rebuilds every binding on every call (tens of µs of host time for a
    kernel with many arguments); a BoundKernel keeps one root shader object, writes an argument only when
    its value changes (:meth:`set`), and :meth:`dispatch` just binds it. The values in effect when a
    dispatch is recorded are the ones it uses, even if :meth:`set` changes them before the GPU runs it.
    """

    def __init__(self, kernel: spy.ComputeKernel, **vars: Any) -> None:
        self.kernel = kernel
        self._root = get_device().create_root_shader_object(kernel.program)
        self._globals = spy.ShaderCursor(self._root)
        self._entry = self._globals.find_entry_point(0)
        self._values: dict[str, Any] = {}
        # argument path (name, member, ...) -> its cursor (found once: finding one costs host time, and every step
        # writes several)
        self._fields: dict[tuple[str, ...], spy.ShaderCursor] = {}
        self._nested: set[str] = set()   # struct arguments bound with a struct member (set_members checks deeper)
        self.set(**vars)

    def _field(self, *path: str) -> spy.ShaderCursor:
        """The cursor of argument ``path[0]``, or of its member ``path[1:]`` (a struct's, a struct's struct's)."""
        cursor = self._fields.get(path)
        if cursor is None:
            if len(path) == 1:
                cursor = (self._entry if self._entry.has_field(path[0]) else self._globals)[path[0]]
            else:
                cursor = self._field(*path[:-1])[path[-1]]
            self._fields[path] = cursor
        return cursor

    def set(self, **vars: Any) -> "BoundKernel":
        """Write arguments by name: uniform entry-point parameters, or else module-level shader parameters.

        A value identical to the last one written (the same object, or an equal number) is skipped; a dict
        (a struct) with the keys it was bound with writes only the members that changed (:meth:`set_members`).
        """
        for name, value in vars.items():
            old = self._values.get(name, _UNSET)
            if _unchanged(old, value):
                continue
            if isinstance(value, dict) and isinstance(old, dict) and old.keys() == value.keys():
                self.set_members(name, **value)
                continue
            self._field(name).write(value)
            self._values[name] = _copied(value)
            if isinstance(value, dict) and any(type(v) is dict for v in value.values()):
                self._nested.add(name)
            else:
                self._nested.discard(name)
        return self

    def set_members(self, name: str, **members: Any) -> "BoundKernel":
        """Write some members of the struct argument ``name`` (bound before as a dict holding every member), only
        those that changed; a member that is itself a struct may be given as a dict of some of its members, written
        the same way. A member the struct was not bound with is refused before anything is written."""
        values = self._values.get(name)
        # the common case, every member known of a struct without struct members, takes one C-level subset test
        # (a training step sets members several times; the full walk would add to each step's host time)
        if name in self._nested or type(values) is not dict or not values.keys() >= members.keys():
            _check_members((name,), values, members)
        self._write_members((name,), values, members)
        return self

    def _write_members(self, path: tuple[str, ...], values: dict[str, Any], members: dict[str, Any]) -> None:
        for member, v in members.items():
            old = values[member]
            if old is v:   # the common case on a hot path (the same buffer, a small int): nothing to compare
                continue
            if type(v) is dict and type(old) is dict:
                self._write_members((*path, member), old, v)
            elif not _unchanged(old, v):
                self._field(*path, member).write(v)
                values[member] = _copied(v)
                if type(v) is dict:   # a struct member now: set_members checks its members from here on
                    self._nested.add(path[0])

    def dispatch(self, threads: int | tuple[int, int], encoder: spy.CommandEncoder | None = None) -> None:
        """Record ``threads`` threads into ``encoder``, or submit them now without one: a count (1-D), or
        ``(x, y)`` for a 2-D grid of threads (CUDA starts the thread groups of one y before the next y's, x fastest)."""
        global _dispatches
        _dispatches += 1
        if _capture_log is not None and capturing():   # sopt.runtime.cuda_graph compares what successive calls record
            _capture_log.append(("dispatch", self.kernel, threads, _snapshot(self._values)))
        own = encoder is None
        if own:
            encoder = create_command_encoder()
        compute = encoder.begin_compute_pass()
        compute.bind_pipeline(self.kernel.pipeline, self._root)
        compute.dispatch([threads, 1, 1] if isinstance(threads, int) else [threads[0], threads[1], 1])
        compute.end()
        if own:
            submit(encoder)


_UNSET = object()


def _unchanged(old: Any, new: Any) -> bool:
    """Whether writing ``new`` over ``old`` would change nothing: the same object, or an equal number."""
    return old is new or (isinstance(new, (int, float)) and type(old) is type(new) and old == new)


def _copied(value: Any) -> Any:
    """``value`` as remembered after a write: a struct's dict (and its structs') copied, so later changes to the
    caller's dicts are seen as changes."""
    return {k: _copied(v) for k, v in value.items()} if isinstance(value, dict) else value


def _check_members(path: tuple[str, ...], values: Any, members: dict[str, Any]) -> None:
    """KeyError unless every member of ``members`` (and of its dicts, recursively) is one of the struct ``values``
    the argument ``path`` was bound with."""
    unknown = members.keys() - values.keys() if isinstance(values, dict) else members.keys()
    if unknown:
        known = sorted(values) if isinstance(values, dict) else []
        raise KeyError(f"{'.'.join(path)} has no member(s) {sorted(unknown)} (bound: {known})")
    for member, v in members.items():
        if type(v) is dict and type(values[member]) is dict:
            _check_members((*path, member), values[member], v)


def count_dispatch(n: int = 1) -> None:
    """Record ``n`` dispatches made through SlangPy's functional API (``func(...)``, ``func.bwds(...)``)."""
    global _dispatches
    _dispatches += n


def dispatch_count() -> int:
    """Number of GPU dispatches sopt has issued in this process (for tests and profiling)."""
    return _dispatches


def capturing() -> bool:
    """Whether this thread is inside :func:`sopt.runtime.cuda_graph.capture` (its submissions go to the capture device)."""
    return _capture_target is not None and _capture_thread == threading.get_ident()


def create_command_encoder() -> spy.CommandEncoder:
    """A command encoder for sopt's kernels: the device's, or while :mod:`sopt.runtime.cuda_graph` captures on this
    thread, the capture device's (on the same CUDA context), whose submissions go into the graph."""
    return (_capture_target[0] if capturing() else get_device()).create_command_encoder()   # type: ignore[index]


def submit(encoder: spy.CommandEncoder) -> None:
    """Submit the commands recorded in ``encoder``; the host does not wait for them. On a device sharing torch's
    CUDA context they run on torch's current stream, ordered with torch's own work without a host wait. While
    :mod:`sopt.runtime.cuda_graph` captures, they are recorded into the graph instead (``encoder`` from
    :func:`create_command_encoder`)."""
    if capturing():
        global _capture_submissions
        device, stream = _capture_target   # type: ignore[misc]
        _capture_submissions += 1
        device.submit_command_buffer(encoder.finish(), cuda_stream=spy.NativeHandle.from_cuda_stream(stream))
        return
    device = get_device()
    if _torch_index is not None:
        stream = _torch_stream(_torch_index)
        device.submit_command_buffer(encoder.finish(), cuda_stream=spy.NativeHandle.from_cuda_stream(stream))
        return
    device.submit_command_buffer(encoder.finish())


def upload(encoder: spy.CommandEncoder, buffer: spy.Buffer, offset: int, data: Any,
           graph_input: bool = False) -> None:
    """Record the write of host array ``data`` into ``buffer`` at byte ``offset`` (the values at this call are
    the ones written, whenever the GPU runs it); noted for :mod:`sopt.runtime.cuda_graph`'s checks, since a graph replays
    the bytes it captured. ``graph_input``: data a replayed graph is given anew before each launch (an
    optimiser's hyperparameter rows): not compared, and while captured, kept out of the graph and written before
    the capture's own launch."""
    if capturing():
        if graph_input:
            if _capture_inputs is not None:   # the captured period
                _capture_inputs.append((buffer, int(offset), np.array(data, copy=True)))
                return
        elif _capture_log is not None:
            _capture_log.append(("upload", buffer, int(offset), bytes(memoryview(data).cast("B"))))
    encoder.upload_buffer_data(buffer, offset, data)


def stream_handle() -> int:
    """The CUDA stream sopt's submissions run on: torch's current stream on a device sharing torch's context,
    else 0 (the CUDA device's default stream)."""
    return _torch_stream(_torch_index) if _torch_index is not None else 0


# sopt.runtime.cuda_graph's capture state: (capture device, stream) that create_command_encoder/submit use while it
# captures, and the log of what each dispatch and upload was given, or None when not capturing / checking
_capture_target: tuple[spy.Device, int] | None = None
_capture_thread = 0          # the thread capturing (other threads' work is not captured)
_capture_submissions = 0     # submissions through the capture device so far
_capture_log: list[tuple[Any, ...]] | None = None
_capture_inputs: list[tuple[Any, int, Any]] | None = None   # graph inputs of the captured period (see upload)
_graph_launches = 0   # CUDA graphs launched so far (work the host did not record: host-side mirrors re-sync)
_graph_generation = 0   # bumped when buffers a graph may have captured are replaced (invalidate_graphs)
_graph_invalidated_by = ""   # what bumped it last (for the error of a graph launched after)


def invalidate_graphs(why: str) -> None:
    """Buffers or control words a captured CUDA graph may use were replaced (``why``, for its error): every graph
    captured before refuses to launch (the Trainer captures again)."""
    global _graph_generation, _graph_invalidated_by
    _graph_generation += 1
    _graph_invalidated_by = why


def graph_generation() -> int:
    """How many times buffers a captured graph may use were replaced (:func:`invalidate_graphs`): a graph, or a
    recorded step, from an older generation does not match the buffers of this one."""
    return _graph_generation


def graph_launches() -> int:
    """CUDA graphs launched so far by :mod:`sopt.runtime.cuda_graph` (objects that mirror a GPU counter on the host, such
    as BatchSampler's step, rewrite it after a launch)."""
    return _graph_launches


def _snapshot(values: dict[str, Any]) -> tuple[Any, ...]:
    """The arguments a dispatch was recorded with, comparable between two dispatches: numbers, arrays, grids and
    SlangPy vectors by value, tensors by the buffer they view and where, other objects (buffers) by identity;
    buffers are kept alive by the tuple itself (a graph replays their addresses)."""
    return tuple((k, _argument(v)) for k, v in sorted(values.items(), key=lambda kv: str(kv[0])))


def _argument(v: Any) -> Any:
    if isinstance(v, dict):
        return _snapshot(v)
    if isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, (tuple, list)):
        return tuple(_argument(x) for x in v)
    if hasattr(v, "dtype") and hasattr(v, "tobytes"):   # a numpy array or scalar: its bytes
        return (str(v.dtype), getattr(v, "shape", ()), v.tobytes())
    if isinstance(v, GridArg):   # spy.grid(...), made anew by each call: its shape, stride and offset
        return ("grid", tuple(v.shape), tuple(v.stride), tuple(v.offset))
    if isinstance(v, spy.Tensor):   # a view made anew by a call: the buffer it views (kept alive) and where
        return ("tensor", _Same(v.storage), int(v.offset), tuple(v.shape), tuple(v.strides), str(v.dtype))
    if type(v).__module__ == "slangpy.math":   # spy.float2(...) and the like: values, compared with ==
        return (type(v).__name__, str(v))
    return _Same(v)


class _Same:
    """An argument object compared by identity (and kept alive)."""
    __slots__ = ("obj",)

    def __init__(self, obj: Any) -> None:
        self.obj = obj

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Same) and other.obj is self.obj

    def __hash__(self) -> int:
        return id(self.obj)

    def __repr__(self) -> str:
        return f"{type(self.obj).__name__}@{id(self.obj):#x}"


def _torch_stream(index: int) -> int:
    """The handle of torch's current CUDA stream on device ``index`` (the raw pointer: building torch's Stream
    object for it costs host time at every submission)."""
    from sopt.compat import torch as compat_torch
    return compat_torch.current_raw_stream(index)


def synchronize() -> None:
    """Block until the GPU has finished all submitted work."""
    get_device().wait()


__all__: Sequence[str] = (
    "BoundKernel", "DeviceUnavailableError", "FirstUse", "cache_dir", "capturing", "compile_seconds", "compiles",
    "compiling", "count_dispatch", "create_command_encoder", "device_kind", "disk_cache", "dispatch_count",
    "get_device", "graph_generation", "graph_launches", "invalidate_graphs", "kernels_used", "slang_lib_path",
    "stream_handle", "submit", "synchronize", "torch_device_index", "upload",
)
