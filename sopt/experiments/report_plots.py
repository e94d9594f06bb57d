"""The plots of ``sopt report``: a metric's curves over the steps, and a final metric against each swept key.

Each plot function returns a :class:`matplotlib.figure.Figure` (drawn on the Agg canvas, no pyplot and no global
backend state, so it works headless and inside other programs) whose lines carry the data: tests read
``figure.axes[0].lines[i].get_xdata()``. :func:`save` writes one as a PNG. matplotlib is imported when a plot is
made, so reading runs and printing the table never pays for it.
"""

from __future__ import annotations

import math
import pathlib
import re
from typing import TYPE_CHECKING, Any, Callable, Sequence

from sopt.utils import atomic_write
from sopt.experiments.run_records import RunRecord, format_key_value

if TYPE_CHECKING:
    from matplotlib.figure import Figure

# An axis is logarithmic when its values are all positive and span more than this ratio (two decades).
LOG_SPAN = 100.0
# Statuses whose final metrics are not a result (a failed run's last numbers may be a divergence; a pending
# trial has none): left out of metric-vs-key plots, as they are never the best run.
NOT_RESULTS = ("failed", "pending")
FIGSIZE = (7.0, 4.5)   # inches, at 100 dpi: 700 x 450 pixels


def legend_beside(axes: Any, count: int) -> Any:
    """The axes' legend to the right of them, outside the data (the constrained layout narrows the axes to make
    room), smaller and in two columns when there are many entries; returns it."""
    return axes.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0,
                       fontsize="small" if count <= 8 else "x-small", ncol=1 if count <= 12 else 2)


def new_figure(figsize: tuple[float, float] = FIGSIZE, layout: str | None = "constrained",
               dpi: int = 100) -> "Figure":
    """A figure on the Agg canvas: files only, no pyplot, no global backend state. The constrained layout (the
    default) makes room for legends beside the axes; ``layout=None`` for a figure that lays itself out."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=figsize, dpi=dpi, layout=layout)
    FigureCanvasAgg(figure)
    return figure


def wants_log(values: Sequence[float]) -> bool:
    """A log axis for these values: all finite and positive, spanning more than :data:`LOG_SPAN` (min to max)."""
    finite = [v for v in values if math.isfinite(v)]
    return bool(finite) and min(finite) > 0 and max(finite) / min(finite) > LOG_SPAN


def is_numeric_value(value: Any) -> bool:
    """An int or finite float (a bool is no number here)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def short_keys(keys: Sequence[str]) -> dict[str, str]:
    """Legend names of dotted keys: the last part (``learning_rate``) where no other key ends the same way, else
    the whole key."""
    last = [key.rsplit(".", 1)[-1] for key in keys]
    return {key: (tail if last.count(tail) == 1 else key) for key, tail in zip(keys, last)}


def run_label(run: RunRecord, keys: Sequence[str]) -> str:
    """``lr=0.01, batch_size=32``: a run's values of ``keys`` (short names); its name when there are none."""
    names = short_keys(keys)
    parts = [f"{names[key]}={format_key_value(run.value(key))}" for key in keys if run.value(key) is not None]
    return ", ".join(parts) if parts else run.name


def curves_figure(runs: Sequence[RunRecord], metric: str, keys: Sequence[str],
                  best: RunRecord | None = None) -> "Figure":
    """``metric`` against the step for every run with it in metrics.jsonl, overlaid: one line per run (in
    ``runs``' order, runs without the metric skipped), labelled by its values of ``keys`` (the keys that differ), a
    run not finished marked ``[status]``; the best run drawn thicker, runs of one or two points with markers.
    y is logarithmic when every value is positive and they span > 2 decades. The legend sits beside the axes,
    never over a curve.
    """
    figure = new_figure()
    axes = figure.add_subplot()
    every_value: list[float] = []
    for run in runs:
        steps, values = run.series(metric)
        if not steps:
            continue
        label = run_label(run, keys) + (" (best)" if run is best else "")
        if run.status != "finished":
            label += f" [{run.status}]"
        axes.plot(steps, values, label=label, linewidth=2.5 if run is best else 1.2, zorder=3 if run is best else 2,
                  marker="o" if len(steps) < 3 else None)   # a line of one point would not show
        every_value += values
    if wants_log(every_value):
        axes.set_yscale("log")
    axes.set_xlabel("step")
    axes.set_ylabel(metric)
    axes.set_title(f"{metric} per step")
    axes.grid(True, alpha=0.3)
    if axes.lines:
        legend_beside(axes, len(axes.lines))
    return figure


def metric_vs_key_figure(runs: Sequence[RunRecord], key: str, metric: str, other_keys: Sequence[str] = (),
                         best: RunRecord | None = None,
                         value: Callable[[RunRecord], float | None] | None = None,
                         label: str | None = None) -> "Figure":
    """The final ``metric`` against the numeric config key ``key``: runs with a number for both (failed and
    pending runs left out), one line per combination of ``other_keys``' values (e.g. per batch size when
    plotting against the learning rate), points sorted by ``key``. The best run is marked by a star (a line
    labelled ``best: <name>``). x (y) is logarithmic when its values are all positive and span > 2 decades.
    ``value``: a run's y (default: its final ``metric``; the report passes the value that ranks, so the star is
    the lowest or highest point); ``label``: the metric's name on the axis and title (default ``final <metric>``).
    """
    value = value or (lambda run: run.metrics.get(metric))
    label = label or f"final {metric}"
    figure = new_figure()
    axes = figure.add_subplot()
    groups: dict[str, list[tuple[float, float]]] = {}
    for run in runs:
        x, y = run.value(key), value(run)
        if run.status in NOT_RESULTS or not is_numeric_value(x) or y is None or not math.isfinite(y):
            continue
        group = run_label(run, other_keys) if other_keys else metric
        groups.setdefault(group, []).append((float(x), y))
    xs_all, ys_all = [], []
    for group, points in groups.items():
        points.sort()
        axes.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=group)
        xs_all += [p[0] for p in points]
        ys_all += [p[1] for p in points]
    best_y = value(best) if best is not None else None
    if best is not None and is_numeric_value(best.value(key)) and best_y is not None and math.isfinite(best_y):
        axes.plot([float(best.value(key))], [best_y], linestyle="none", marker="*", markersize=16,
                  color="gold", markeredgecolor="black", zorder=4, label=f"best: {best.name}")
    if wants_log(xs_all):
        axes.set_xscale("log")
    if wants_log(ys_all):
        axes.set_yscale("log")
    axes.set_xlabel(key)
    axes.set_ylabel(label)
    axes.set_title(f"{label} against {key}")
    axes.grid(True, alpha=0.3)
    if axes.lines:
        axes.legend(fontsize="small")
    return figure


def plot_file_name(key: str) -> str:
    """``metric_vs_<key>.png``, characters other than letters, digits, ``.``, ``_`` and ``-`` made ``_``."""
    return "metric_vs_" + re.sub(r"[^A-Za-z0-9._-]", "_", key) + ".png"


def save(figure: "Figure", path: pathlib.Path) -> pathlib.Path:
    """Writes ``figure`` as a PNG (700 x 450 pixels), atomically (:func:`sopt.utils.atomic_write.write_figure`: a link
    at ``path`` is replaced, not followed), and returns ``path``."""
    atomic_write.write_figure(path, figure, format="png")
    return path
