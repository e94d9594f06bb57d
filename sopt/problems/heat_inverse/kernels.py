"""The SlangPy functions of heat_inverse.slang (the sensor readings and the field regularisers), loaded once per
device."""

from __future__ import annotations

import pathlib
from typing import Any

import slangpy as spy

from sopt import device as dev

SOURCE = pathlib.Path(__file__).with_name("heat_inverse.slang")
_functions: dict[tuple[int, str], Any] = {}


def function(name: str) -> Any:
    """The function ``name`` of heat_inverse.slang on the current device (compiled at its first launch)."""
    device = dev.get_device()
    key = (id(device), name)
    if key not in _functions:
        module = spy.Module.load_from_file(device, str(SOURCE))
        _functions[key] = module.require_function(name)
    return _functions[key]
