"""neural_radiance's pictures drawn with matplotlib (Agg, files only): the held-out views (truth | prediction |
depth map, one row per view, each with its PSNR) and the training curves (batch loss; held-out PSNR and SSIM)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from sopt.utils import atomic_write
from sopt.data import psnr
from sopt.experiments.report_plots import new_figure
from problems.training_curves import plot_training_curves, training_curves_figure

if TYPE_CHECKING:
    from matplotlib.figure import Figure

DPI = 100
VIEWS_FILE, CURVES_FILE = "views.png", "curves.png"
MAX_ROWS = 4   # held-out views shown
CURVES_FIGSIZE = (12.0, 3.0)   # 1200 x 300 pixels
CURVES_PANELS = (("loss", "training loss (batch of rays)", True), ("psnr", "held-out PSNR (dB)", False),
                 ("ssim", "held-out SSIM", False))


def depth_map(depth: np.ndarray, opacity: np.ndarray) -> np.ndarray:
    """The rendered distance along each ray where the view is mostly opaque: depth / opacity where opacity > 0.5
    (the expected distance of the surface), NaN elsewhere (the background)."""
    depth, opacity = np.asarray(depth, np.float64), np.asarray(opacity, np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(opacity > 0.5, depth / np.maximum(opacity, 1e-12), np.nan)


def views_figure(truth: Sequence[np.ndarray], prediction: Sequence[np.ndarray], depth: Sequence[np.ndarray]
                 ) -> "Figure":
    """Rows of truth | prediction | depth map (the first MAX_ROWS views): images (H, W, 3) in [0, 1], depth maps
    (H, W) (NaN: background, drawn blank) on one colour scale with a colour bar; each row's PSNR in its title."""
    rows = min(len(truth), MAX_ROWS)
    if rows < 1 or len(prediction) < rows or len(depth) < rows:
        raise ValueError("views_figure needs at least one view with its truth, prediction and depth map")
    fig = new_figure((10.5, 3.3 * rows), layout=None, dpi=DPI)
    finite = np.concatenate([np.asarray(d, np.float64)[np.isfinite(d)] for d in depth[:rows]])
    lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
    for r in range(rows):
        t, p = np.asarray(truth[r], np.float64), np.asarray(prediction[r], np.float64)
        value = psnr(p.reshape(-1, 3), t.reshape(-1, 3))
        for c, (image, title) in enumerate(((t, "truth"), (p, f"prediction, PSNR {value:.2f} dB"))):
            ax = fig.add_subplot(rows, 3, 3 * r + c + 1)
            ax.imshow(np.clip(image, 0.0, 1.0), interpolation="nearest")
            ax.set_title(f"held-out view {r}: {title}", fontsize=9)
            ax.set_axis_off()
        ax = fig.add_subplot(rows, 3, 3 * r + 3)
        shown = ax.imshow(depth[r], cmap="viridis", vmin=lo, vmax=hi, interpolation="nearest")
        ax.set_title("depth (distance along the ray)", fontsize=9)
        ax.set_axis_off()
        fig.colorbar(shown, ax=ax, fraction=0.046, pad=0.04)
    fig.tight_layout()
    return fig


def plot_views(path: str | os.PathLike[str], truth: Sequence[np.ndarray], prediction: Sequence[np.ndarray],
               depth: Sequence[np.ndarray]) -> "Figure":
    """Write :func:`views_figure` to ``path`` (PNG); returns the figure."""
    fig = views_figure(truth, prediction, depth)
    atomic_write.write_figure(path, fig, format="png", dpi=DPI)
    return fig


def curves_figure(history: Sequence[dict[str, Any]]) -> "Figure":
    """The loss (log scale), the held-out PSNR (dB) and SSIM of ``history`` (the Trainer's metrics records) side
    by side; a panel without data says so (markers on a curve of fewer than 20 points)."""
    return training_curves_figure(history, CURVES_PANELS, CURVES_FIGSIZE, markers_below=20)


def plot_curves(history: Sequence[dict[str, Any]], path: str | os.PathLike[str]) -> "Figure":
    """Write :func:`curves_figure` to ``path`` (PNG, 1200 x 300); returns the figure."""
    return plot_training_curves(path, history, CURVES_PANELS, CURVES_FIGSIZE, markers_below=20)
