"""sopt inside torch programs, and torch parameters under sopt optimisers (needs ``pip install 'sopt[torch]'``).

- :class:`TorchModule`: any sopt.nn module as a ``torch.nn.Module`` (torch autograd, optimisers, state_dict);
- :func:`rollout`: a simulator rollout, within its memory budget, as a torch autograd function;
- a user's Slang function (``sopt.load_module``) called with torch tensors runs under torch autograd;
- ``sopt.optim.Adam(torch_model.parameters(), ...)``: sopt's one-dispatch step over torch parameters.

On CUDA, import torch (or this module) before sopt's first GPU work: sopt's device then shares torch's context
and its current stream, and tensors pass without copies. On Vulkan (CPU torch) every tensor is copied through
the host, with a warning once. See :mod:`sopt.torch.placement`.
"""

from sopt.torch.module import TorchModule
from sopt.torch.rollout import RolloutOutput, rollout

__all__ = ["RolloutOutput", "TorchModule", "rollout"]
