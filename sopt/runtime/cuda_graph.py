"""CUDA graphs: record a step's launches once, then replay the whole step with one launch (CUDA device only).

A small training step is bound by the host: every dispatch costs more Python and driver time than the GPU
takes to run it. tiny-cuda-nn and Warp replay CUDA graphs for this (``wp.ScopedCapture`` /
``wp.capture_launch``; ``torch.cuda.graph``); so does sopt::

    graph = sopt.runtime.cuda_graph.capture(trainer.train_step, calls=2)   # the step runs 4 times: 2 + 2 captured
    for _ in range(1000):
        graph.replay()                                             # 2 more steps, one launch

``Trainer(cuda_graph=True)`` does this inside ``fit`` / ``train_steps``.

What a graph replays is what was captured: every launch with the arguments it had then. sopt's own per-step
counters live on the GPU so that replayed steps count on (the optimiser's step count behind Adam's bias
correction, BatchSampler's step); everything else a call gives its kernels must repeat with period ``calls``
(the optimiser's double-buffered arena alternates sides, hence ``calls=2``). ``capture`` checks this: ``fn``
runs ``calls`` times first, through the capture device, then ``calls`` times into the graph, and every
dispatch, SlangPy call and upload of the second period must be given what its twin in the first was given
(numbers equal, buffers and tensors the same objects, uploaded bytes equal). Otherwise :class:`CaptureError`
names the first difference. Either way the captured calls run once, so nothing the host recorded is lost.

Replay only where the state is as it was at the capture: the arena's sides alternate with every step, so after an
odd number of steps recorded since the capture a replay would read the side not written last (the Trainer
records one more step first). Objects whose state the host mirrors (``Trainer.step``, an optimiser's host count
of steps) do not see replays: after ``graph.replay()`` outside a Trainer, count steps yourself, as with
``torch.cuda.graph``.

How (slang-rhi has no capture of its own): submissions during the capture go through a second SlangPy device
on the same CUDA context, onto a stream captured with ``cuStreamBeginCapture``; the kernels, buffers and
pipelines stay those of sopt's device. The second device is kept with the graph (its command buffers hold the
host data that captured copies of module-level parameters read) and is not used for anything else; slang-rhi's
completion events are not recorded during the capture (see _EventRecordsSkipped).
"""

from __future__ import annotations

import atexit
import ctypes
import functools
import pathlib
import threading
import weakref
from typing import Any, Callable

import slangpy as spy

from sopt.compat import UncheckedVersionError
from sopt.compat import slangpy as compat_slangpy
from sopt.runtime import device as dev

__all__ = ["CaptureError", "CudaGraph", "capture", "is_supported"]

_CU_STREAM_NON_BLOCKING = 1
_CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1
_SPARE_COMMAND_BUFFERS = 256   # submissions a capture may make (one per encoder; a training step makes 1-3)
_lock = threading.Lock()   # one capture at a time (sopt.runtime.device holds one capture target, and the event swap)
_live: "weakref.WeakSet[CudaGraph]" = weakref.WeakSet()   # released at exit, before SlangPy closes its devices


class CaptureError(RuntimeError):
    """A call cannot be replayed from a graph: what it records changes from one call to the next (or the CUDA
    driver refused the capture)."""


def is_supported() -> bool:
    """Whether sopt runs on CUDA (graphs need it: on Vulkan, steps are recorded and submitted every time)."""
    return dev.device_kind() == "cuda"


class _Driver:
    """The few CUDA driver calls a graph needs (libcuda through ctypes: sopt's device is a SlangPy device, so
    there is no CUDA runtime or torch to borrow them from)."""

    def __init__(self) -> None:
        self.lib = ctypes.CDLL("libcuda.so.1")
        vp, u, p = ctypes.c_void_p, ctypes.c_uint, ctypes.POINTER(ctypes.c_void_p)
        self._sig = {
            "cuCtxPushCurrent_v2": [vp], "cuCtxPopCurrent_v2": [p], "cuStreamCreate": [p, u],
            "cuStreamDestroy_v2": [vp], "cuStreamBeginCapture_v2": [vp, ctypes.c_int],
            "cuStreamEndCapture": [vp, p], "cuGraphInstantiateWithFlags": [p, vp, ctypes.c_ulonglong],
            "cuGraphLaunch": [vp, vp], "cuGraphExecDestroy": [vp], "cuGraphDestroy": [vp],
        }
        for name, args in self._sig.items():
            fn = getattr(self.lib, name)
            fn.argtypes, fn.restype = args, ctypes.c_int
        self.lib.cuGetErrorString.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]

    def check(self, result: int, what: str) -> None:
        if result != 0:
            text = ctypes.c_char_p()
            self.lib.cuGetErrorString(result, ctypes.byref(text))
            raise CaptureError(f"{what} failed: CUDA error {result} ({(text.value or b'?').decode()})")

    def call(self, name: str, *args: Any) -> None:
        self.check(getattr(self.lib, name)(*args), name)


