"""Early stopping of bad sweep trials from their metric curves (``sopt sweep --prune median|halving``).

Both rules look at every trial's :class:`~sopt.experiments.metric_curve.MetricCurve` (running, finished and
already stopped ones alike) and answer, for one running trial, whether to stop it now and why. The curves are the
sweep metric's logged values: the ones ``sopt sweep``'s best line and ``sopt report`` rank by (a multi-start fit's
``loss`` is its best start's, problems.fitting.FittingProblem.result_loss).

Median stopping rule (Golovin et al. 2017, "Google Vizier"): at a logged step ``s >= min_steps`` of trial T that
at least ``min_others`` other trials have also reached, T is stopped when its best value up to ``s`` is worse than
the median of the other trials' values at ``s`` (each one's last record at or before ``s``). T is judged at the
latest of its steps that enough others have reached, so a trial running ahead is judged once the others catch up.

Asynchronous successive halving (Li et al. 2020, "ASHA"): rungs at ``min_steps * eta**k`` (k = 0, 1, ...). When T
first logs a step at or past a rung, its value there (that record's) is compared with the values every trial had
at that rung so far: T continues only if it is among the best ``ceil(n / eta)`` of those ``n`` values (itself
included). The decision is taken once per trial and rung, when T reaches it, as in ASHA: early arrivals pass a rung
that few trials have reached (ties count in T's favour).
"""

from __future__ import annotations

import math
import statistics
from typing import Mapping

from sopt.experiments.metric_curve import MetricCurve, better

PRUNERS = ("median", "halving")


class MedianStoppingRule:
    """See the module docstring. ``min_steps``: no trial is stopped before this step (grace period);
    ``min_others``: how many other trials must have reached a step before it is used."""

    def __init__(self, mode: str, min_steps: int, min_others: int = 2) -> None:
        if min_steps < 0:
            raise ValueError(f"min_steps {min_steps}: must be >= 0")
        if min_others < 1:
            raise ValueError(f"min_others {min_others}: must be >= 1")
        self.mode, self.min_steps, self.min_others = mode, min_steps, min_others

    def should_stop(self, trial: str, curves: Mapping[str, MetricCurve]) -> str | None:
        """Why ``trial`` should stop now (one line), or None to let it continue."""
        own = curves[trial]
        others = [c for name, c in curves.items() if name != trial]
        for step, _ in reversed(own.points):
            if step < self.min_steps:
                return None
            values = [c.value_at(step) for c in others if c.reached(step)]
            values = [v for v in values if v is not None]
            if len(values) < self.min_others:
                continue
            median = statistics.median(values)
            best = own.best_until(step)
            if better(median, best, self.mode):
                return (f"median stopping rule: best {own.metric} {best:.6g} up to step {step} is worse than "
                        f"the median {median:.6g} of {len(values)} other trials there")
            return None
        return None


class SuccessiveHalving:
    """See the module docstring. ``min_steps``: the first rung (> 0); ``eta``: the reduction factor (>= 2)."""

    def __init__(self, mode: str, min_steps: int, eta: int = 3) -> None:
        if min_steps < 1:
            raise ValueError(f"min_steps {min_steps}: must be >= 1")
        if eta < 2:
            raise ValueError(f"eta {eta}: must be >= 2")
        self.mode, self.min_steps, self.eta = mode, min_steps, eta
        self._decided: set[tuple[str, int]] = set()

    def rung(self, k: int) -> int:
        return self.min_steps * self.eta ** k

    def rungs_reached(self, curve: MetricCurve) -> list[int]:
        """The rung steps ``curve`` has logged a record at or past, lowest first."""
        rungs, k = [], 0
        while curve.last_step is not None and self.rung(k) <= curve.last_step:
            rungs.append(self.rung(k))
            k += 1
        return rungs

    def mark_decided(self, trial: str, curve: MetricCurve) -> None:
        """Treat the rungs ``curve`` already passed as decided (a trial resumed in a later sweep session kept
        going past them then)."""
        self._decided.update((trial, r) for r in self.rungs_reached(curve))

    def should_stop(self, trial: str, curves: Mapping[str, MetricCurve]) -> str | None:
        """Why ``trial`` should stop now (one line), or None to let it continue."""
        own = curves[trial]
        pending = [r for r in self.rungs_reached(own) if (trial, r) not in self._decided]
        for rung in pending:     # normally one: the rung just reached
            self._decided.add((trial, rung))
            value = own.first_at_or_after(rung)[1]
            values = [value]
            for name, curve in curves.items():
                point = curve.first_at_or_after(rung) if name != trial else None
                if point is not None:
                    values.append(point[1])
            keep = math.ceil(len(values) / self.eta)
            ahead = sum(better(v, value, self.mode) for v in values)
            if ahead >= keep:
                return (f"successive halving: {own.metric} {value:.6g} at rung {rung} is not among the best "
                        f"{keep} of {len(values)} trials there")
        return None


def make_pruner(name: str, mode: str, min_steps: int, eta: int = 3) -> MedianStoppingRule | SuccessiveHalving:
    """The pruner ``name`` ("median" or "halving")."""
    if name == "median":
        return MedianStoppingRule(mode, min_steps)
    if name == "halving":
        return SuccessiveHalving(mode, min_steps, eta)
    raise ValueError(f"prune {name!r}: allowed {', '.join(PRUNERS)}")
