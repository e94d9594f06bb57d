"""StopAgreement: every rank stops after the same step when any of them is asked to stop (SIGINT, SIGTERM).

A signal reaches the ranks at different moments (or only one of them, under a launcher that forwards it to one);
a rank that stopped alone would leave the others waiting in the next gradient all-reduce. So a stop asked from
outside is not acted on where it lands: each step, every rank posts whether it was asked (an asynchronous
all-reduce of one integer on a CPU process group, the max of ``world_size - rank`` over the ranks asked), and
reads the answer posted the step before. The answer is the same on every rank, so all of them stop after the same
step, one step after the first request was posted, with the reason of the lowest rank that was asked (broadcast
from it). Posting one step ahead hides the exchange's latency behind a step.
"""

from __future__ import annotations

from typing import Any


class StopAgreement:
    """Call once per step on every rank with this rank's pending stop reason (or None); returns the reason to
    stop with after this step, the same on every rank, or None to go on. :meth:`drain` before the group goes."""

    def __init__(self, rank: int, world_size: int, group: Any) -> None:
        import torch
        import torch.distributed as dist
        self._torch, self._dist = torch, dist
        self.rank, self.world_size, self.group = rank, world_size, group
        self._posted: tuple[Any, Any] | None = None   # (work, tensor) of the last step's request

    def __call__(self, reason: str | None) -> str | None:
        agreed = None
        if self._posted is not None:
            work, flag = self._posted
            work.wait()
            asking = int(flag.item())
            if asking:
                source = self.world_size - asking   # the lowest rank that was asked
                message = [reason if self.rank == source else None]
                self._dist.broadcast_object_list(message, src=source, group=self.group)
                agreed = str(message[0])
        self._posted = None
        if agreed is None:
            flag = self._torch.tensor([self.world_size - self.rank if reason is not None else 0],
                                      dtype=self._torch.int64)
            work = self._dist.all_reduce(flag, op=self._dist.ReduceOp.MAX, group=self.group, async_op=True)
            self._posted = (work, flag)
        return agreed

    def drain(self) -> None:
        """Wait for the request posted last (every rank posted as many), so the group holds no pending work."""
        if self._posted is not None:
            self._posted[0].wait()
            self._posted = None