_driver: _Driver | None = None


def _cuda() -> _Driver:
    global _driver
    if _driver is None:
        _driver = _Driver()
    return _driver


def _context_handle(device: spy.Device) -> int:
    for handle in device.native_handles:
        if handle.type == spy.NativeHandleType.CUcontext:
            return int(handle.value)
    raise CaptureError("sopt's CUDA device reports no CUDA context handle")


class _Current:
    """sopt's CUDA context made current on this thread for the driver calls inside (slang-rhi pushes it only
    around its own calls)."""

    def __init__(self, context: int) -> None:
        self.context = context

    def __enter__(self) -> None:
        _cuda().call("cuCtxPushCurrent_v2", ctypes.c_void_p(self.context))

    def __exit__(self, *exc: Any) -> None:
        popped = ctypes.c_void_p()
        _cuda().call("cuCtxPopCurrent_v2", ctypes.byref(popped))


_EVENT_RECORD = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)
_skip_event_record = _EVENT_RECORD(lambda event, stream: 0)   # CUDA_SUCCESS, nothing recorded


class _EventRecordsSkipped:
    """slang-rhi's cuEventRecord made a no-op while the capture device submits into the capture.

    slang-rhi records an event after each submission to a stream of the caller's (and for the heap pages it
    used) and later polls them to recycle command buffers. An event recorded inside a capture can never be
    polled again (CUDA_ERROR_CAPTURED_EVENT), which would wedge that device's queue and abort the process when
    SlangPy closes it at exit. Left unrecorded, the events read as complete: the capture device may then recycle
    those command buffers, but it records nothing more (a capture makes its own) and it is kept, idle, as long
    as the graph is. The function pointer is a global of SlangPy's library (libsgl), swapped for the capture only,
    under the capture lock.
    """

    def __enter__(self) -> None:
        self.slot = _event_record_slot()
        self.saved = self.slot.value
        self.slot.value = ctypes.cast(_skip_event_record, ctypes.c_void_p).value

    def __exit__(self, *exc: Any) -> None:
        self.slot.value = self.saved


@functools.cache
def _event_record_slot() -> ctypes.c_void_p:
    """slang-rhi's cuEventRecord function pointer (sopt.compat.slangpy; CaptureError where this SlangPy does not
    export it: checked before a capture starts)."""
    try:
        return compat_slangpy.cu_event_record_slot()
    except UncheckedVersionError as e:
        raise CaptureError(str(e)) from e


class CudaGraph:
    """``calls`` calls of a function, captured by :func:`capture`; :meth:`replay` runs them again with one launch.

    Attributes: ``calls`` (calls of the function one replay runs), ``dispatches`` (kernel launches in it),
    ``replays`` (replays so far).
    """

    def __init__(self, calls: int, dispatches: int, exec_handle: int, graph_handle: int, context: int,
                 capture_device: spy.Device, kept: list[Any]) -> None:
        self.calls = calls
        self.dispatches = dispatches
        self.replays = 0
        self._exec, self._graph, self._context = exec_handle, graph_handle, context
        self._capture_device = capture_device   # its command buffers hold what the captured copies read
        self.generation = dev.graph_generation()
        self._kept = kept                        # every buffer and tensor the captured launches use

    def launch(self, inputs: list[tuple[Any, int, Any]] = ()) -> None:   # type: ignore[assignment]
        """Run the captured calls once, on sopt's stream (ordered with everything sopt submits), after writing
        ``inputs``, (buffer, byte offset, array) uploads: what the calls take anew each time (see
        ``sopt.runtime.device.upload``'s graph_input, ``Optimizer.hyper_inputs``)."""
        if self._exec is None:
            raise RuntimeError("this CudaGraph was released")
        if not self.valid:
            raise RuntimeError(f"this CudaGraph was captured before {dev._graph_invalidated_by}, which replaced "
                               "buffers its launches use: capture the step again")
        if inputs:
            encoder = dev.create_command_encoder()
            for buffer, offset, data in inputs:
                encoder.upload_buffer_data(buffer, offset, data)
            dev.submit(encoder)
        with _Current(self._context):
            _cuda().call("cuGraphLaunch", ctypes.c_void_p(self._exec), ctypes.c_void_p(dev.stream_handle()))
        dev._graph_launches += 1
        dev.count_dispatch(self.dispatches)

    @property
    def valid(self) -> bool:
        """False once something replaced buffers the captured launches use (an optimiser's load_state_dict, an
        arena that grew, a sampler split: sopt.runtime.device.invalidate_graphs); launching it then raises."""
        return self.generation == dev.graph_generation()

    def replay(self, times: int = 1, inputs: list[tuple[Any, int, Any]] = ()) -> None:   # type: ignore[assignment]
        """Run the captured calls ``times`` more times (``times * calls`` calls of the function), each after
        writing ``inputs`` (see :meth:`launch`); the host does not wait for the GPU."""
        for _ in range(int(times)):
            self.launch(inputs)
            self.replays += 1

    def release(self) -> None:
        """Free the graph (the driver frees it once a launch in flight ends); :meth:`replay` raises afterwards."""
        if self._exec is None:
            return
        with _Current(self._context):
            _cuda().call("cuGraphExecDestroy", ctypes.c_void_p(self._exec))
            _cuda().call("cuGraphDestroy", ctypes.c_void_p(self._graph))
        self._exec = self._graph = None
        self._kept = []
        self._capture_device = None   # closing it waits for the GPU (slang-rhi synchronises the context)

    def __del__(self) -> None:
        try:
            self.release()
        except Exception:   # interpreter shutdown: the driver may be gone already
            pass

    def __repr__(self) -> str:
        state = "released" if self._exec is None else f"{self.replays} replays"
        return f"CudaGraph(calls={self.calls}, dispatches={self.dispatches}, {state})"


