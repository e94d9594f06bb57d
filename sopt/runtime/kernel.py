"""Kernels: every Slang kernel sopt launches is declared once, as an object, and found through it.

A kernel is declared by its Slang source, its name and its generic arguments; nothing touches the device until
it is first launched (or :meth:`Function.load` / :meth:`Kernel.load` is called), then it is loaded once per
device and process and cached (and its compiled code by the device's disk cache)::

    LINEAR_FORWARD = Function("nn/linear", "linear_forward")        # slang_lib/nn/linear.slang, declared
    forward = LINEAR_FORWARD.specialise("2,64", "ReLU")              # linear_forward<2,64,ReLU>, still declared
    launch(forward, encoder, n=spy.grid((n,)), x=x, w=weights, y=y)  # by Slang parameter name; loaded and compiled
                                                                     # at this first launch

    ADAM_STEP = Kernel("optim/adam", "adam_step")                     # a [shader("compute")] entry point
    ADAM_STEP.bind(ctl=ctl, hyper=hyper).set(arena=buffer).dispatch(threads, encoder)   # arguments by name

Two kinds, as SlangPy has them:

* :class:`Function`: a Slang function called through SlangPy's functional API (vectorised over the call shape;
  arguments are tensors, numbers, ``spy.grid``, structs as dicts), launched now or recorded into a command encoder
  by :func:`launch` with its arguments named after the Slang parameters (sopt's own kernels refuse positional
  ones; a user's file keeps SlangPy's positional calls); ``.backward`` is its SlangPy ``.bwds``.
* :class:`Kernel`: a ``[shader("compute")]`` entry point, generic ones specialised by Slang's specialisation
  arguments (values and types: ``Kernel("nn/fully_fused_mlp", "ffmlp_forward_kernel").specialise(2, 0, ...)``),
  bound to its arguments by name (:meth:`Kernel.bind`, a :class:`sopt.runtime.device.BoundKernel`: entry-point
  ``uniform`` parameters first, then module-level shader parameters) and dispatched with an explicit thread count.

A source (:class:`Source`) is a module of sopt's Slang library named from ``slang_lib`` (``"nn/linear"``), or a
``.slang`` file given by its path (a problem's own kernels, a user's file through :func:`sopt.load_module`).
Every launch counts in :func:`sopt.runtime.device.dispatch_count`; a kernel's first use is timed and reported by
:func:`sopt.runtime.device.compiling`, the driver's compile at its pipeline's first run included.
"""

from __future__ import annotations

import functools
import pathlib
import threading
from typing import Any, Callable, Iterable

import numpy as np
import slangpy as spy
from slangpy.core.function import FunctionNode
from slangpy.slangpy import Shape

from sopt.compat import slangpy as compat_slangpy
from sopt.runtime import device as dev

__all__ = ["Function", "Kernel", "Source", "dummy", "dummy_buffer", "grid_1d", "launch"]

# loaded objects, by (id of the device, what) -- one device per process today, but a kernel belongs to a device
_modules: dict[tuple[int, str], spy.Module] = {}             # SlangPy modules (functions)
_slang_modules: dict[tuple[int, str], spy.SlangModule] = {}  # compiler modules (compute entry points)
_nodes: dict[tuple[int, str, str, bool], FunctionNode] = {}
_programs: dict[tuple[int, str, str], spy.ComputeKernel] = {}
_launched: set[tuple[int, str, str, bool]] = set()            # functions launched before (SlangPy compiles at the first)
_lock = threading.RLock()   # the Slang session is used by one thread at a time


