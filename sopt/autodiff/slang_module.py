"""load_module: a user's own ``.slang`` file, whose functions run on the GPU and record on a ``sopt.Tape``.

::

    mod = sopt.load_module("pendulum.slang")         # sopt's Slang library is importable: `import nn.activation;`
    damping = sopt.Parameter([0.3], name="damping")
    with tape:
        s = mod.pendulum_step(s, damping, 9.81, 0.01)   # a [Differentiable] function, vectorised over s's rows
    tape.backward(...)                                  # .bwds of every call, in reverse: damping.grad += ...

Arguments are what SlangPy takes (tensors, numbers, vectors) plus :class:`sopt.Parameter` (passed as its
values with its gradient attached) and float32-convertible numpy arrays (uploaded). The result is a new float32
array (with a gradient buffer) of shape ``call shape + element shape`` (a ``float2`` result of a call over N
rows is (N, 2)), from the tape's pool on a tape: the function must return ``float``, ``floatN`` or
``floatRxC`` and write nothing else (its backward is SlangPy's ``.bwds``, which re-runs the primal). Outside a
tape the call runs at once (``_result=`` may then name the output).

Slang's autodiff caveat (SlangPy 0.43): loops in a ``[Differentiable]`` function need ``[ForceUnroll]`` or
``[MaxIters(n)]``, and a tensor load inside a loop with a run-time bound hangs ``.bwds``; use compile-time
sizes (``<let N : int>``) or write the adjoint by hand with :func:`sopt.autodiff.tape.record`.
"""

from __future__ import annotations

import pathlib
import sys
from typing import Any

import numpy as np
import slangpy as spy
from slangpy.core.calldata import CallData

from sopt.compat import slangpy as compat_slangpy
from sopt.runtime import device as dev
from sopt.runtime.kernel import Function, Source, launch
from sopt.autodiff.parameter import Parameter
from sopt.autodiff.tape import TapeError, current_tape, new_tensor
from sopt.utils.validation import as_float32_array, check_path


def _has_torch_tensor(args: tuple, kwargs: dict[str, Any]) -> bool:
    torch = sys.modules["torch"]
    return any(isinstance(v, torch.Tensor) for v in list(args) + list(kwargs.values()))


class _Binding(CallData):
    """SlangPy's binding of a call's arguments (types, call dimensionality, the result's type) without its kernel:
    the first half of ``CallData.build``, a small part of the whole build, which also generates and compiles a
    kernel. The kernel is built once, by the launch, for the signature with ``_result``."""

    def _try_build_shader(self, *args: Any, **kwargs: Any) -> None:
        pass


