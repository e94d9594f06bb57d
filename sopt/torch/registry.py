"""Which torch parameters stand for sopt Parameters: a TorchModule's (windows of its module's Parameters).

A sopt optimiser given such a torch parameter updates the sopt Parameter itself (sopt.torch.optimizer_link), so
that the wrapped module, its torch parameters and the optimiser's arena stay one set of values.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

from torch.utils.weak import WeakIdKeyDictionary

if TYPE_CHECKING:
    from sopt.torch.module import TorchModule
    from sopt.torch.parameter_views import ParameterView

# torch parameter -> (its TorchModule, the window of the sopt Parameter it is)
# (by identity: a tensor's == is elementwise)
_module_parameters: "WeakIdKeyDictionary" = WeakIdKeyDictionary()


def register_module_parameters(module: "TorchModule") -> None:
    for t, view in module.parameter_pairs():
        _module_parameters[t] = (weakref.ref(module), view)


def module_parameter(t: Any) -> "tuple[TorchModule, ParameterView] | None":
    """(the TorchModule, the window) when ``t`` is a live TorchModule's parameter, else None."""
    entry = _module_parameters.get(t)
    if entry is None:
        return None
    module = entry[0]()
    return None if module is None else (module, entry[1])
