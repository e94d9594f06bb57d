"""Training curves as a PNG drawn with matplotlib (Agg, files only): the batch loss on a log scale, and the PSNR."""

from __future__ import annotations

import os
from typing import Any, Sequence

import numpy as np

from sopt import atomic_write

FIGSIZE, DPI = (8.4, 3.0), 100   # 840 x 300 pixels


def _series(history: Sequence[dict[str, Any]], key: str, positive: bool) -> tuple[np.ndarray, np.ndarray]:
    """(steps, values) of the finite (and, for a log axis, positive) values of ``key`` in ``history``."""
    rows = [(m["step"], float(m[key])) for m in history if isinstance(m.get(key), (int, float))]
    steps = np.array([s for s, _ in rows], np.float64)
    values = np.array([v for _, v in rows], np.float64)
    keep = np.isfinite(values) & (values > 0 if positive else True)
    return steps[keep], values[keep]


def plot_curves(history: Sequence[dict[str, Any]], path: str | os.PathLike[str]) -> None:
    """Write ``path`` (PNG, 840 x 300): the loss (log scale) and the PSNR (dB) of ``history`` (the Trainer's
    metrics records: ``step``, ``loss``, ``psnr``) side by side; a panel without data says so."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg   # imported here: start-up a config error
    from matplotlib.figure import Figure                          # should not wait for

    fig = Figure(figsize=FIGSIZE, dpi=DPI)
    FigureCanvasAgg(fig)   # files only: no display, no global backend switch
    panels = (("loss", "training loss (batch)", True), ("psnr", "PSNR of the whole image (dB)", False))
    for i, (key, title, log) in enumerate(panels):
        ax = fig.add_subplot(1, 2, i + 1)
        steps, values = _series(history, key, log)
        if steps.size:
            ax.plot(steps, values, lw=1.5, marker="o" if steps.size == 1 else None)
            if log:
                ax.set_yscale("log")
        else:
            ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("step")
        ax.grid(True, alpha=0.3)
    fig.tight_layout()
    atomic_write.write_figure(path, fig, format="png", dpi=DPI)
