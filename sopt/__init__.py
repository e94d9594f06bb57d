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

__getattr__, __dir__ = lazy_exports(__name__)   # the names of the TYPE_CHECKING block; any subpackage too

if TYPE_CHECKING:
    from sopt import losses, nn, optim, sim, train
    from sopt.autodiff.parameter import Parameter
    from sopt.autodiff.slang_module import load_module
    from sopt.autodiff.tape import Tape, TapeError
    from sopt.nn import init
    from sopt.nn.gradcheck import gradcheck
    from sopt.runtime.device import device_kind, get_device, synchronize
    from sopt.train.checkpoint import CheckpointError, load, save
