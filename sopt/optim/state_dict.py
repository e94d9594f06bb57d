"""torch-style ``state_dict`` / ``load_state_dict`` of an optimiser, all or nothing: the whole state is checked
against the optimiser (its declared hyperparameters through its ``check_group``, its state slots, its
parameters' shapes) before anything is written. A mixin of :class:`sopt.optim.optimizer.Optimizer`."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import numpy as np

from sopt.optim.param_groups import SCHEDULE_GROUP_KEYS
from sopt.utils.validation import as_float32_array, check_bool, check_float, check_int


class StateDict:
    """state_dict and load_state_dict over the Optimizer's groups, arena slots and step counts."""

    # -- state_dict -------------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """torch-style state: per-parameter state arrays (by index), param groups with indices, step counts, and
        ``type`` (the optimiser's class name)."""
        skipped = self.poll_skipped()
        step = self._device_attempts(self._read_ctl()) - skipped
        flats = {name: self._state_tensor(name).to_numpy().ravel() for name in self._slots}
        per_param = {name: self.arena.split(flat) for name, flat in flats.items()}
        state = {i: {"step": step, **{name: arrays[i] for name, arrays in per_param.items()}}
                 for i in range(len(self.arena.params))}
        groups, index = [], 0
        for g in self.param_groups:
            n = len(g["params"])
            groups.append({**{k: v for k, v in g.items() if k != "params"}, "params": list(range(index, index + n))})
            index += n
        return {"type": type(self).__name__, "state": state, "param_groups": groups, "step": step,
                "skipped_steps": skipped, "max_grad_norm": self.max_grad_norm, "skip_nonfinite": self.skip_nonfinite}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore hyperparameters, state and step counts saved by :meth:`state_dict`, all or nothing.

        The whole state is checked first (ValueError naming what is wrong, with nothing changed): the optimiser
        type it was saved from (a state_dict without ``type``, from older versions, must have exactly this
        optimiser's group keys), the group count and sizes, every group's hyperparameters through
        :meth:`check_group` (the constructor's checks) on a copy, ``max_grad_norm``, ``skip_nonfinite``, the step
        counts and every state array's name and shape; only then is anything applied. State slots the
        state_dict does not hold are reset to their initial fill. A hyperparameter added since state_dicts were
        saved without it (``absent_from_old_state_dicts``, e.g. Adam's ``lazy``) may be missing from a saved
        group: the group keeps its current value.
        """
        self._apply_state_dict(self._check_state_dict(state_dict))

    def _check_state_dict(self, state_dict: Any) -> "_LoadedState":
        """Validate ``state_dict`` against this optimiser without changing anything; the result is what
        :meth:`_apply_state_dict` writes."""
        me = type(self).__name__
        if not isinstance(state_dict, dict):
            raise ValueError(f"{me}.load_state_dict expects a dict from state_dict(), got {type(state_dict).__name__}")
        saved_type = state_dict.get("type")
        if saved_type is not None and saved_type != me:
            raise ValueError(f"state_dict was saved from a {saved_type!r} optimizer, cannot load it into a {me}")
        missing = [key for key in ("state", "param_groups") if key not in state_dict]
        if missing:
            raise ValueError(f"{me} state_dict lacks {missing}")
        groups = state_dict["param_groups"]
        if not isinstance(groups, list) or len(groups) != len(self.param_groups):
            raise ValueError(f"state_dict has {len(groups) if isinstance(groups, list) else groups!r} param groups, "
                             f"this optimizer has {len(self.param_groups)}")
        checked = [self._check_saved_group(k, saved, mine) for k, (saved, mine) in
                   enumerate(zip(groups, self.param_groups))]

        params = self.arena.params
        state = state_dict["state"]
        if not isinstance(state, dict):
            raise ValueError(f"state_dict's 'state' must be a dict by parameter index, got {type(state).__name__}")
        by_index: dict[int, dict[str, Any]] = {}
        for key, entry in state.items():
            try:
                i = int(key)
            except (TypeError, ValueError):
                raise ValueError(f"state_dict's 'state' has key {key!r}; keys are parameter indices") from None
            if not 0 <= i < len(params) or not isinstance(entry, dict):
                raise ValueError(f"state_dict's 'state' entry {key!r} must be a dict for a parameter index in "
                                 f"[0, {len(params)}), got {type(entry).__name__}")
            by_index[i] = entry
        names = sorted({name for entry in by_index.values() for name in entry if name != "step"})
        unknown = [name for name in names if name not in self.state_names]
        if unknown:
            raise ValueError(f"state_dict has state(s) {unknown}; {me} keeps {list(self.state_names)}")
        per_param: dict[str, list[np.ndarray]] = {name: [] for name in names}
        for i, p in enumerate(params):
            entry = by_index.get(i, {})
            if "step" in entry:
                check_int(entry["step"], f"state[{i}]['step']", low=0)
            for name in names:
                if name not in entry:
                    per_param[name].append(np.zeros(p.shape, np.float32))
                    continue
                value = entry[name]
                per_param[name].append(as_float32_array(value, f"state {name!r} of parameter {i} ({p.name!r})",
                                                        p.shape))
        arrays = {name: self.arena.join(values) for name, values in per_param.items()}

        max_grad_norm = state_dict.get("max_grad_norm", self.max_grad_norm)
        if max_grad_norm is not None:
            max_grad_norm = check_float(max_grad_norm, "max_grad_norm", low=0.0, low_inclusive=False, float32=True)
        skip_nonfinite = check_bool(state_dict.get("skip_nonfinite", self.skip_nonfinite), "skip_nonfinite")
        step = check_int(state_dict.get("step", 0), "step", low=0)
        skipped = check_int(state_dict.get("skipped_steps", 0), "skipped_steps", low=0)
        return _LoadedState(checked, arrays, max_grad_norm, bool(skip_nonfinite), step, skipped)

    def _check_saved_group(self, k: int, saved: Any, mine: dict[str, Any]) -> dict[str, Any]:
        """Group ``k`` of a state_dict merged over this optimiser's group ``mine``, checked, as a new dict."""
        if not isinstance(saved, dict):
            raise ValueError(f"param group {k} of the state_dict must be a dict, got {type(saved).__name__}")
        indices = saved.get("params")
        if not isinstance(indices, list) or len(indices) != len(mine["params"]):
            raise ValueError(f"param group {k} has {len(indices) if isinstance(indices, list) else repr(indices)} "
                             f"parameters in the state_dict, {len(mine['params'])} here")
        me = type(self).__name__
        foreign = sorted(set(saved) - set(self.defaults) - {"params"} - SCHEDULE_GROUP_KEYS)
        if foreign:
            raise ValueError(f"param group {k} of the state_dict has option(s) {foreign}, which {me} does not have "
                             f"(its options: {sorted(self.defaults)}); was it saved from another optimizer?")
        newer = {h.key for h in self.hyperparameters if h.absent_from_old_state_dicts}   # e.g. Adam's lazy
        lacking = sorted(set(self.defaults) - set(saved) - newer)
        if lacking:
            raise ValueError(f"param group {k} of the state_dict lacks {me}'s option(s) {lacking}; was it saved "
                             f"from another optimizer?")
        group = {**mine, **copy.deepcopy({key: v for key, v in saved.items() if key != "params"}),
                 "params": mine["params"]}
        try:
            for key in SCHEDULE_GROUP_KEYS & set(saved):
                group[key] = check_float(group[key], key)
            # may normalise values (e.g. betas to a tuple): it works on the copy
            self._check_group_float32(group)
        except ValueError as exc:
            raise ValueError(f"param group {k} of the state_dict: {exc}") from None
        return group

    def _apply_state_dict(self, loaded: "_LoadedState") -> None:
        """Write a state checked by :meth:`_check_state_dict` (cannot fail on its contents)."""
        self._ensure_states(loaded.arrays)   # allocate first: a failure here leaves the old state in place
        for mine, group in zip(self.param_groups, loaded.groups):
            mine.update(group)   # in place: schedulers and users hold these dicts
        for name in self._slots:
            flat = loaded.arrays.get(name)
            if flat is None:   # not in the state_dict: back to the initial fill
                flat = self.arena.join([np.full(p.shape, self.state_fill(name, g), np.float32)
                                        for g in self.param_groups for p in g["params"]])
            self._state_tensor(name).copy_from_numpy(flat)
        self.max_grad_norm = loaded.max_grad_norm
        self.skip_nonfinite = loaded.skip_nonfinite
        self._restart_counts(loaded.step, loaded.skipped)


@dataclasses.dataclass(frozen=True)
class _LoadedState:
    """A state_dict checked against an optimiser, ready to apply: merged groups, joined state arrays by name."""

    groups: list[dict[str, Any]]
    arrays: dict[str, np.ndarray]
    max_grad_norm: float | None
    skip_nonfinite: bool
    step: int
    skipped: int
