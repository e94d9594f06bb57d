"""The SlangPy functions of fit_cloth.slang (the horizon-weighted data term and the stiffness smoothness), loaded
once per device."""

from __future__ import annotations

import pathlib
from typing import Any

import slangpy as spy

from sopt import device as dev

SOURCE = pathlib.Path(__file__).with_name("fit_cloth.slang")
_functions: dict[tuple[int, str], Any] = {}


def function(name: str) -> Any:
    """The function ``name`` of fit_cloth.slang on the current device (compiled at its first launch)."""
    device = dev.get_device()
    key = (id(device), name)
    if key not in _functions:
        _functions[key] = spy.Module.load_from_file(device, str(SOURCE)).require_function(name)
    return _functions[key]
