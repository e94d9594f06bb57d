"""sopt: gradient-based optimisation on the GPU with Slang kernels through SlangPy.

The layers (docs/architecture.md): the runtime (:mod:`sopt.runtime`: device, kernels, submission, graph capture),
the autodiff core (:mod:`sopt.autodiff`: parameters, the tape, gradient sources), the library (``optim``, ``nn``,
``sim``, ``losses``, ``data``, ``train``, ``config``), interop (``torch``, ``distributed``) and the experiments
command (:mod:`sopt.experiments`); the problems live beside the package, in ``problems/``.

Names load on first use (PEP 562, :mod:`sopt.utils.lazy_exports`), so ``import sopt`` is cheap and ``sopt run``
(which imports only what its problem needs) starts within a second.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sopt.utils.lazy_exports import lazy_exports

__version__ = "0.1.0"

_SUBPACKAGES = ("autodiff", "compat", "config", "data", "distributed", "experiments", "losses", "nn", "optim",
                "runtime", "sim", "torch", "train", "utils")
_EXPORTS = {
    **{name: f"sopt.{name}" for name in _SUBPACKAGES},
    "init": "sopt.nn",   # sopt.nn.init, the initialisers (torch.nn.init)
    "CheckpointError": "sopt.train.checkpoint", "load": "sopt.train.checkpoint", "save": "sopt.train.checkpoint",
    "device_kind": "sopt.runtime.device", "get_device": "sopt.runtime.device", "synchronize": "sopt.runtime.device",
    "load_module": "sopt.autodiff.slang_module",
    "Parameter": "sopt.autodiff.parameter", "Tape": "sopt.autodiff.tape", "TapeError": "sopt.autodiff.tape",
    "gradcheck": "sopt.nn.gradcheck",
}

__all__ = sorted(n for n in _EXPORTS if n not in _SUBPACKAGES or n in ("losses", "nn", "optim", "sim", "train"))
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

if TYPE_CHECKING:
    from sopt import losses, nn, optim, sim, train
    from sopt.autodiff.parameter import Parameter
    from sopt.autodiff.tape import Tape, TapeError
    from sopt.nn import init
    from sopt.nn.gradcheck import gradcheck
    from sopt.runtime.device import device_kind, get_device, synchronize
    from sopt.autodiff.slang_module import load_module
    from sopt.train.checkpoint import CheckpointError, load, save
