"""The environment of one process of a data-parallel run: its rank, the world size, where rank 0 listens.

The variables are torchrun's (and ``torch.distributed``'s ``env://`` rendezvous): ``RANK``, ``WORLD_SIZE``,
``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``. ``sopt run --nproc N`` sets them for
each process it starts (:mod:`sopt.distributed.launcher`); under ``torchrun`` they are already set. A process
without ``WORLD_SIZE`` (or with ``WORLD_SIZE=1``) is a run of its own.

NVLink multicast (NVLS) stays off in every process sopt starts and in every rank it initialises: a program that
uses it can put a host's shared GPUs out of service (see the device machines' notes), and a data-parallel
all-reduce of one gradient buffer gains little from it. :data:`MULTICAST_OFF` holds the variables that turn it off
in NCCL, PyTorch's symmetric memory and NVSHMEM.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Mapping

MULTICAST_OFF: dict[str, str] = {
    "NCCL_NVLS_ENABLE": "0",                  # NCCL: no NVLink SHARP / multicast all-reduce
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",  # PyTorch symmetric memory: no multicast objects
    "NVSHMEM_DISABLE_NVLS": "1",              # NVSHMEM (PyTorch may load it): no NVLS
}

_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


def keep_multicast_off(environ: "os._Environ[str] | dict[str, str]" = os.environ) -> None:
    """Set :data:`MULTICAST_OFF` in ``environ`` (this process's environment by default), overriding any other
    value: called before NCCL is loaded, and on the environment of every process sopt starts."""
    environ.update(MULTICAST_OFF)


@dataclasses.dataclass(frozen=True)
class RankEnvironment:
    """Where this process stands in a data-parallel run: ``rank`` in ``[0, world_size)``, ``local_rank`` its
    index on this host (the GPU it uses on CUDA), rank 0's ``master_addr``:``master_port``."""

    rank: int
    world_size: int
    local_rank: int
    master_addr: str
    master_port: int

    @property
    def is_main(self) -> bool:
        """Rank 0: the process that writes the run's files (metrics, pictures, checkpoints, summary)."""
        return self.rank == 0


def _integer(environ: Mapping[str, str], name: str, low: int, high: int | None = None) -> int:
    text = environ.get(name, "")
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"{name}={text!r} is not an integer; a data-parallel process needs RANK, WORLD_SIZE, "
                         "LOCAL_RANK, MASTER_ADDR and MASTER_PORT (sopt run --nproc N or torchrun sets them)") from None
    if value < low or (high is not None and value > high):
        allowed = f"[{low}, {high}]" if high is not None else f">= {low}"
        raise ValueError(f"{name}={value} is out of range: allowed {allowed}")
    return value


def rank_environment(environ: Mapping[str, str] = os.environ) -> RankEnvironment | None:
    """This process's :class:`RankEnvironment` from ``environ``, or None when it is a run of its own (no
    ``WORLD_SIZE``, or ``WORLD_SIZE=1``). ValueError naming the variable when one is missing or malformed."""
    if "WORLD_SIZE" not in environ:
        return None
    world_size = _integer(environ, "WORLD_SIZE", 1, 4096)
    if world_size == 1:
        return None
    missing = [v for v in _VARIABLES if v not in environ]
    if missing:
        raise ValueError(f"WORLD_SIZE={world_size} but {', '.join(missing)} not set; a data-parallel process needs "
                         "RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT (sopt run --nproc N or torchrun "
                         "sets them)")
    return RankEnvironment(rank=_integer(environ, "RANK", 0, world_size - 1), world_size=world_size,
                           local_rank=_integer(environ, "LOCAL_RANK", 0, world_size - 1),
                           master_addr=environ["MASTER_ADDR"], master_port=_integer(environ, "MASTER_PORT", 1, 65535))
