"""The shared picture of a fit: the loss and every parameter's value (or relative error) over the steps."""

from __future__ import annotations

import math
import os
from typing import TYPE_CHECKING, Any

import numpy as np

from sopt.utils import atomic_write

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def _series(history: list[dict[str, Any]], key: str) -> tuple[np.ndarray, np.ndarray]:
    """(steps, values) of ``key`` over ``history``; values (steps,) for numbers, (steps, n) for lists."""
    rows = [(m["step"], m[key]) for m in history if m.get(key) is not None]
    if not rows:
        return np.zeros(0), np.zeros(0)
    steps = np.array([s for s, _ in rows], np.float64)
    values = np.array([np.atleast_1d(np.asarray(v, np.float64)) for _, v in rows])
    return steps, values


MAX_LEGEND = 16   # legend entries a panel shows beside it; a panel with more says how many lines in its title


def _element_labels(name: str, count: int, true_size: int) -> list[str]:
    """Labels of a logged parameter's lines: ``fitted`` for a number, ``<name>[i]`` per element of a vector or
    field (as many as the true value has), ``start i`` per start of a multi-start fit of a number."""
    if count == 1:
        return ["fitted"]
    if true_size == count:
        return [f"{name}[{i}]" for i in range(count)]
    return [f"start {i}" for i in range(count)]


def history_figure(history: list[dict[str, Any]], true: dict[str, Any], units: dict[str, str],
                   title: str = "") -> "Figure":
    """The loss on a log scale (the records' ``loss``: a multi-start fit's best start's, its title says so), then
    one panel per parameter of ``true``; returns the figure (Agg canvas).

    A parameter logged as ``value/<name>`` is drawn as its value(s) over the steps (one line per element, e.g. per
    start of a multi-start fit or per body's mass) with the true value(s) dashed in the same colour; one logged only
    as ``rel_error/<name>`` (a field) as its relative error on a log scale. Every line is labelled; a panel's legend
    sits beside it (up to :data:`MAX_LEGEND` entries). ``history``: metrics records (``step``, ``loss``, ...).
    """
    from sopt.experiments.report_plots import legend_beside, new_figure

    names = list(true)
    panels = 1 + len(names)
    cols = min(panels, 3)
    rows = math.ceil(panels / cols)
    fig = new_figure((5.4 * cols, 3.2 * rows))   # constrained: room for the legends beside
    flat = fig.subplots(rows, cols, squeeze=False).ravel()
    steps, loss = _series(history, "loss")
    ax = flat[0]
    if steps.size:
        ax.semilogy(steps, np.maximum(loss[:, 0], 1e-300), label="loss")
    starts = max((len(m["start_loss"]) for m in history if isinstance(m.get("start_loss"), list)), default=0)
    # a multi-start fit's loss is its best start's (FittingProblem.result_loss), as its final loss is
    ax.set_title(f"loss (the best of {starts} starts)" if starts > 1 else "loss")
    ax.set_xlabel("step")
    ax.grid(True, alpha=0.3)
    for ax, name in zip(flat[1:], names):
        unit = units.get(name, "")
        label = f"{name} ({unit})" if unit else name
        steps, values = _series(history, f"value/{name}")
        t = np.asarray(true[name], np.float64)
        if steps.size:
            labels = _element_labels(name, values.shape[1], t.size)
            lines = ax.plot(steps, values, lw=1.2, alpha=0.9 if values.shape[1] <= 4 else 0.5)
            for line, text in zip(lines, labels):
                line.set_label(text)
            if t.size == 1:
                ax.axhline(float(t.reshape(-1)[0]), color="k", ls="--", lw=1.0, label="true")
            elif t.size == values.shape[1]:
                for line, text, v in zip(lines, labels, t.ravel()):
                    ax.axhline(float(v), color=line.get_color(), ls="--", lw=0.8, label=f"{text} true")
            ax.set_title(label)
        else:
            steps, err = _series(history, f"rel_error/{name}")
            if steps.size:
                ax.semilogy(steps, np.maximum(err[:, 0], 1e-300), label="relative error")
            ax.set_title(f"{name}: relative error")
        ax.set_xlabel("step")
        ax.grid(True, alpha=0.3)
        if len(ax.lines) > 1 and len(ax.lines) <= MAX_LEGEND:
            legend_beside(ax, len(ax.lines))
        elif len(ax.lines) > MAX_LEGEND:
            ax.set_title(f"{ax.get_title()}, {len(ax.lines)} lines")
    for ax in flat[panels:]:
        ax.axis("off")
    if title:
        fig.suptitle(title)
    return fig


def plot_history(history: list[dict[str, Any]], true: dict[str, Any], units: dict[str, str],
                 path: str | os.PathLike[str], title: str = "") -> "Figure":
    """Write :func:`history_figure` to ``path`` (PNG); returns the figure."""
    fig = history_figure(history, true, units, title)
    atomic_write.write_figure(path, fig, dpi=100)
    return fig
