"""neural_field_image's pictures drawn with matplotlib (Agg, files only): the training curves (the batch loss on a
log scale, and the PSNR), and the fit at a glance: truth | prediction | error map, the PSNR in the title."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from sopt.utils import atomic_write
from sopt.data import psnr
from sopt.experiments.report_plots import new_figure
from problems.training_curves import plot_training_curves

if TYPE_CHECKING:
    from matplotlib.figure import Figure

FIGSIZE, DPI = (8.4, 3.0), 100   # 840 x 300 pixels
COMPARISON_FILE = "comparison.png"
CURVES_PANELS = (("loss", "training loss (batch)", True), ("psnr", "PSNR of the whole image (dB)", False))
COMPARISON_FIGSIZE = (10.5, 3.6)  # 1050 x 360 pixels: three square panels and the error map's colour bar


def comparison_figure(truth: np.ndarray, prediction: np.ndarray) -> "Figure":
    """truth | prediction | error map of an (H, W, 3) image and its fit (values in [0, 1]), side by side, the
    PSNR of the prediction in the title: what a reader checks first. The error map is each pixel's absolute error
    averaged over the channels, with a colour bar from 0. Returns the figure (its images carry the data)."""
    truth, prediction = np.asarray(truth, np.float64), np.asarray(prediction, np.float64)
    if truth.shape != prediction.shape or truth.ndim != 3:
        raise ValueError(f"truth and prediction must be (H, W, C) images of one shape, got {truth.shape} and "
                         f"{prediction.shape}")
    error = np.abs(prediction - truth).mean(axis=-1)
    fig = new_figure(COMPARISON_FIGSIZE, layout=None, dpi=DPI)
    value = psnr(prediction.reshape(-1, truth.shape[-1]), truth.reshape(-1, truth.shape[-1]))
    fig.suptitle(f"PSNR {value:.2f} dB")
    for i, (image, title) in enumerate(((truth, "truth"), (prediction, "prediction"))):
        ax = fig.add_subplot(1, 3, i + 1)
        ax.imshow(np.clip(image, 0.0, 1.0), interpolation="nearest")
        ax.set_title(title, fontsize=10)
        ax.set_axis_off()
    ax = fig.add_subplot(1, 3, 3)
    shown = ax.imshow(error, cmap="magma", vmin=0.0, interpolation="nearest")
    ax.set_title("error |prediction - truth|", fontsize=10)
    ax.set_axis_off()
    fig.colorbar(shown, ax=ax, fraction=0.046, pad=0.04)
    fig.tight_layout()
    return fig


def plot_comparison(path: str | os.PathLike[str], truth: np.ndarray, prediction: np.ndarray) -> "Figure":
    """Write :func:`comparison_figure` to ``path`` (PNG, 1050 x 360); returns the figure."""
    fig = comparison_figure(truth, prediction)
    atomic_write.write_figure(path, fig, format="png", dpi=DPI)
    return fig


def plot_curves(history: Sequence[dict[str, Any]], path: str | os.PathLike[str]) -> "Figure":
    """Write ``path`` (PNG, 840 x 300): the loss (log scale) and the PSNR (dB) of ``history`` (the Trainer's
    metrics records: ``step``, ``loss``, ``psnr``) side by side; a panel without data says so. Returns the figure."""
    return plot_training_curves(path, history, CURVES_PANELS, FIGSIZE)
