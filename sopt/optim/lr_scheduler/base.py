"""LRScheduler: the base of every sopt learning-rate schedule, with torch.optim.lr_scheduler's interface.

A scheduler writes ``group["lr"]`` of its optimiser's param groups; the optimiser reads ``group["lr"]`` afresh
at every ``step()``, so changing it every step costs nothing on the GPU side. Call ``scheduler.step()`` after
``optimizer.step()``, once per epoch or per batch as the schedule intends.

Like torch, a schedule is either *chainable* (``get_lr`` scales the group's current lr, so several schedulers
on one optimiser multiply) or *closed form* (``get_lr`` computes the lr from ``base_lrs`` and the step index).
``SequentialLR`` jumps a scheduler to its epoch 0 through the closed form ``_get_closed_form_lr`` where one
exists, as torch does.

``state_dict()`` holds only plain Python values (ints, floats, strings, bools, None, lists and dicts of them),
so it can be written as strict JSON.
"""

from __future__ import annotations

import copy
from typing import Any, Callable, ClassVar, Sequence

import numpy as np

from sopt.utils.validation import check_float, check_float32, check_int


def check_optimizer(optimizer: Any) -> None:
    """TypeError unless ``optimizer`` has ``param_groups``: a non-empty list of dicts, each with ``"lr"``."""
    groups = getattr(optimizer, "param_groups", None)
    if not isinstance(groups, list) or not groups or not all(isinstance(g, dict) and "lr" in g for g in groups):
        raise TypeError(f"a scheduler needs an optimizer whose param_groups is a non-empty list of dicts with "
                        f"'lr', got {type(optimizer).__name__}")


def per_group(value: Any, name: str, optimizer: Any, check: Callable[[Any, str], float]) -> list[float]:
    """One checked value per param group from a scalar (repeated) or a list/tuple with one value per group."""
    n = len(optimizer.param_groups)
    if isinstance(value, (list, tuple)):
        if len(value) != n:
            raise ValueError(f"{name} has {len(value)} values but the optimizer has {n} param group(s); "
                             f"give one value, or one per group")
        return [check(v, f"{name}[{i}]") for i, v in enumerate(value)]
    return [check(value, name)] * n


def check_milestones(milestones: Any, name: str, low: int, strict: bool) -> list[int]:
    """``milestones`` as a list of ints >= ``low``, increasing (strictly when ``strict``), else ValueError."""
    if isinstance(milestones, (str, bytes)) or not hasattr(milestones, "__iter__"):
        raise ValueError(f"{name} must be a list of integers, got {milestones!r}")
    result = [check_int(m, f"{name}[{i}]", low=low) for i, m in enumerate(milestones)]
    for i in range(1, len(result)):
        if result[i] < result[i - 1] or (strict and result[i] == result[i - 1]):
            order = "strictly increasing" if strict else "non-decreasing"
            raise ValueError(f"{name} must be {order}, got {list(milestones)!r} "
                             f"({name}[{i}]={result[i]} after {result[i - 1]})")
    return result


def plain(value: Any) -> Any:
    """A deep copy of ``value`` with tuples as lists and numpy scalars as Python numbers (JSON-safe)."""
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return copy.deepcopy(value)


def check_state(state_dict: Any, owner: object, keys: Sequence[str]) -> None:
    """ValueError unless ``state_dict`` is a dict saved from the same scheduler class, with every key."""
    name = type(owner).__name__
    if not isinstance(state_dict, dict):
        raise ValueError(f"{name}.load_state_dict expects a dict, got {type(state_dict).__name__}")
    saved = state_dict.get("type")
    if saved != name:
        raise ValueError(f"state_dict was saved from a {saved!r} scheduler, cannot load it into a {name}")
    missing = [k for k in keys if k not in state_dict]
    if missing:
        raise ValueError(f"{name} state_dict lacks {missing}")


