"""OneCycleLR: the 1cycle policy for lr and momentum (torch.optim.lr_scheduler.OneCycleLR)."""

from __future__ import annotations

import math
from typing import Any

from sopt.optim.lr_scheduler.base import LRScheduler, check_group_count, check_optimizer, per_group
from sopt.utils.validation import check_bool, check_choice, check_float, check_float32, check_int


def _anneal_cos(start: float, end: float, pct: float) -> float:
    return end + (start - end) / 2.0 * (math.cos(math.pi * pct) + 1)


def _anneal_linear(start: float, end: float, pct: float) -> float:
    return (end - start) * pct + start


_ANNEAL = {"cos": _anneal_cos, "linear": _anneal_linear}
_PHASE_KEYS = {"start_lr": ("initial_lr", "max_lr", "min_lr"), "end_lr": ("initial_lr", "max_lr", "min_lr"),
               "start_momentum": ("max_momentum", "base_momentum"), "end_momentum": ("max_momentum", "base_momentum")}


def _check_phases(phases: Any, name: str) -> list[dict[str, Any]]:
    """A saved phase list: 2 or 3 dicts with a finite ``end_step`` and the group keys each phase anneals between."""
    if not isinstance(phases, list) or len(phases) not in (2, 3):
        raise ValueError(f"{name} must be a list of 2 or 3 phases, got {phases!r}")
    for i, phase in enumerate(phases):
        if not isinstance(phase, dict) or set(phase) != {"end_step", *_PHASE_KEYS}:
            raise ValueError(f"{name}[{i}] must be a dict with keys {sorted({'end_step', *_PHASE_KEYS})}, got {phase!r}")
        check_float(phase["end_step"], f"{name}[{i}].end_step")
        for key, allowed in _PHASE_KEYS.items():
            check_choice(phase[key], f"{name}[{i}].{key}", allowed)
    return phases


