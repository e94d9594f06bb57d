"""sopt: gradient-based optimisation on the GPU with Slang kernels through SlangPy.

The names below load on first use (PEP 562), so ``import sopt`` is cheap and a command such as ``sopt run`` (which
imports only what its problem needs) starts within a second; ``sopt.Parameter``, ``sopt.optim.Adam`` and ``from
sopt.nn import MLP`` work as with eager imports.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_SUBMODULES = ("config", "data", "experiments", "init", "losses", "nn", "optim", "problems", "sim", "train")
_NAMES = {
    "CheckpointError": "sopt.checkpoint", "load": "sopt.checkpoint", "save": "sopt.checkpoint",
    "device_kind": "sopt.device", "get_device": "sopt.device", "synchronize": "sopt.device",
    "gradcheck": "sopt.nn.gradcheck", "Parameter": "sopt.parameter", "load_module": "sopt.slang_module",
    "Tape": "sopt.tape", "TapeError": "sopt.tape",
}

__all__ = sorted([*_NAMES, "init", "losses", "nn", "optim", "sim", "train"])

if TYPE_CHECKING:
    from sopt import init, losses, nn, optim, sim, train
    from sopt.checkpoint import CheckpointError, load, save
    from sopt.device import device_kind, get_device, synchronize
    from sopt.nn.gradcheck import gradcheck
    from sopt.parameter import Parameter
    from sopt.slang_module import load_module
    from sopt.tape import Tape, TapeError


def __getattr__(name: str) -> Any:
    if name in _NAMES:
        value = getattr(importlib.import_module(_NAMES[name]), name)
    elif not name.startswith("__"):
        try:   # any submodule, as an eager `import sopt` made sopt.device, sopt.tape, ... available
            value = importlib.import_module(f"sopt.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"sopt.{name}":
                raise
            raise AttributeError(f"module 'sopt' has no attribute {name!r}") from None
    else:
        raise AttributeError(f"module 'sopt' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_NAMES, *_SUBMODULES})