def _first_difference(first: list[tuple[Any, ...]], second: list[tuple[Any, ...]]) -> str | None:
    """Where two periods of recorded commands differ (a sentence), or None when they are the same."""
    for k, (a, b) in enumerate(zip(first, second)):
        if a[0] != b[0] or a[1] is not b[1]:
            return f"command {k} of the period is {_name(a)} the first time and {_name(b)} the second"
        if a[0] == "upload":
            if a[2:] != b[2:]:
                return f"command {k}, an upload into a buffer, writes different bytes in the two periods"
            continue
        if a[2:] != b[2:]:
            return f"command {k} ({_name(a)}) is given {_changes(a[2:], b[2:])}"
    if len(first) != len(second):
        return f"the first period records {len(first)} commands, the second {len(second)}"
    return None


def _name(record: tuple[Any, ...]) -> str:
    kind, what = record[0], record[1]
    if kind == "dispatch":
        try:
            return f"kernel {what.program.layout.entry_points[0].name}"
        except (AttributeError, IndexError):
            return f"kernel {what!r}"
    if kind == "call":
        return f"SlangPy call {getattr(what, 'name', what)!r}"
    return "an upload"


def _changes(a: Any, b: Any, path: str = "") -> str:
    """The first argument that differs between snapshots ``a`` and ``b``, as 'x.y: 3 then 4'."""
    if isinstance(a, tuple) and isinstance(b, tuple) and len(a) == len(b):
        for x, y in zip(a, b):
            if x != y:
                if isinstance(x, tuple) and len(x) == 2 and isinstance(x[0], (str, int)) and isinstance(y, tuple):
                    return _changes(x[1], y[1], f"{path}.{x[0]}" if path else str(x[0]))
                return _changes(x, y, path)
    return f"{path or 'an argument'}: {a!r} the first time, {b!r} the second"


