"""neural_sdf's pictures drawn with matplotlib (Agg, files only): three slices of the signed distance through the
box centre (truth | prediction | error, the zero level drawn on each), and the training curves (the batch loss on a
log scale, and the IoU)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from sopt.utils import atomic_write
from sopt.experiments.report_plots import new_figure
from problems.training_curves import plot_training_curves

if TYPE_CHECKING:
    from matplotlib.figure import Figure

DPI = 100
SLICES_FIGSIZE = (10.5, 9.6)   # 1050 x 960 pixels: 3 slices x (truth, prediction, error)
CURVES_FIGSIZE = (8.4, 3.0)    # 840 x 300 pixels
CURVES_PANELS = (("loss", "training loss (batch)", True), ("iou", "IoU of the interiors", False))
AXES = ("x", "y", "z")


def slice_points(axis: int, size: int, at: float = 0.5) -> np.ndarray:
    """(size * size, 3) float32 pixel centres of the slice ``coordinate[axis] = at`` of the unit box, row-major
    with the first remaining axis across (columns) and the second up (rows, top row highest)."""
    u = (np.arange(size) + 0.5) / size
    across, up = [k for k in range(3) if k != axis]
    points = np.empty((size, size, 3), np.float32)
    points[..., axis] = at
    points[..., across] = u[None, :]
    points[..., up] = u[::-1, None]
    return points.reshape(-1, 3)


def plot_slices(path: str | os.PathLike[str], truth: Sequence[np.ndarray], prediction: Sequence[np.ndarray]) -> None:
    """Write ``path`` (PNG, 1050 x 960): for each axis k, the slice ``coordinate k = 0.5`` (square (S, S) arrays in
    :func:`slice_points`' layout) as truth | prediction (one diverging colour scale, the zero level in black) |
    |prediction - truth|."""
    fig = new_figure(SLICES_FIGSIZE, layout=None, dpi=DPI)
    limit = max(float(np.abs(t).max()) for t in truth) or 1.0
    error_max = max(float(np.abs(p - t).max()) for p, t in zip(prediction, truth)) or 1.0
    for row, (t, p) in enumerate(zip(truth, prediction)):
        across, up = (AXES[k] for k in range(3) if k != row)
        for col, (image, title) in enumerate(((t, "truth"), (p, "prediction"), (np.abs(p - t), "|error|"))):
            ax = fig.add_subplot(3, 3, 3 * row + col + 1)
            extent = (0.0, 1.0, 0.0, 1.0)
            if col < 2:
                shown = ax.imshow(image, cmap="RdBu", vmin=-limit, vmax=limit, extent=extent)
                if image.min() < 0.0 < image.max():
                    ax.contour(image[::-1], levels=[0.0], colors="k", linewidths=1.0, extent=extent)
            else:
                shown = ax.imshow(image, cmap="magma", vmin=0.0, vmax=error_max, extent=extent)
            ax.set_title(f"{title}, {AXES[row]} = 0.5", fontsize=9)
            ax.set_xlabel(across, fontsize=8)
            ax.set_ylabel(up, fontsize=8)
            ax.tick_params(labelsize=7)
            if col >= 1:
                fig.colorbar(shown, ax=ax, fraction=0.046, pad=0.04)
    fig.suptitle("signed distance (box units; negative inside)")
    fig.tight_layout()
    atomic_write.write_figure(path, fig, format="png", dpi=DPI)


def plot_curves(history: Sequence[dict[str, Any]], path: str | os.PathLike[str]) -> "Figure":
    """Write ``path`` (PNG, 840 x 300): the batch loss (log scale) and the IoU over ``history`` (the Trainer's
    metrics records: ``step``, ``loss``, ``iou``) side by side; a panel without data says so. Returns the figure."""
    return plot_training_curves(path, history, CURVES_PANELS, CURVES_FIGSIZE)