class Source:
    """A Slang file: ``name`` under sopt's ``slang_lib`` (``"optim/adam"``, no suffix), or a path to a ``.slang`` file.

    Loaded at most once per device, as a SlangPy module (:meth:`module`, for :class:`Function`) and as a compiler
    module (:meth:`slang_module`, for :class:`Kernel`); sopt's ``slang_lib`` is on the include path of both.
    """

    __slots__ = ("key", "path", "label")

    def __init__(self, source: "str | pathlib.Path | Source") -> None:
        if isinstance(source, Source):
            self.key, self.path, self.label = source.key, source.path, source.label
            return
        if isinstance(source, pathlib.Path):
            self.path: pathlib.Path | None = source.resolve()
            self.key = str(self.path)
            self.label = self.path.name
        else:
            self.path = None   # found in slang_lib when first loaded (an installed package or a source tree)
            self.key = str(source)
            self.label = f"{source}.slang"

    def file(self) -> pathlib.Path:
        """The ``.slang`` file."""
        return self.path if self.path is not None else dev.slang_lib_path() / f"{self.key}.slang"

    def module(self) -> spy.Module:
        """The SlangPy module of this file on the current device (parsed and checked on the first call)."""
        return self._loaded(_modules, lambda device, file: spy.Module.load_from_file(device, file))

    def slang_module(self) -> spy.SlangModule:
        """The compiler module of this file on the current device (its compute entry points are linked from it)."""
        return self._loaded(_slang_modules, lambda device, file: device.load_module(file))

    def _loaded(self, cache: dict, load: Callable[[spy.Device, str], Any]) -> Any:
        """``load(device, file)`` once per device, kept in ``cache`` (double-checked under the session lock:
        the prefetch thread and a launch may ask at once)."""
        device = dev.get_device()
        key = (id(device), self.key)
        loaded = cache.get(key)
        if loaded is None:
            with _lock:
                loaded = cache.get(key)
                if loaded is None:
                    loaded = cache[key] = load(device, str(self.file()))
        return loaded

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Source) and other.key == self.key

    def __hash__(self) -> int:
        return hash(self.key)

    def __repr__(self) -> str:
        return f"Source({self.key!r})"


def _generic_text(args: Iterable[Any]) -> str:
    return ",".join(str(a) for a in args)


class Function:
    """A SlangPy function of a Slang source, declared: ``Function("nn/linear", "linear_forward", "2,64", "ReLU")``
    is ``linear_forward<2,64,ReLU>`` of ``slang_lib/nn/linear.slang`` (generic arguments as Slang writes them;
    a string may hold several). Nothing is loaded until :meth:`load` or :func:`launch`.

    ``group_shape``: SlangPy's ``call_group_shape`` (threads of a call grouped, for group-shared memory).
    """

    __slots__ = ("source", "name", "generic", "specialisation", "group_shape", "is_backward", "_device", "_node",
                 "_launched")

    def __init__(self, source: "str | pathlib.Path | Source", name: str, *generic: Any,
                 group_shape: tuple[int, ...] | None = None, _backward: bool = False) -> None:
        self.source = Source(source)
        self.name = name
        self.generic = tuple(generic)
        self.specialisation = f"{name}<{_generic_text(generic)}>" if generic else name
        self.group_shape = None if group_shape is None else tuple(int(g) for g in group_shape)
        self.is_backward = _backward
        # the loaded node and whether it was launched, kept here too: a launch costs a few attribute reads
        self._device: spy.Device | None = None
        self._node: FunctionNode | None = None
        self._launched = False

    def specialise(self, *generic: Any) -> "Function":
        """This function with generic arguments ``generic`` (appended to any it has)."""
        return Function(self.source, self.name, *self.generic, *generic, group_shape=self.group_shape,
                        _backward=self.is_backward)

    @property
    def backward(self) -> "Function":
        """The function's backward (SlangPy's ``.bwds``: the adjoint of every differentiable argument)."""
        return Function(self.source, self.name, *self.generic, group_shape=self.group_shape, _backward=True)

    @property
    def label(self) -> str:
        """How compile notices name it: ``nn/linear.slang:linear_forward<2,64,ReLU>`` (`` (backward)``)."""
        return f"{self.source.label}:{self.specialisation}" + (" (backward)" if self.is_backward else "")

    def _key(self, device: spy.Device) -> tuple[int, str, str, bool]:
        group = "" if self.group_shape is None else f"@{self.group_shape}"
        return (id(device), self.source.key, self.specialisation + group, self.is_backward)

    def load(self) -> FunctionNode:
        """The SlangPy function node on the current device (one per process and declaration; compiled by
        SlangPy at its first call)."""
        key = self._key(dev.get_device())
        node = _nodes.get(key)
        if node is None:
            with _lock:
                node = _nodes.get(key)
                if node is None:
                    node = self.source.module().require_function(self.specialisation)
                    if self.group_shape is not None:
                        node = node.call_group_shape(Shape(self.group_shape))
                    if self.is_backward:
                        node = node.bwds
                    _nodes[key] = node
        return node

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Function) and other._key(None) == self._key(None)   # type: ignore[arg-type]

    def __hash__(self) -> int:
        return hash(self._key(None))   # type: ignore[arg-type]

    def __repr__(self) -> str:
        return f"Function({self.label!r})"


