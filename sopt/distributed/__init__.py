"""Data-parallel training over several GPUs (or processes) through ``torch.distributed``.

``sopt run CONFIG --nproc N`` (or ``torchrun --nproc-per-node N -m sopt run CONFIG``) runs N processes, one per
GPU; each holds the whole model and takes 1/N of every batch, and after the backward one all-reduce averages the
flat gradient buffer (NCCL on CUDA, gloo on Vulkan), so every process takes the same optimiser step:

- :mod:`~sopt.distributed.environment`: the ``env://`` variables of a rank; NVLink multicast kept off;
- :mod:`~sopt.distributed.launcher`: :func:`launch`, N local ranks of one command;
- :mod:`~sopt.distributed.data_parallel`: :func:`start` (process group, the rank's GPU) and :class:`DataParallel`,
  the Trainer's hook (``Trainer(..., data_parallel=dp)``);
- :mod:`~sopt.distributed.gradient_all_reduce`, :mod:`~sopt.distributed.stop_agreement`,
  :mod:`~sopt.distributed.metrics_schedule`: what the hook does;
- :mod:`~sopt.distributed.replica`: training on ranks other than 0 (rank 0 writes every file);
- :mod:`~sopt.distributed.splittable`: which configs can be split.

torch is imported only by the modules that talk to other processes, never by ``import sopt.distributed``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sopt.utils.lazy_exports import lazy_exports

__getattr__, __dir__ = lazy_exports(__name__)

if TYPE_CHECKING:
    from sopt.distributed.data_parallel import DataParallel, start
    from sopt.distributed.environment import MULTICAST_OFF, RankEnvironment, rank_environment
    from sopt.distributed.gradient_all_reduce import GradientAllReduce
    from sopt.distributed.launcher import launch
    from sopt.distributed.replica import train_replica
    from sopt.distributed.splittable import check_splittable
