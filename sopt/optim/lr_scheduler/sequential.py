"""SequentialLR: run schedulers one after another, switching at milestones (torch.optim.lr_scheduler.SequentialLR)."""

from __future__ import annotations

from bisect import bisect_right
from typing import Any, Sequence

from sopt.optim.lr_scheduler.base import LRScheduler, check_milestones, check_position, check_state
from sopt.optim.lr_scheduler.chained import ChainedScheduler, check_children, check_children_states
from sopt.utils.validation import check_int


class SequentialLR(LRScheduler):
    r"""Use ``schedulers[i]`` from step ``milestones[i-1]`` (0 for the first) until ``milestones[i]``::

        lr_t = schedule_i(t - milestones[i-1])      for milestones[i-1] <= t < milestones[i]

    where ``schedule_i`` is the lr sequence ``schedulers[i]`` would produce alone from the group lrs'
    ``initial_lr``. As in torch: construction resets every group's lr to ``initial_lr``, undoes the initial step
    of every scheduler and redoes only the first one's; at a milestone the next scheduler jumps to its epoch 0
    through its closed form (a chainable one restarts from its base lr, not from the lr reached so far), and
    between milestones the active scheduler steps normally.

    Args:
        optimizer: the optimiser all schedulers drive.
        schedulers: the schedulers, constructed on ``optimizer``; not ReduceLROnPlateau, and only the first
            may be a ChainedScheduler or SequentialLR (a composite has no epoch 0 to jump to).
        milestones: ``len(schedulers) - 1`` steps >= 1, strictly increasing.
        last_epoch: -1 to start; torch's meaning.
    """

    def __init__(self, optimizer: Any, schedulers: Sequence[LRScheduler], milestones: Sequence[int],
                 last_epoch: int = -1) -> None:
        schedulers = list(schedulers)
        check_children("SequentialLR", schedulers, optimizer)
        for i, scheduler in enumerate(schedulers[1:], start=1):
            if isinstance(scheduler, (ChainedScheduler, SequentialLR)):
                raise ValueError(f"SequentialLR: schedulers[{i}] is a {type(scheduler).__name__}, which cannot "
                                 f"restart at a milestone; only schedulers[0] may be a composite")
        milestones = check_milestones(milestones, "milestones", low=1, strict=True)
        if len(milestones) != len(schedulers) - 1:
            raise ValueError(f"milestones must have one entry fewer than schedulers: got {len(schedulers)} "
                             f"schedulers and milestones={milestones}")
        self.optimizer = optimizer
        self._schedulers = schedulers
        self._milestones = milestones
        self.last_epoch = check_int(last_epoch, "last_epoch", low=-1) + 1
        self._step_count = 0
        for group in optimizer.param_groups:
            group["lr"] = group["initial_lr"]
        self.base_lrs = [float(g["initial_lr"]) for g in optimizer.param_groups]
        self.recursive_undo()
        idx = bisect_right(milestones, 0)
        schedulers[idx]._initial_step()
        self._last_lr = schedulers[idx].get_last_lr()

    def recursive_undo(self, sched: Any = None) -> None:
        """Step back every leaf scheduler by one epoch (undoing its constructor's step), as torch."""
        scheds = self if sched is None else sched
        if hasattr(scheds, "_schedulers"):
            for s in scheds._schedulers:
                self.recursive_undo(s)
        elif hasattr(scheds, "last_epoch"):
            scheds.last_epoch -= 1

    def step(self) -> None:
        """Advance one step: the scheduler active at the new step steps, or restarts at its milestone."""
        self._step_count += 1
        self.last_epoch += 1
        idx = bisect_right(self._milestones, self.last_epoch)
        scheduler = self._schedulers[idx]
        if idx > 0 and self._milestones[idx - 1] == self.last_epoch:
            scheduler._update_lr(0)
        else:
            scheduler.step()
        self._last_lr = scheduler.get_last_lr()

    def state_dict(self) -> dict[str, Any]:
        """Own position and milestones, and every scheduler's state_dict under ``"schedulers"``."""
        return {"type": type(self).__name__, "last_epoch": self.last_epoch, "step_count": self._step_count,
                "milestones": list(self._milestones), "base_lrs": list(self.base_lrs),
                "last_lr": [float(lr) for lr in self._last_lr], "schedulers": [s.state_dict() for s in self._schedulers]}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore every scheduler, then this one's position; the saved lrs end up in the param groups. Every
        child's state is checked before any is applied (ValueError with nothing changed)."""
        self._apply_state_dict(self._check_state_dict(state_dict))

    def _check_state_dict(self, state_dict: Any) -> dict[str, Any]:
        check_state(state_dict, self, ("last_epoch", "step_count", "milestones", "base_lrs", "last_lr",
                                       "schedulers"))
        milestones = check_milestones(state_dict["milestones"], "milestones", low=1, strict=True)
        if len(milestones) != len(self._schedulers) - 1:
            raise ValueError(f"SequentialLR state_dict has milestones={milestones} for {len(self._schedulers)} "
                             f"schedulers; it needs one fewer")
        return {"milestones": milestones,
                "children": check_children_states(self, self._schedulers, state_dict["schedulers"]),
                **check_position(state_dict, self.optimizer, self)}

    def _apply_state_dict(self, loaded: dict[str, Any]) -> None:
        for scheduler, child in zip(self._schedulers, loaded["children"]):
            scheduler._apply_state_dict(child)
        self._milestones, self.base_lrs = loaded["milestones"], list(loaded["base_lrs"])
        self.last_epoch, self._step_count = loaded["last_epoch"], loaded["step_count"]
        # The inactive schedulers wrote stale lrs while loading: the active lr is this one's.
        for group, lr in zip(self.optimizer.param_groups, loaded["last_lr"]):
            group["lr"] = lr
        self._last_lr = list(loaded["last_lr"])