class OneCycleLR(LRScheduler):
    r"""The 1cycle policy (Smith & Topin 2017) with fastai's two phases, or the paper's three.

    With ``N = total_steps`` (or ``epochs * steps_per_epoch``), ``initial_lr = max_lr / div_factor`` and
    ``min_lr = initial_lr / final_div_factor``, the lr at step t anneals within phases
    (``anneal(a, b, p)``: ``b + (a - b) * (1 + cos(pi p)) / 2`` for 'cos', ``a + (b - a) * p`` for 'linear')::

        two phases,   e1 = pct_start * N - 1:
            t <= e1:   lr_t = anneal(initial_lr, max_lr, t / e1)
            t >  e1:   lr_t = anneal(max_lr, min_lr, (t - e1) / (N - 1 - e1))
        three phases, e1 = pct_start * N - 1, e2 = 2 * pct_start * N - 2:
            t <= e1:   lr_t = anneal(initial_lr, max_lr, t / e1)
            t <= e2:   lr_t = anneal(max_lr, initial_lr, (t - e1) / (e2 - e1))
            t >  e2:   lr_t = anneal(initial_lr, min_lr, (t - e2) / (N - 1 - e2))

    With ``cycle_momentum`` the momentum follows the same phases between ``max_momentum`` and
    ``base_momentum`` (high while the lr is low): ``max -> base``, then ``base -> max`` (two phases), or
    ``max -> base -> max -> max`` (three phases). It is written to ``betas[0]`` for Adam-family optimisers
    (those with a ``betas`` default) and to ``momentum`` otherwise, as torch does.

    Closed form, not chainable. Like torch, the constructor stores ``initial_lr``, ``max_lr``, ``min_lr``
    (and ``max_momentum``, ``base_momentum``) in every param group and reads them from there, and stepping
    beyond step N raises ValueError.

    Args:
        optimizer: the optimiser whose groups' ``lr`` (and momentum) is scheduled.
        max_lr: peak lr, > 0; one value or one per group.
        total_steps: N, >= 1; or give ``epochs`` and ``steps_per_epoch`` (N = their product).
        epochs, steps_per_epoch: ints >= 1, used when ``total_steps`` is None.
        pct_start: fraction of N spent raising the lr, in [0, 1]. Default 0.3.
        anneal_strategy: 'cos' or 'linear'. Default 'cos'.
        cycle_momentum: cycle momentum / beta1 inversely to the lr. Default True.
        base_momentum, max_momentum: momentum bounds, >= 0 (< 1 for beta1); one value or one per group.
            Defaults 0.85, 0.95.
        div_factor: ``initial_lr = max_lr / div_factor``, > 0. Default 25.
        final_div_factor: ``min_lr = initial_lr / final_div_factor``, > 0. Default 1e4.
        three_phase: use the paper's three phases. Default False.
        last_epoch: -1 to start; see :class:`LRScheduler`.
    """

    _state_attrs = ("total_steps", "anneal_strategy", "cycle_momentum", "use_beta1", "phases")
    _state_checks = {"total_steps": lambda v, n: check_int(v, n, low=1),
                     "anneal_strategy": lambda v, n: check_choice(v, n, _ANNEAL),
                     "cycle_momentum": check_bool,
                     "use_beta1": check_bool,
                     "phases": lambda v, n: _check_phases(v, n)}

    def __init__(self, optimizer: Any, max_lr: float | list[float], total_steps: int | None = None,
                 epochs: int | None = None, steps_per_epoch: int | None = None, pct_start: float = 0.3,
                 anneal_strategy: str = "cos", cycle_momentum: bool = True,
                 base_momentum: float | list[float] = 0.85, max_momentum: float | list[float] = 0.95,
                 div_factor: float = 25.0, final_div_factor: float = 1e4, three_phase: bool = False,
                 last_epoch: int = -1) -> None:
        check_optimizer(optimizer)
        last_epoch = check_int(last_epoch, "last_epoch", low=-1)
        if total_steps is not None:
            self.total_steps = check_int(total_steps, "total_steps", low=1)
        elif epochs is not None and steps_per_epoch is not None:
            self.total_steps = check_int(epochs, "epochs", low=1) * check_int(steps_per_epoch, "steps_per_epoch", low=1)
        else:
            raise ValueError(f"OneCycleLR needs total_steps, or both epochs and steps_per_epoch; got "
                             f"total_steps={total_steps}, epochs={epochs}, steps_per_epoch={steps_per_epoch}")
        pct_start = check_float(pct_start, "pct_start", 0.0, 1.0)
        self.anneal_strategy = check_choice(anneal_strategy, "anneal_strategy", _ANNEAL)
        div_factor = check_float(div_factor, "div_factor", low=0.0, low_inclusive=False)
        final_div_factor = check_float(final_div_factor, "final_div_factor", low=0.0, low_inclusive=False)
        self.phases = self._make_phases(pct_start, check_bool(three_phase, "three_phase"))
        max_lrs = per_group(max_lr, "max_lr", optimizer,
                            lambda v, name: check_float(v, name, low=0.0, low_inclusive=False, float32=True))
        for i, peak in enumerate(max_lrs):   # the lrs the cycle starts and ends at, as the kernel will read them
            initial = check_float32(peak / div_factor, f"initial_lr[{i}] (max_lr / div_factor)", "OneCycleLR")
            check_float32(initial / final_div_factor, f"min_lr[{i}] (initial_lr / final_div_factor)", "OneCycleLR")

        self.cycle_momentum = check_bool(cycle_momentum, "cycle_momentum")
        self.use_beta1 = False
        if self.cycle_momentum:
            defaults = getattr(optimizer, "defaults", {})
            if "momentum" not in defaults and "betas" not in defaults:
                raise ValueError(f"cycle_momentum=True needs an optimizer with momentum or betas, "
                                 f"{type(optimizer).__name__} has neither; pass cycle_momentum=False")
            self.use_beta1 = "betas" in defaults
            # beta1 must stay a valid Adam beta; SGD/RMSprop momentum only needs to be >= 0.
            high = 1.0 if self.use_beta1 else None

            def check_momentum(v: Any, name: str) -> float:
                return check_float(v, name, low=0.0, high=high, high_inclusive=False, float32=True)

            max_momentums = per_group(max_momentum, "max_momentum", optimizer, check_momentum)
            base_momentums = per_group(base_momentum, "base_momentum", optimizer, check_momentum)

        # Every argument is checked: only now touch the param groups.
        if last_epoch == -1:
            for i, (group, peak) in enumerate(zip(optimizer.param_groups, max_lrs)):
                group["initial_lr"] = peak / div_factor
                group["max_lr"] = peak
                group["min_lr"] = group["initial_lr"] / final_div_factor
                if self.cycle_momentum:
                    self._set_momentum(group, max_momentums[i])
                    group["max_momentum"] = max_momentums[i]
                    group["base_momentum"] = base_momentums[i]
        super().__init__(optimizer, last_epoch)

    def _make_phases(self, pct_start: float, three_phase: bool) -> list[dict[str, Any]]:
        N = self.total_steps
        def phase(end: float, lr: tuple[str, str], momentum: tuple[str, str]) -> dict[str, Any]:
            return {"end_step": end, "start_lr": lr[0], "end_lr": lr[1],
                    "start_momentum": momentum[0], "end_momentum": momentum[1]}
        if three_phase:
            phases = [phase(float(pct_start * N) - 1, ("initial_lr", "max_lr"), ("max_momentum", "base_momentum")),
                      phase(float(2 * pct_start * N) - 2, ("max_lr", "initial_lr"), ("base_momentum", "max_momentum")),
                      phase(N - 1, ("initial_lr", "min_lr"), ("max_momentum", "max_momentum"))]
        else:
            phases = [phase(float(pct_start * N) - 1, ("initial_lr", "max_lr"), ("max_momentum", "base_momentum")),
                      phase(N - 1, ("max_lr", "min_lr"), ("base_momentum", "max_momentum"))]
        # A phase of zero length would be reached with pct = 0/0 (torch raises ZeroDivisionError mid-run);
        # phases of negative length are never reached and are allowed, as in torch.
        start = 0.0
        for i, p in enumerate(phases):
            if p["end_step"] == start:
                raise ValueError(f"pct_start={pct_start} with total_steps={N} gives phase {i + 1} of the "
                                 f"{'three' if three_phase else 'two'}-phase schedule zero length (it ends at step "
                                 f"{p['end_step']:g}, where it starts); change pct_start or total_steps")
            start = p["end_step"]
        return phases

    def _set_momentum(self, group: dict[str, Any], value: float) -> None:
        if self.use_beta1:
            group["betas"] = (value, *group["betas"][1:])
        else:
            group["momentum"] = value

    def get_lr(self) -> list[float]:
        t = self.last_epoch
        if t > self.total_steps:
            raise ValueError(f"OneCycleLR stepped to step {t}, beyond total_steps={self.total_steps}; "
                             f"construct it with a larger total_steps (or epochs * steps_per_epoch)")
        anneal = _ANNEAL[self.anneal_strategy]
        lrs = []
        for group in self.optimizer.param_groups:
            start = 0.0
            for i, phase in enumerate(self.phases):
                end = phase["end_step"]
                if t <= end or i == len(self.phases) - 1:
                    pct = (t - start) / (end - start)
                    lr = anneal(group[phase["start_lr"]], group[phase["end_lr"]], pct)
                    if self.cycle_momentum:
                        momentum = anneal(group[phase["start_momentum"]], group[phase["end_momentum"]], pct)
                    break
                start = end
            lrs.append(lr)
            if self.cycle_momentum:
                self._set_momentum(group, momentum)
        return lrs

    # -- state: the per-group values live in the param groups; save them so a fresh optimiser gets them back.
    _GROUP_KEYS = ("initial_lr", "max_lr", "min_lr")
    _MOMENTUM_KEYS = ("max_momentum", "base_momentum")

    def _group_keys(self) -> tuple[str, ...]:
        return self._GROUP_KEYS + (self._MOMENTUM_KEYS if self.cycle_momentum else ())

    def _momentum(self, group: dict[str, Any]) -> float:
        return group["betas"][0] if self.use_beta1 else group["momentum"]

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        groups = self.optimizer.param_groups
        state["groups"] = {key: [float(g[key]) for g in groups] for key in self._group_keys()}
        if self.cycle_momentum:
            state["last_momentum"] = [float(self._momentum(g)) for g in groups]
        return state

    def _check_state_dict(self, state_dict: Any) -> dict[str, Any]:
        loaded = super()._check_state_dict(state_dict)
        attrs = loaded["attrs"]
        cycle, use_beta1 = attrs["cycle_momentum"], attrs["use_beta1"]
        defaults = getattr(self.optimizer, "defaults", {})
        if cycle and ("betas" if use_beta1 else "momentum") not in defaults:
            raise ValueError(f"OneCycleLR state_dict cycles {'betas[0]' if use_beta1 else 'momentum'}, which "
                             f"{type(self.optimizer).__name__} does not have")
        saved = state_dict["groups"] if "groups" in state_dict else None
        keys = self._GROUP_KEYS + (self._MOMENTUM_KEYS if cycle else ())
        if not isinstance(saved, dict) or any(k not in saved for k in keys):
            raise ValueError(f"OneCycleLR state_dict's 'groups' must be a dict holding {list(keys)}")
        if cycle and "last_momentum" not in state_dict:
            raise ValueError("OneCycleLR state_dict with cycle_momentum lacks 'last_momentum'")
        loaded["groups"] = {k: check_group_count(saved[k], f"groups.{k}", self.optimizer, self) for k in keys}
        loaded["momenta"] = (check_group_count(state_dict["last_momentum"], "last_momentum", self.optimizer, self)
                             if cycle else None)
        return loaded

    def _apply_state_dict(self, loaded: dict[str, Any]) -> None:
        super()._apply_state_dict(loaded)
        for i, group in enumerate(self.optimizer.param_groups):
            for k, values in loaded["groups"].items():
                group[k] = values[i]
            if loaded["momenta"] is not None:
                self._set_momentum(group, loaded["momenta"][i])
