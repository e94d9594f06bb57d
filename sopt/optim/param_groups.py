"""Parameter groups: what an optimiser's ``params`` argument may be, and the keys schedulers add to the groups."""

from __future__ import annotations

import sys
from typing import Any

from sopt.autodiff.parameter import Parameter, parameters_of

# param-group keys learning-rate schedulers keep in the groups (LRScheduler's initial_lr, OneCycleLR's bounds):
# saved with the groups and accepted by load_state_dict besides the optimiser's own options
SCHEDULE_GROUP_KEYS = frozenset({"initial_lr", "max_lr", "min_lr", "max_momentum", "base_momentum"})


def normalise_groups(params: Any) -> list[dict[str, Any]]:
    """``params`` (Parameters, an object with ``parameters()``, or dicts ``{"params": [...], **options}``) as a
    list of group dicts, each with its ``params`` a list of Parameters; ValueError for an empty list or a dict
    without ``params``. torch parameters (a torch.nn.Module's, or tensors) become sopt Parameters
    (sopt.torch.optimizer_link.adopt)."""
    params = _torch_adopted(params, "params")
    if isinstance(params, Parameter) or hasattr(params, "parameters"):
        return [{"params": parameters_of(params)}]
    items = list(params)
    if not items:
        raise ValueError("optimizer got an empty parameter list")
    if all(isinstance(item, dict) for item in items):
        groups = []
        for i, item in enumerate(items):
            if "params" not in item:
                raise ValueError(f"param group {i} has no 'params' entry")
            groups.append({**item, "params": parameters_of(_torch_adopted(item["params"], f"param group {i} params"))})
        return groups
    return [{"params": parameters_of(items)}]


def _torch_adopted(params: Any, where: str) -> Any:
    """``params`` with torch tensors (or a torch.nn.Module's parameters) as sopt Parameters; anything else as given.
    torch is looked up, never imported: without it loaded there are no torch tensors."""
    torch = sys.modules.get("torch")
    if torch is None:
        return params
    if isinstance(params, torch.nn.Module):
        params = list(params.parameters())
    elif isinstance(params, torch.Tensor):
        params = [params]
    elif isinstance(params, (Parameter, dict)) or hasattr(params, "parameters"):
        return params
    items = list(params)
    if not any(isinstance(item, torch.Tensor) for item in items):
        return items
    from sopt.torch.optimizer_link import adopt
    return adopt(items, where)
