"""Specialised SlangPy functions of ``slang_lib/nn`` and how sopt.nn launches them.

Feature counts are compile-time generic arguments (``linear_forward<2,64,ReLU>``), so each distinct
specialisation is compiled once per process (and cached on disk by the device's shader cache).
"""

from __future__ import annotations

from typing import Any

import slangpy as spy
from slangpy.core.function import FunctionNode

from sopt import device as dev

_functions: dict[tuple[str, str], FunctionNode] = {}


def function(module: str, specialisation: str) -> FunctionNode:
    """The SlangPy function ``specialisation`` (e.g. ``"linear_forward<2,64,ReLU>"``) of ``slang_lib/<module>.slang``."""
    key = (module, specialisation)
    func = _functions.get(key)
    if func is None:
        func = dev.load_module(module).require_function(specialisation)
        _functions[key] = func
    return func


def launch(func: FunctionNode, encoder: spy.CommandEncoder | None, *args: Any, **kwargs: Any) -> None:
    """Run ``func`` now, or record it into ``encoder`` when given; counted in ``sopt.device.dispatch_count()``."""
    dev.count_dispatch()
    if encoder is None:
        func(*args, **kwargs)
    else:
        func.append_to(encoder, *args, **kwargs)

