"""sopt's autodiff core: parameters and their gradients, the tape that records differentiable calls and runs
their backward, Slang modules called through it (``sopt.load_module``), and the gradient sources (half-precision and fixed-point sums) a parameter can hold.

Each module loads on first use (``sopt.autodiff.parameter``); import the module you need."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sopt.utils.lazy_exports import lazy_exports

__getattr__, __dir__ = lazy_exports(__name__)

if TYPE_CHECKING:
    from sopt.autodiff import grad_max, grad_source, parameter, slang_module, tape