def check_group_count(values: Any, key: str, optimizer: Any, owner: object) -> list[float]:
    """The saved per-group list ``values`` as floats >= 0, each 0 or a normal float32; ValueError if its length
    differs from the group count or a value is not such a number."""
    n = len(optimizer.param_groups)
    if not isinstance(values, list) or len(values) != n:
        raise ValueError(f"{type(owner).__name__} state_dict's {key!r} has "
                         f"{len(values) if isinstance(values, list) else repr(values)} entries, "
                         f"the optimizer has {n} param group(s)")
    return [check_float(v, f"{type(owner).__name__} state_dict's {key}[{i}]", low=0.0, float32=True)
            for i, v in enumerate(values)]


def check_position(state_dict: dict[str, Any], optimizer: Any, owner: object) -> dict[str, Any]:
    """The checked ``base_lrs``, ``last_lr``, ``last_epoch`` and ``step_count`` every schedule saves."""
    return {"base_lrs": check_group_count(state_dict["base_lrs"], "base_lrs", optimizer, owner),
            "last_lr": check_group_count(state_dict["last_lr"], "last_lr", optimizer, owner),
            "last_epoch": check_int(state_dict["last_epoch"], "last_epoch", low=-1),
            "step_count": check_int(state_dict["step_count"], "step_count", low=0)}


def check_lrs_float32(owner: object, attrs: dict[str, Any], base_lrs: Sequence[float],
                      lr_factors: Sequence[str] = ()) -> None:
    """ValueError unless every float hyperparameter in ``attrs``, every base lr and every lr ``base * attrs[f]``
    (``f`` in ``lr_factors``: factors that scale the base lr into an lr the schedule reaches, such as
    ConstantLR's ``factor``) is 0 or a normal float32: the optimiser's kernel reads the lr as float32, where a
    schedule to ``eta_min=1e-50`` would end at 0 rather than where it says."""
    name = type(owner).__name__
    for key, value in attrs.items():
        if isinstance(value, float):
            check_float32(value, key, owner=name)
    for i, base in enumerate(base_lrs):
        check_float32(base, f"base_lrs[{i}]", owner=name)
        for key in lr_factors:
            check_float32(base * attrs[key], f"base_lrs[{i}] * {key}", owner=name)


