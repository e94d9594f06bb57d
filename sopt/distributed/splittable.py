"""Whether a problem's config can be trained on several processes, checked before any process or GPU work.

Data-parallel training splits each step's batch (the config's ``batch_size``, the global batch) evenly over the
processes. A problem without a batch (a physics fit whose step is one rollout, with no ``batch_size``) cannot be
split; a batch that is not a multiple of the number of processes cannot be split evenly (unequal parts would make
the mean of the processes' mean losses differ from the mean over the batch).
"""

from __future__ import annotations

import importlib.util
from typing import Any


def check_splittable(problem: str, config: Any, nproc: int) -> None:
    """ValueError, one line naming the problem or the key, unless ``config`` of ``problem`` can be trained on
    ``nproc`` processes (see the module docstring); also when torch, which carries the processes' messages, is
    not installed."""
    if nproc <= 1:
        return
    batch_size = getattr(config, "batch_size", None)
    if not isinstance(batch_size, int) or isinstance(batch_size, bool):
        raise ValueError(f"problem {problem!r} cannot be trained on {nproc} processes: data-parallel training splits "
                         "each step's batch (batch_size) over them, and its step has no batch; run it with --nproc 1")
    if batch_size % nproc:
        lower, upper = batch_size - batch_size % nproc, batch_size + nproc - batch_size % nproc
        suggestion = f"{lower} or {upper}" if lower > 0 else f"{upper}"
        raise ValueError(f"batch_size={batch_size} does not split evenly over {nproc} processes: give a multiple of "
                         f"{nproc} (e.g. {suggestion}); batch_size is the global batch, each process draws "
                         f"batch_size / {nproc} of it")
    try:
        found = importlib.util.find_spec("torch") is not None
    except ValueError:   # sys.modules['torch'] set to None: torch was ruled out in this process
        found = True
    if not found:
        raise ValueError(f"--nproc {nproc} needs PyTorch (torch.distributed carries the gradients): "
                         "pip install 'sopt[distributed]'")