def launch(function: Function, encoder: spy.CommandEncoder | None, *args: Any, **kwargs: Any) -> None:
    """Run ``function`` now, or record it into ``encoder`` when given, with its arguments named after the Slang
    parameters (``launch(TAPE_FILL, enc, i=spy.grid((n,)), value=0.0, dst=t)`` for ``tape_fill(int i, float value,
    RWTensor<float, 1> dst)``; a ``spy.grid`` goes by its parameter's name too, a struct as a dict of its fields);
    counted in :func:`sopt.runtime.device.dispatch_count`. Its first launch in a process loads and compiles it, announced
    by :func:`sopt.runtime.device.compiling`.

    Positional arguments are refused (TypeError naming the function) for sopt's own kernels: those of
    ``slang_lib`` and of ``.slang`` files inside the sopt package (a problem's kernels), whose call sites must
    not depend on parameter order. A kernel of any other file (a user's :func:`sopt.load_module` function, an
    example's own :class:`Function`) takes SlangPy's arguments as SlangPy does, positional or named."""
    if args:   # the only per-launch cost of the rule: named launches never get here
        _check_positional(function, len(args))
    dev.count_dispatch()
    device = dev.get_device()
    if function._device is device and function._launched:
        _run(function._node, encoder, args, kwargs)   # type: ignore[arg-type]
        return
    with _lock:   # SlangPy compiles a function at its first call, in the Slang session
        key = function._key(device)
        if key not in _launched:
            with dev.compiling(function.label) as first:
                node = function.load()   # its module parsed and checked, the first of that module's functions
                if dev.device_kind() == "vulkan" and not dev.capturing():
                    # built (and cached by SlangPy for the launch) first, so the driver compiles before it runs
                    first.run(compat_slangpy.build_call_data(node, *args, **kwargs).pipeline)
                _run(node, encoder, args, kwargs)
            _launched.add(key)
        else:
            node = function.load()
            _run(node, encoder, args, kwargs)
    function._device, function._node, function._launched = device, node, True


_SOPT_PACKAGE = pathlib.Path(__file__).resolve().parents[1]   # sopt/
_positional_allowed: dict[str, bool] = {}   # Source.key -> whether its functions may take positional arguments


def _check_positional(function: Function, count: int) -> None:
    """Raise TypeError when ``function`` is one of sopt's own kernels (``slang_lib``, or a file inside the sopt
    package); other files (a user's module) may take positional arguments. The verdict is kept per source."""
    source = function.source
    allowed = _positional_allowed.get(source.key)
    if allowed is None:
        allowed = _positional_allowed[source.key] = (source.path is not None
                                                     and not source.path.is_relative_to(_SOPT_PACKAGE)
                                                     and not source.path.is_relative_to(dev.slang_lib_path()))
    if not allowed:
        raise TypeError(f"launch {function.label}: sopt's kernels take their arguments by the Slang parameter's "
                        f"name (launch(f, encoder, i=spy.grid(...), x=...)), got {count} positional")


def _run(node: FunctionNode, encoder: spy.CommandEncoder | None, args: tuple, kwargs: dict[str, Any]) -> None:
    own = False
    if dev._capture_log is not None and dev.capturing():   # sopt.runtime.cuda_graph compares what calls record
        dev._capture_log.append(("call", node, dev._snapshot({**dict(enumerate(args)), **kwargs})))
        if encoder is None:   # recorded through the capture device, as every submission is
            encoder, own = dev.create_command_encoder(), True
    if encoder is None:
        node(*args, **kwargs)
    else:
        node.append_to(encoder, *args, **kwargs)
    if own:
        dev.submit(encoder)


