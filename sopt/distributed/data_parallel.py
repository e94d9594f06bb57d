"""DataParallel: one process per GPU, each with the whole model, training on its part of every batch.

:func:`start` joins this process to the run's process group (``torch.distributed``, ``env://`` variables, see
:mod:`sopt.distributed.environment`): on CUDA it first makes GPU ``LOCAL_RANK`` torch's current device, so sopt's
device is created on that GPU, sharing torch's CUDA context (:mod:`sopt.runtime.device`), and gradients go through NCCL;
on Vulkan (lavapipe included) through gloo on host memory. Control messages (stop requests, the loss of metrics
steps, the run directory) go through a gloo group on both.

The returned :class:`DataParallel` is the :class:`sopt.train.Trainer`'s hook (``Trainer(...,
data_parallel=dp)``), which calls it at four points of the loop:

- construction (:meth:`split`): the sampler's batch, the configured global batch, is split evenly over the ranks
  (:meth:`sopt.train.BatchSampler.split`: rank r draws rows r*B/W .. (r+1)*B/W - 1 of the batch one process draws;
  refused when B is not a multiple of W); an objective with no batch sampler is refused;
- after the backward (:meth:`reduce_gradients`): the mean of the ranks' gradient buffers
  (:class:`~sopt.distributed.gradient_all_reduce.GradientAllReduce`), then every rank takes the same optimiser step;
- after each step (:meth:`agree_stop`): a stop asked by a signal is acted on by every rank after the same step
  (:class:`~sopt.distributed.stop_agreement.StopAgreement`);
- metrics steps (:meth:`mean`): the logged loss is the mean of the ranks' losses, the loss of the whole batch.

Rank 0 alone writes files (the caller's business: it gives rank 0 the loggers and checkpoints);
:func:`~sopt.distributed.metrics_schedule.match_metrics_steps` keeps the metrics steps the same on every rank.
"""

from __future__ import annotations

import datetime
import os
from typing import Any, Callable, TypeVar

from sopt.runtime import device as dev
from sopt.distributed.environment import RankEnvironment, keep_multicast_off
from sopt.distributed.gradient_all_reduce import GradientAllReduce
from sopt.distributed.metrics_schedule import match_metrics_steps
from sopt.distributed.stop_agreement import StopAgreement

T = TypeVar("T")

# how long a rank waits for the others at a collective before failing; a rank that died is noticed by the
# launcher (or torchrun), which stops the others at once
TIMEOUT = datetime.timedelta(minutes=30)


class DataParallel:
    """This process's part of a data-parallel run (made by :func:`start`; see the module docstring)."""

    def __init__(self, env: RankEnvironment, *, backend: str, control: Any, deterministic: bool) -> None:
        self.env, self.backend, self.control, self.deterministic = env, backend, control, deterministic
        self.rank, self.world_size = env.rank, env.world_size
        self.gradients = GradientAllReduce(env.world_size, deterministic=deterministic, on_gpu=backend != "gloo")
        self.stops = StopAgreement(env.rank, env.world_size, control)

    @property
    def is_main(self) -> bool:
        return self.env.is_main

    # -- the Trainer's hooks --------------------------------------------------------------------------------
    def split(self, trainer: Any) -> None:
        """Split ``trainer``'s batch over the ranks; ValueError when its objective draws no batch that can be."""
        sampler = getattr(trainer, "sampler", None)
        if sampler is None or not callable(getattr(sampler, "split", None)):
            what = "has no batch sampler" if sampler is None else f"draws batches with a {type(sampler).__name__}"
            raise ValueError(f"data-parallel training splits each step's batch over the processes, but this training "
                             f"{what} (a BatchSampler's batch -> loss -> backward -> optimiser step is needed); run "
                             "it in one process")
        sampler.split(self.rank, self.world_size)

    def reduce_gradients(self, tape: Any, optimizer: Any) -> None:
        """Between the backward and the optimiser step: the gradients' mean over the ranks."""
        self.gradients(tape, optimizer)

    def agree_stop(self, reason: str | None) -> str | None:
        """After each step: this rank's pending stop reason in, the one every rank stops with now (or None) out."""
        return self.stops(reason)

    def mean(self, value: float) -> float:
        """The mean of ``value`` over the ranks (a collective: every rank calls it on the same steps)."""
        import torch
        import torch.distributed as dist
        total = torch.tensor([float(value)], dtype=torch.float64)
        dist.all_reduce(total, group=self.control)
        return float(total.item()) / self.world_size

    def start_training(self, trainer: Any) -> None:
        """Before the first step of ``fit``: the same metrics steps on every rank."""
        match_metrics_steps(trainer, self.control)

    def end_training(self) -> None:
        """After the last step of ``fit``: no collective left pending."""
        self.stops.drain()

    # -- outside the loop -------------------------------------------------------------------------------------
    def from_main(self, make: Callable[[], T]) -> T:
        """``make()`` on rank 0, its result on every rank (pickled through the control group): e.g. the run
        directory, which rank 0 alone creates. An exception of ``make`` on rank 0 is raised on rank 0 and, as a
        ValueError naming it, on the others."""
        import torch.distributed as dist
        box: list[Any] = [None]
        if self.is_main:
            try:
                box[0] = ("ok", make())
            except Exception as exc:
                box[0] = ("error", f"{type(exc).__name__}: {' '.join(str(exc).split())}")
                dist.broadcast_object_list(box, src=0, group=self.control)
                raise
        dist.broadcast_object_list(box, src=0, group=self.control)
        status, value = box[0]
        if status == "error":
            raise ValueError(f"rank 0 failed: {value}")
        return value

    def close(self) -> None:
        """Leave the process group."""
        import torch.distributed as dist
        if dist.is_initialized():
            dist.destroy_process_group()

    def __repr__(self) -> str:
        return (f"DataParallel(rank={self.rank}, world_size={self.world_size}, backend={self.backend!r}, "
                f"deterministic={self.deterministic})")


def start(env: RankEnvironment, *, deterministic: bool = False) -> DataParallel:
    """Join the process group of ``env`` and pick this rank's device (see the module docstring); call it before
    anything creates sopt's device. ``deterministic``: gradients summed in rank order (GradientAllReduce)."""
    keep_multicast_off()   # before NCCL is loaded
    import torch
    import torch.distributed as dist

    wanted = os.environ.get("SOPT_DEVICE", "").strip().lower()
    if wanted != "vulkan" and torch.cuda.is_available():
        count = torch.cuda.device_count()
        if env.local_rank >= count:
            raise ValueError(f"LOCAL_RANK={env.local_rank} but {count} CUDA GPU(s) are visible; start at most {count} "
                             "processes per host (--nproc)")
        torch.cuda.set_device(env.local_rank)   # sopt's device is created on torch's current one
    dev.get_device()
    nccl = dev.device_kind() == "cuda" and dev.torch_device_index() == env.local_rank
    backend = "cpu:gloo,cuda:nccl" if nccl else "gloo"
    options: dict[str, Any] = {"device_id": torch.device("cuda", env.local_rank)} if nccl else {}
    dist.init_process_group(backend=backend, init_method=f"tcp://{env.master_addr}:{env.master_port}",
                            rank=env.rank, world_size=env.world_size, timeout=TIMEOUT, **options)
    control = dist.new_group(backend="gloo", timeout=TIMEOUT)
    return DataParallel(env, backend="nccl" if nccl else "gloo", control=control, deterministic=deterministic)