class LRScheduler:
    r"""Base class: sets ``initial_lr`` in every group, keeps ``base_lrs`` and ``last_epoch``, and applies the
    epoch-0 lr on construction (torch's ``_initial_step``).

    Subclasses implement :meth:`get_lr` (the lrs for epoch ``last_epoch``, computed when :meth:`step` has just
    advanced it) and, where a closed form exists, ``_get_closed_form_lr`` (same, from ``base_lrs`` only).
    They list in ``_state_attrs`` the attributes that :meth:`state_dict` saves besides the common ones.

    Args:
        optimizer: a sopt optimiser (anything with torch-style ``param_groups``).
        last_epoch: ``-1`` starts the schedule; a value ``>= 0`` resumes it exactly as torch does: every group
            must then hold ``initial_lr`` and its current lr (e.g. from the optimiser's loaded state_dict), and
            the constructor's step advances to epoch ``last_epoch + 1`` (ExponentialLR, LinearLR and
            CosineAnnealingLR keep the group's lr at that step, as torch's do). :meth:`load_state_dict`
            resumes without these quirks.
    """

    _state_attrs: ClassVar[tuple[str, ...]] = ()
    # how load_state_dict checks each of _state_attrs (value, name) -> value: the constructor's checks
    _state_checks: ClassVar[dict[str, Callable[[Any, str], Any]]] = {}
    # those of _state_attrs that scale the base lr into an lr the schedule reaches (check_lrs_float32)
    _lr_factors: ClassVar[tuple[str, ...]] = ()
    _is_initial: bool = False

    def __init__(self, optimizer: Any, last_epoch: int = -1) -> None:
        check_optimizer(optimizer)
        self.optimizer = optimizer
        last_epoch = check_int(last_epoch, "last_epoch", low=-1)
        if last_epoch != -1:
            for i, group in enumerate(optimizer.param_groups):
                if "initial_lr" not in group:
                    raise ValueError(f"last_epoch={last_epoch} resumes a schedule, but param_groups[{i}] has no "
                                     f"'initial_lr'; load the optimizer's state_dict first, or use last_epoch=-1")
        base_lrs = [float(g.get("initial_lr", g["lr"])) for g in optimizer.param_groups]
        # checked before the groups are touched
        check_lrs_float32(self, {a: getattr(self, a) for a in self._state_attrs}, base_lrs, self._lr_factors)
        for group in optimizer.param_groups:
            group.setdefault("initial_lr", group["lr"])
        self.base_lrs: list[float] = base_lrs
        self.last_epoch = last_epoch
        self._initial_step()

    def _initial_step(self) -> None:
        """Reset the step count and take the step to epoch ``last_epoch + 1`` (0 for a fresh schedule)."""
        self._step_count = 0
        self._is_initial = True
        try:
            self.step()
        finally:
            self._is_initial = False

    def _group_lrs(self) -> list[float]:
        return [group["lr"] for group in self.optimizer.param_groups]

    def get_lr(self) -> list[float]:
        """The lr of every group for epoch ``last_epoch``; called by :meth:`step` (read lrs with
        :meth:`get_last_lr`)."""
        raise NotImplementedError(f"{type(self).__name__} does not implement get_lr()")

    def get_last_lr(self) -> list[float]:
        """The lrs this scheduler last wrote, one per param group."""
        return list(self._last_lr)

    def step(self) -> None:
        """Advance one epoch (or batch) and write its lr into every param group."""
        self._step_count += 1
        self._update_lr()

    def _update_lr(self, epoch: int | None = None) -> None:
        # epoch given: jump there through the closed form when there is one (SequentialLR uses epoch 0).
        if epoch is None:
            self.last_epoch += 1
            values = self.get_lr()
        else:
            self.last_epoch = epoch
            closed_form = getattr(self, "_get_closed_form_lr", None)
            values = closed_form() if closed_form is not None else self.get_lr()
        for group, lr in zip(self.optimizer.param_groups, values, strict=True):
            group["lr"] = lr
        self._last_lr = self._group_lrs()

    # -- state ------------------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The schedule's position and hyperparameters as plain Python values (JSON-serialisable)."""
        state: dict[str, Any] = {"type": type(self).__name__, "last_epoch": self.last_epoch,
                                 "step_count": self._step_count, "base_lrs": list(self.base_lrs),
                                 "last_lr": [float(lr) for lr in self._last_lr]}
        for name in self._state_attrs:
            state[name] = plain(getattr(self, name))
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` saved (hyperparameters included, as torch does) and write the saved
        lrs into the param groups, so the schedule continues exactly where it was saved even when the
        optimiser's own state was not loaded. Every field is checked first (type, range, group count):
        ValueError with nothing changed when one is wrong."""
        self._apply_state_dict(self._check_state_dict(state_dict))

    def _check_state_dict(self, state_dict: Any) -> dict[str, Any]:
        """Check ``state_dict`` without changing anything; returns what :meth:`_apply_state_dict` writes."""
        check_state(state_dict, self, ("last_epoch", "step_count", "base_lrs", "last_lr", *self._state_attrs))
        attrs = {}
        for name in self._state_attrs:
            check = self._state_checks.get(name)
            value = copy.deepcopy(state_dict[name])
            attrs[name] = check(value, name) if check is not None else value
        position = check_position(state_dict, self.optimizer, self)
        check_lrs_float32(self, attrs, position["base_lrs"], self._lr_factors)
        return {**position, "attrs": attrs}

    def _apply_state_dict(self, loaded: dict[str, Any]) -> None:
        """Write a state checked by :meth:`_check_state_dict`."""
        self.last_epoch, self._step_count = loaded["last_epoch"], loaded["step_count"]
        self.base_lrs = list(loaded["base_lrs"])
        for name, value in loaded["attrs"].items():
            setattr(self, name, value)
        for group, base, lr in zip(self.optimizer.param_groups, loaded["base_lrs"], loaded["last_lr"]):
            group["initial_lr"] = base
            group["lr"] = lr
        self._last_lr = list(loaded["last_lr"])

    def __repr__(self) -> str:
        return f"{type(self).__name__}(last_epoch={self.last_epoch}, last_lr={self._last_lr})"


def check_gamma(gamma: Any) -> float:
    """A multiplicative decay factor: finite and > 0."""
    return check_float(gamma, "gamma", low=0.0, low_inclusive=False)