def capture(fn: Callable[[], Any], calls: int = 2, check: bool = True) -> CudaGraph:
    """Capture ``calls`` calls of ``fn`` (which records and submits sopt work) into a CUDA graph.

    ``fn`` runs ``2 * calls`` times, all of them on the GPU: ``calls`` times through the capture device (the
    period the captured one is checked against), then ``calls`` times into the graph, which is launched once
    before this returns. ``check=False`` skips the comparison (for a function whose changing arguments are
    known not to matter). Raises CaptureError (after that launch) when the two periods differ, RuntimeError on
    a device other than CUDA, ValueError for ``calls`` < 1. Nothing ``fn`` does outside sopt's submissions
    (torch work, host reads of GPU values) may happen inside it: a host read fails inside a capture.
    """
    if not isinstance(calls, int) or isinstance(calls, bool) or calls < 1:
        raise ValueError(f"calls must be an int >= 1, got {calls!r}")
    if not is_supported():
        raise RuntimeError(f"CUDA graphs need sopt's CUDA device (SOPT_DEVICE=cuda); this one is "
                           f"{dev.device_kind()}")
    _event_record_slot()   # CaptureError now, before any call, where this SlangPy cannot be captured
    generation = dev.graph_generation()
    device = dev.get_device()
    context = _context_handle(device)
    driver = _cuda()
    with _lock:
        # a second device on the same context: its queue records the events the capture poisons
        target = spy.Device(type=spy.DeviceType.cuda, existing_device_handles=device.native_handles,
                            enable_hot_reload=False, label="sopt-cuda-graph")
        stream = ctypes.c_void_p()
        with _Current(context):
            driver.call("cuStreamCreate", ctypes.byref(stream), _CU_STREAM_NON_BLOCKING)
        first: list[tuple[Any, ...]] = []
        second: list[tuple[Any, ...]] = []
        graph = ctypes.c_void_p()
        exec_handle = ctypes.c_void_p()
        in_period_2 = False
        try:
            # command buffers for the capture, made now: inside it the queue cannot recycle any (that polls the
            # events it records), nor can its heaps allocate (period 1, run for real, sizes them)
            spare = [target.create_command_encoder() for _ in range(_SPARE_COMMAND_BUFFERS)]
            for encoder in spare:
                target.submit_command_buffer(encoder.finish())
            # period 1, run for real through the capture device
            dev._capture_thread, dev._capture_submissions = threading.get_ident(), 0
            dev._capture_target, dev._capture_log = (target, dev.stream_handle()), first
            for _ in range(calls):
                fn()
            target.wait()
            if dev._capture_submissions > _SPARE_COMMAND_BUFFERS:
                raise CaptureError(f"{calls} call(s) of {getattr(fn, '__qualname__', fn)!r} submit "
                                   f"{dev._capture_submissions} command buffers, more than the "
                                   f"{_SPARE_COMMAND_BUFFERS} a capture can hold (they ran: nothing was captured)")
            d1 = dev.dispatch_count()
            # period 2, captured; graph inputs (sopt.runtime.device.upload) kept out of it and written before its launch
            inputs: list[tuple[Any, int, Any]] = []
            dev._capture_target = (target, int(stream.value or 0))
            dev._capture_log, dev._capture_inputs = second, inputs
            with _Current(context):
                driver.call("cuStreamBeginCapture_v2", stream, _CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
            in_period_2 = True
            try:
                with _EventRecordsSkipped():
                    for _ in range(calls):
                        fn()
            finally:
                with _Current(context):
                    ended = driver.lib.cuStreamEndCapture(stream, ctypes.byref(graph))
            driver.check(ended, "cuStreamEndCapture")
            with _Current(context):
                driver.call("cuGraphInstantiateWithFlags", ctypes.byref(exec_handle), graph, 0)
        except BaseException as e:
            if in_period_2:
                # the host recorded calls the GPU never ran: whatever mirrors a GPU counter must rewrite it
                # (BatchSampler re-uploads its step), and graphs made before no longer match
                dev._graph_launches += 1
                dev.invalidate_graphs("a capture that failed")
                with _Current(context):
                    if graph.value:
                        driver.lib.cuGraphDestroy(graph)
                    driver.lib.cuStreamDestroy_v2(stream)
                if isinstance(e, Exception) and not isinstance(e, CaptureError):
                    raise CaptureError(f"capturing {getattr(fn, '__qualname__', fn)!r} failed, so its last {calls} "
                                       f"call(s) recorded on the host never ran on the GPU (restore a checkpoint "
                                       f"to continue from a consistent state): {e}") from e
            raise
        finally:
            dev._capture_target, dev._capture_log, dev._capture_inputs = None, None, None
        dispatches = dev.dispatch_count() - d1
        with _Current(context):
            driver.call("cuStreamDestroy_v2", stream)
        result = CudaGraph(calls, dispatches, exec_handle.value, graph.value, context, target, first + second)
        dev._dispatches -= dispatches   # counted again by the launch below, as every replay is
        result.launch(inputs)           # the captured calls, run once: the host recorded them
        _live.add(result)
    if dev.graph_generation() != generation:
        result.generation = -1   # never launched again: what it captured was replaced while it was captured
        raise CaptureError(f"{getattr(fn, '__qualname__', fn)!r} replaced buffers while it was captured "
                           f"({dev._graph_invalidated_by}); run it once before capturing (both periods ran)")
    if check:
        why = _first_difference(first, second)
        if why is not None:
            raise CaptureError(
                f"{calls} call(s) of {getattr(fn, '__qualname__', fn)!r} do not repeat, so a graph would replay "
                f"stale arguments: {why}. (Both periods ran on the GPU.) Move the changing value onto the GPU, "
                f"capture a whole period (calls=), or pass check=False if it does not matter.")
    return result


@atexit.register
def _release_at_exit() -> None:
    for graph in list(_live):
        try:
            graph.release()
        except Exception:   # the process is ending: nothing to report to
            pass
