"""ChainedScheduler: step several chainable schedulers together (torch.optim.lr_scheduler.ChainedScheduler)."""

from __future__ import annotations

from typing import Any, Sequence

from sopt.optim.lr_scheduler.base import LRScheduler, check_group_count, check_state
from sopt.optim.lr_scheduler.plateau import ReduceLROnPlateau
from sopt.utils.validation import check_int


def check_children(owner: str, schedulers: Sequence[Any], optimizer: Any) -> None:
    """ValueError unless ``schedulers`` is non-empty, steppable without arguments and all drive ``optimizer``."""
    if len(schedulers) < 1:
        raise ValueError(f"{owner} needs at least one scheduler, got schedulers={list(schedulers)!r}")
    for i, scheduler in enumerate(schedulers):
        if not isinstance(scheduler, LRScheduler):
            raise ValueError(f"{owner}: schedulers[{i}] must be an LRScheduler, got {type(scheduler).__name__}")
        if isinstance(scheduler, ReduceLROnPlateau):
            raise ValueError(f"{owner} cannot hold ReduceLROnPlateau (schedulers[{i}]): its step() needs a metric")
        if scheduler.optimizer is not optimizer:
            raise ValueError(f"{owner}: schedulers[{i}] ({type(scheduler).__name__}) drives a different optimizer; "
                             f"all schedulers must drive the same one")


def check_children_states(owner: LRScheduler, schedulers: Sequence[Any], children: Any) -> list[Any]:
    """Each child scheduler's saved state checked by that scheduler (nothing applied), ValueError naming the
    child otherwise."""
    name = type(owner).__name__
    if not isinstance(children, list) or len(children) != len(schedulers):
        raise ValueError(f"{name} state_dict holds {len(children) if isinstance(children, list) else children!r} "
                         f"scheduler states, this {name} has {len(schedulers)} schedulers")
    checked = []
    for i, (scheduler, child) in enumerate(zip(schedulers, children)):
        try:
            checked.append(scheduler._check_state_dict(child))
        except ValueError as exc:
            raise ValueError(f"{name} state_dict's schedulers[{i}]: {exc}") from None
    return checked


class ChainedScheduler(LRScheduler):
    r"""Call every scheduler's ``step()`` in order at each step.

    For chainable schedulers (each scales the group's current lr) the factors multiply::

        lr_t = base_lr * prod_k f_k(t)      where schedulers[k] alone gives base_lr * f_k(t)

    (CosineAnnealingLR chains this way only with ``eta_min = 0`` and up to ``T_max``: past it torch's recursion
    adds a ``base_lr`` term.) A closed-form scheduler (OneCycleLR, WarmupCosineLR) overwrites what the
    schedulers before it wrote, as in torch.

    Args:
        schedulers: the schedulers, all on one optimiser, constructed before this; not ReduceLROnPlateau.
        optimizer: the optimiser they drive; default: the first scheduler's.
    """

    def __init__(self, schedulers: Sequence[LRScheduler], optimizer: Any = None) -> None:
        schedulers = list(schedulers)
        if optimizer is None and schedulers:
            optimizer = schedulers[0].optimizer
        check_children("ChainedScheduler", schedulers, optimizer)
        self._schedulers = schedulers
        self.optimizer = optimizer
        self._step_count = 0
        self.base_lrs = [float(g.get("initial_lr", g["lr"])) for g in optimizer.param_groups]
        self._last_lr = self._group_lrs()

    @property
    def last_epoch(self) -> int:
        """The last scheduler's ``last_epoch``."""
        return self._schedulers[-1].last_epoch

    def step(self) -> None:
        """Step every scheduler in order."""
        self._step_count += 1
        for scheduler in self._schedulers:
            scheduler.step()
        self._last_lr = self._group_lrs()

    def state_dict(self) -> dict[str, Any]:
        """Every scheduler's state_dict under ``"schedulers"``, and the lrs last written."""
        return {"type": type(self).__name__, "step_count": self._step_count, "base_lrs": list(self.base_lrs),
                "last_lr": [float(lr) for lr in self._last_lr], "schedulers": [s.state_dict() for s in self._schedulers]}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore every scheduler; the saved lrs end up in the param groups. Every child's state is checked
        before any is applied (ValueError with nothing changed)."""
        self._apply_state_dict(self._check_state_dict(state_dict))

    def _check_state_dict(self, state_dict: Any) -> dict[str, Any]:
        check_state(state_dict, self, ("step_count", "base_lrs", "last_lr", "schedulers"))
        return {"children": check_children_states(self, self._schedulers, state_dict["schedulers"]),
                "base_lrs": check_group_count(state_dict["base_lrs"], "base_lrs", self.optimizer, self),
                "last_lr": check_group_count(state_dict["last_lr"], "last_lr", self.optimizer, self),
                "step_count": check_int(state_dict["step_count"], "step_count", low=0)}

    def _apply_state_dict(self, loaded: dict[str, Any]) -> None:
        for scheduler, child in zip(self._schedulers, loaded["children"]):
            scheduler._apply_state_dict(child)
        self.base_lrs = list(loaded["base_lrs"])
        self._step_count = loaded["step_count"]
        for group, lr in zip(self.optimizer.param_groups, loaded["last_lr"]):
            group["lr"] = lr
        self._last_lr = list(loaded["last_lr"])