class Kernel:
    """A ``[shader("compute")]`` entry point of a Slang source, declared: ``Kernel("optim/sgd", "sgd_step")``;
    a generic entry point with its specialisation arguments, values (ints, bools) or type names
    (``Kernel(src, "ffmlp_forward_kernel", 2, 12, 48, 64, 1, 4, 3, "HiddenAct<ReLU>", ...)``). Loaded and linked
    at :meth:`load` (once per device and process), bound by name at :meth:`bind`.

    ``label``: what compile notices call it (default ``<source>:<entry>``).
    """

    __slots__ = ("source", "entry", "generic", "label", "_identity")

    def __init__(self, source: "str | pathlib.Path | Source", entry: str, *generic: Any, label: str | None = None) -> None:
        self.source = Source(source)
        self.entry = entry
        self.generic = tuple(generic)
        spec = f"<{_generic_text(generic)}>" if generic else ""
        self.label = label if label is not None else f"{self.source.label}:{entry}{spec}"
        # what identifies it, made once: layers look their bound kernels up by Kernel every dispatch (joining the
        # generic text at each lookup would add to every step's host time)
        self._identity = (self.source.key, self.entry, _generic_text(self.generic))

    def specialise(self, *generic: Any, label: str | None = None) -> "Kernel":
        """This entry point with generic arguments ``generic`` (appended to any it has)."""
        return Kernel(self.source, self.entry, *self.generic, *generic, label=label)

    def _key(self) -> tuple[str, str, str]:
        return self._identity

    def load(self) -> spy.ComputeKernel:
        """The compute kernel on the current device, compiled and linked on the first call."""
        device = dev.get_device()
        key = (id(device), *self._key())
        kernel = _programs.get(key)
        if kernel is None:
            with _lock:
                kernel = _programs.get(key)
                if kernel is None:
                    with dev.compiling(self.label) as first:
                        kernel = device.create_compute_kernel(self._link(device))
                        first.run(kernel.pipeline)   # SlangPy creates the pipeline here, else at the first dispatch
                        _programs[key] = kernel
        return kernel

    def _link(self, device: spy.Device) -> spy.ShaderProgram:
        if not self.generic:
            return device.load_program(str(self.source.file()), [self.entry])
        module = self.source.slang_module()
        args = [spy.SpecializationArg.from_expr(str(int(a))) if isinstance(a, (bool, int))
                else spy.SpecializationArg.from_type(str(a)) for a in self.generic]
        return device.link_program([module], [module.entry_point(self.entry).specialize(args)])

    def bind(self, **arguments: Any) -> dev.BoundKernel:
        """The kernel with ``arguments`` written by name (buffers, numbers, structs as dicts); more with ``.set``."""
        return dev.BoundKernel(self.load(), **arguments)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Kernel) and other._key() == self._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return f"Kernel({self.label!r})"


@functools.lru_cache(maxsize=256)
def grid_1d(n: int) -> Any:
    """``spy.grid((n,))``, the call shape of a 1-D launch, made once per ``n`` (building one costs host time, and a
    training step launches a few; SlangPy only reads it)."""
    return spy.grid((n,))


_dummies: dict[int, spy.Tensor] = {}


def dummy(dims: int) -> spy.Tensor:
    """A one-element float tensor of ``dims`` dimensions for a tensor argument the kernel is told not to
    touch (Vulkan cannot bind a null buffer)."""
    t = _dummies.get(dims)
    if t is None:
        t = spy.Tensor.from_numpy(dev.get_device(), np.zeros((1,) * dims, np.float32))
        _dummies[dims] = t
    return t


_dummy_buffer: spy.Buffer | None = None


def dummy_buffer() -> spy.Buffer:
    """A 16-byte buffer for a ``RWByteAddressBuffer`` argument the kernel is told not to touch."""
    global _dummy_buffer
    if _dummy_buffer is None:
        _dummy_buffer = dev.get_device().create_buffer(
            size=16, usage=spy.BufferUsage.shader_resource | spy.BufferUsage.unordered_access,
            data=np.zeros(16, np.uint8))
    return _dummy_buffer