class SlangFunction:
    """One function of a :class:`SlangModule` (``mod.name``); call it like the Slang function."""

    def __init__(self, module: "SlangModule", name: str, function: Function) -> None:
        self.module, self.name, self._function = module, name, function
        self._backward = function.backward
        self._bindings: dict[tuple[int, str], _Binding] = {}   # (id(node), SlangPy's argument signature) -> binding

    def _convert(self, value: Any, where: str, params: list[Parameter]) -> Any:
        if isinstance(value, Parameter):
            params.append(value)
            return value.tensor
        if isinstance(value, np.ndarray):
            return spy.Tensor.from_numpy(dev.get_device(), np.ascontiguousarray(as_float32_array(value, where)))
        return value

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if sys.modules.get("torch") is not None and _has_torch_tensor(args, kwargs):   # None: import blocked
            from sopt.torch.slang_function import call   # torch tensors in, a torch tensor out, under autograd
            return call(self, args, kwargs)
        label = f"{self.module.name}.{self.name}"
        params: list[Parameter] = []
        args = tuple(self._convert(a, f"{label} argument {i}", params) for i, a in enumerate(args))
        kwargs = {k: self._convert(v, f"{label} argument {k!r}", params) for k, v in kwargs.items()}
        tape = current_tape()
        if tape is None:
            if "_result" in kwargs:
                launch(self._function, None, *args, **kwargs)
                return kwargs["_result"]
            out = new_tensor(self._result_shape(label, args, kwargs))
            launch(self._function, None, *args, _result=out, **kwargs)
            return out
        if "_result" in kwargs:
            raise TapeError(f"{label}: on a tape the result is allocated by the tape (don't pass _result); every call "
                            "writes a new array so that no saved value is overwritten")
        out = new_tensor(self._result_shape(label, args, kwargs))
        tensors = [v for v in list(args) + list(kwargs.values()) if isinstance(v, spy.Tensor)]
        param_tensors = {id(p.tensor) for p in params}
        inputs = [t for t in tensors if id(t) not in param_tensors]

        def forward(enc: spy.CommandEncoder) -> None:
            launch(self._function, enc, *args, _result=out, **kwargs)

        def backward(enc: spy.CommandEncoder, redirect: dict[int, spy.Tensor]) -> None:
            # .bwds wants a gradient buffer for every differentiable tensor argument: one that has none (an
            # uploaded constant) gets a pooled scratch nobody reads; one that needs no gradient keeps its own,
            # which nothing reads either (its producer's backward is skipped)
            def diff(v: Any) -> Any:
                if isinstance(v, spy.Tensor) and v.grad_out is None:
                    scratch = tape._pool.take(tuple(v.shape), False)
                    return v.with_grads(grad_in=scratch, grad_out=scratch, zero=False)
                return v
            launch(self._backward, enc, *[diff(a) for a in args], _result=out, **{k: diff(v) for k, v in kwargs.items()})

        tape.record(label, forward, backward, reads=tensors, writes=[out],
                    add_grads=[t for t in inputs if t.grad_out is not None], params=params)
        return out

    def _result_shape(self, label: str, args: tuple, kwargs: dict[str, Any]) -> tuple[int, ...]:
        """Call shape (SlangPy's broadcast of the arguments) + the return type's element shape."""
        # Bound once per argument signature (dtypes, dimensions, Python types: SlangPy's call-data cache key, less
        # the function's), never built: a call-data build without _result would compile a kernel of its own
        # beside the launch's (with _result), twice the first call's cost
        try:
            node = self._function.load()
            key = (id(node), compat_slangpy.args_signature(node, *args, **kwargs))   # a node per device
            call = self._bindings.get(key)
            if call is None:
                call = self._bindings[key] = _Binding(node, *args, **kwargs)
            shape = call.runtime.calculate_call_shape(call.call_dimensionality, args, kwargs, call)
            result = compat_slangpy.result_vector_type(call)
        except Exception as exc:
            raise TapeError(f"{label}: SlangPy cannot bind these arguments: {str(exc).strip().splitlines()[0]}") from None
        name = str(result.full_name)
        element: tuple[int, ...]
        if name == "float":
            element = ()
        elif name.startswith(("vector<float,", "matrix<float,")):
            element = tuple(int(s) for s in result.shape)
        else:
            raise TapeError(f"{label}: returns '{name}'; a function called on a tape must return float, floatN or "
                            "floatRxC (its result becomes a float32 array)")
        return tuple(int(s) for s in shape) + element

    def __repr__(self) -> str:
        return f"SlangFunction({self.module.name}.{self.name})"


class SlangModule:
    """A loaded ``.slang`` file: ``module.<function>`` is a :class:`SlangFunction`."""

    def __init__(self, path: pathlib.Path) -> None:
        self.path = path
        self.name = path.stem
        self._source = Source(path)
        with dev.compiling(f"{path.name} (user module)"):
            self._module = self._source.module()
        self._functions: dict[str, SlangFunction] = {}

    def __getattr__(self, name: str) -> SlangFunction:
        if name.startswith("_"):
            raise AttributeError(name)
        f = self._functions.get(name)
        if f is None:
            if self._module.find_function(name) is None:
                raise AttributeError(f"{self.path.name} has no function {name!r}")
            f = self._functions[name] = SlangFunction(self, name, Function(self._source, name))
        return f

    def __repr__(self) -> str:
        return f"SlangModule({str(self.path)!r})"


def load_module(path: str | pathlib.Path) -> SlangModule:
    """Load the Slang file at ``path`` (compiled on the first call of each function; sopt's ``slang_lib`` is on
    the include path, so ``import nn.activation;`` works). Raises ValueError when the file does not exist."""
    p = pathlib.Path(check_path(path, "load_module path")).expanduser().resolve()
    if not p.is_file():
        raise ValueError(f"load_module: no Slang file at {str(path)!r}")
    if p.suffix != ".slang":
        raise ValueError(f"load_module: expected a .slang file, got {str(path)!r}")
    return SlangModule(p)
