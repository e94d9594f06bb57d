"""Specialised SlangPy functions of ``slang_lib/nn`` and how sopt.nn launches them.

Feature counts are compile-time generic arguments (``linear_forward<2,64,ReLU>``), so each distinct
specialisation is compiled once per process (and cached on disk by the device's shader cache).
"""

from __future__ import annotations

import pathlib
from typing import Any

import slangpy as spy
from slangpy.core.function import FunctionNode, FunctionNodeBwds

from sopt import device as dev

_functions: dict[tuple[str, str, bool], FunctionNode] = {}
_launched: set[int] = set()   # ids of nodes launched before (nodes are long-lived: cached here or by modules)


def function(module: str, specialisation: str) -> FunctionNode:
    """The SlangPy function ``specialisation`` (e.g. ``"linear_forward<2,64,ReLU>"``) of ``slang_lib/<module>.slang``."""
    key = (module, specialisation, False)
    func = _functions.get(key)
    if func is None:
        func = dev.load_module(module).require_function(specialisation)
        _functions[key] = func
    return func


def backward_function(module: str, specialisation: str) -> FunctionNode:
    """``function(module, specialisation).bwds``, one node per process (SlangPy makes a new one per ``.bwds``)."""
    key = (module, specialisation, True)
    func = _functions.get(key)
    if func is None:
        func = _functions[key] = function(module, specialisation).bwds
    return func


def launch(func: FunctionNode, encoder: spy.CommandEncoder | None, *args: Any, **kwargs: Any) -> None:
    """Run ``func`` now, or record it into ``encoder`` when given; counted in ``sopt.device.dispatch_count()``."""
    dev.count_dispatch()
    if id(func) in _launched:
        _run(func, encoder, args, kwargs)
        return
    # SlangPy compiles a function at its first call
    source = pathlib.Path(func.module.name)
    if source.is_relative_to(dev.slang_lib_path()):
        source = source.relative_to(dev.slang_lib_path())
    label = f"{source.as_posix()}:{func.name}"
    with dev.compiling(label + (" (backward)" if isinstance(func, FunctionNodeBwds) else "")):
        _run(func, encoder, args, kwargs)
    _launched.add(id(func))


def _run(func: FunctionNode, encoder: spy.CommandEncoder | None, args: tuple, kwargs: dict[str, Any]) -> None:
    if encoder is None:
        func(*args, **kwargs)
    else:
        func.append_to(encoder, *args, **kwargs)

