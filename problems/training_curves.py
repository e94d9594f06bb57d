"""The training-curves picture the neural-field problems write at the end of a run: one panel per metric of the
Trainer's metrics records (``{"step": int, key: float, ...}``) side by side, a loss on a log scale, a panel without
data saying so. Drawn with matplotlib on the Agg canvas (files only); the lines carry the data."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from sopt.utils import atomic_write
from sopt.experiments.report_plots import new_figure

if TYPE_CHECKING:
    from matplotlib.figure import Figure

DPI = 100


def metric_series(history: Sequence[dict[str, Any]], key: str, positive: bool) -> tuple[np.ndarray, np.ndarray]:
    """(steps, values), float64 (n,) each, of the records of ``history`` holding ``key`` as a number, keeping the
    finite values (and, for a log axis, ``positive``, the values > 0)."""
    rows = [(m["step"], float(m[key])) for m in history if isinstance(m.get(key), (int, float))]
    steps = np.array([s for s, _ in rows], np.float64)
    values = np.array([v for _, v in rows], np.float64)
    keep = np.isfinite(values) & (values > 0 if positive else True)
    return steps[keep], values[keep]


def training_curves_figure(history: Sequence[dict[str, Any]], panels: Sequence[tuple[str, str, bool]],
                           figsize: tuple[float, float], markers_below: int = 2) -> "Figure":
    """One panel per ``(key, title, log)`` of ``panels``, left to right: ``key`` of ``history`` over the steps
    (a log y axis where ``log``), its line labelled ``key``, with point markers when it has fewer than
    ``markers_below`` points; "no data" where no record holds the key. ``figsize`` in inches at 100 dpi."""
    fig = new_figure(figsize, layout=None, dpi=DPI)
    for i, (key, title, log) in enumerate(panels):
        ax = fig.add_subplot(1, len(panels), i + 1)
        steps, values = metric_series(history, key, log)
        if steps.size:
            ax.plot(steps, values, lw=1.5, marker="o" if steps.size < markers_below else None, label=key)
            if log:
                ax.set_yscale("log")
        else:
            ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("step")
        ax.grid(True, alpha=0.3)
    fig.tight_layout()
    return fig


def plot_training_curves(path: str | os.PathLike[str], history: Sequence[dict[str, Any]],
                         panels: Sequence[tuple[str, str, bool]], figsize: tuple[float, float],
                         markers_below: int = 2) -> "Figure":
    """Write :func:`training_curves_figure` to ``path`` (PNG, 100 dpi); returns the figure."""
    fig = training_curves_figure(history, panels, figsize, markers_below)
    atomic_write.write_figure(path, fig, format="png", dpi=DPI)
    return fig
