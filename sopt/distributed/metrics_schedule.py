"""The same metrics steps on every rank.

On a metrics step the Trainer reads the loss, which the ranks average (a collective every rank must join), so
all ranks need the same metrics steps: the ``log_every`` steps and every callback's ``every``. Rank 0 has callbacks
the others lack (the metrics log, checkpoints and summary it alone writes), so before training the ranks exchange
their schedules and each adds a callback that does nothing, on the steps only others had.
"""

from __future__ import annotations

from typing import Any

from sopt.train.callback import Callback


class SameSteps(Callback):
    """A callback that runs nothing: it makes every ``every``-th step a metrics step, as it is on another rank."""

    order = 0


def match_metrics_steps(trainer: Any, group: Any) -> None:
    """Give ``trainer`` the union of every rank's metrics steps (collective over ``group``). Ranks with different
    ``log_every`` are refused (ValueError): they would be running different configs."""
    import torch.distributed as dist

    mine = (int(trainer.log_every), sorted({cb.every for cb in trainer.callbacks if cb.every is not None}))
    schedules: list[Any] = [None] * dist.get_world_size(group)
    dist.all_gather_object(schedules, mine, group=group)
    log_everies = {s[0] for s in schedules}
    if len(log_everies) > 1:
        raise ValueError(f"the ranks log every {sorted(log_everies)} steps; all must have the same log_every "
                         "(they run the same config)")
    everies = set().union(*(s[1] for s in schedules)) - set(mine[1])
    trainer.callbacks = sorted([*trainer.callbacks, *(SameSteps(e) for e in sorted(everies))],
                               key=lambda cb: cb.order)
