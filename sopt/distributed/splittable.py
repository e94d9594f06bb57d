"""Whether a problem's config can be trained on several processes, checked before any process or GPU work.

Data-parallel training splits each step's batch (the config's ``batch_size``, the global batch) evenly over the
processes. A problem can be split when its class says so (``splits_batch = True`` on its
:class:`~sopt.experiments.problem.Problem` class: its batches are drawn by a :class:`sopt.train.BatchSampler`,
which :class:`~sopt.distributed.data_parallel.DataParallel` splits) and its config has a ``batch_size``; a physics
fit (its step is one rollout, no batch) or neural_sdf (its sampler redraws a pool of points) cannot. A batch that
is not a multiple of the number of processes cannot be split evenly (unequal parts would make the mean of the
processes' mean losses differ from the mean over the batch).

The processes ``sopt run --nproc N`` starts on this host must fit it (:func:`process_limit`): one per CUDA GPU
(rank r takes GPU r), or on Vulkan, where they talk through gloo in host memory, one per CPU core.
"""

from __future__ import annotations

import importlib.util
import os
from typing import Any


def check_splittable(problem: Any, config: Any, nproc: int, *, on_this_host: bool = False) -> None:
    """ValueError, one line naming the problem, the key or the value, unless ``config`` of ``problem`` (a Problem
    class) can be trained on ``nproc`` processes (see the module docstring); also when torch, which carries the
    processes' messages, is not installed, and, with ``on_this_host`` (``--nproc``: this process starts them),
    when ``nproc`` exceeds :func:`process_limit`. Asks nothing of the GPU but their number."""
    if nproc <= 1:
        return
    name = problem.name
    batch_size = getattr(config, "batch_size", None)
    if not isinstance(batch_size, int) or isinstance(batch_size, bool):
        raise ValueError(f"problem {name!r} cannot be trained on {nproc} processes: data-parallel training splits "
                         "each step's batch (batch_size) over them, and its step has no batch; run it with --nproc 1")
    if not getattr(problem, "splits_batch", False):
        raise ValueError(f"problem {name!r} cannot be trained on {nproc} processes: data-parallel training splits "
                         "each step's batch over them, and its batches are not drawn by a sopt.train.BatchSampler "
                         "that can be split (its Problem class does not set splits_batch = True); run it with "
                         "--nproc 1")
    try:
        found = importlib.util.find_spec("torch") is not None
    except ValueError:   # sys.modules['torch'] set to None: torch was ruled out in this process
        found = True
    if not found:
        raise ValueError(f"--nproc {nproc} needs PyTorch (torch.distributed carries the gradients): "
                         "pip install 'sopt[distributed]'")
    if on_this_host:
        limit, what = process_limit()
        if nproc > limit:
            raise ValueError(f"--nproc {nproc} is more processes than this machine runs: {what}; allowed 1 to "
                             f"{limit}")
    if batch_size % nproc:
        lower, upper = batch_size - batch_size % nproc, batch_size + nproc - batch_size % nproc
        suggestion = f"{lower} or {upper}" if lower > 0 else f"{upper}"
        raise ValueError(f"batch_size={batch_size} does not split evenly over {nproc} processes: give a multiple of "
                         f"{nproc} (e.g. {suggestion}); batch_size is the global batch, each process draws "
                         f"batch_size / {nproc} of it")


def process_limit() -> tuple[int, str]:
    """The most processes of one data-parallel run this host takes, and what sets it (for a message): with sopt on
    CUDA (torch sees a GPU, SOPT_DEVICE is not vulkan, as :func:`sopt.distributed.data_parallel.start` decides)
    one per visible GPU (``torch.cuda.device_count()``); otherwise one per CPU core (``os.cpu_count()``): the
    processes share the Vulkan device and pass gradients through gloo in host memory. torch is imported; no
    device is created."""
    import torch
    wanted = os.environ.get("SOPT_DEVICE", "").strip().lower()
    if wanted != "vulkan" and torch.cuda.is_available():
        count = torch.cuda.device_count()
        return count, f"one process per CUDA GPU, and {count} {'is' if count == 1 else 'are'} visible"
    cores = os.cpu_count() or 1
    return cores, (f"on Vulkan the processes share the device and pass gradients through host memory (gloo), one "
                   f"per CPU core, and it has {cores}")
