"""heat_inverse's pictures: the plate (initial temperature and sensor layout), the true and recovered conductivity
fields, the error map and each cell's standard deviation (fields.png); observed and fitted sensor readings over time (readings.png)."""

from __future__ import annotations

import pathlib

import matplotlib

matplotlib.use("Agg")   # files only, no display
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from sopt.utils import atomic_write  # noqa: E402
from sopt.experiments.report_plots import legend_beside  # noqa: E402

def _image(ax: plt.Axes, field: np.ndarray, side: float, **kw: object) -> matplotlib.image.AxesImage:
    """``field`` (rows from the bottom) over the plate [0, side]^2 (m)."""
    return ax.imshow(field, origin="lower", extent=(0.0, side, 0.0, side), interpolation="nearest", **kw)


def _sensor_xy(cells: np.ndarray, grid: int, side: float) -> tuple[np.ndarray, np.ndarray]:
    """Centres (x, y) in m of the sensors' cells ((row, col) pairs)."""
    return (cells[:, 1] + 0.5) * side / grid, (cells[:, 0] + 0.5) * side / grid


def plot_fields(path: pathlib.Path, true: np.ndarray, fitted: np.ndarray, u0: np.ndarray, cells: np.ndarray,
                side: float, std: np.ndarray | None = None) -> pathlib.Path:
    """fields.png: the initial temperature with the sensors; the true and the recovered conductivity (one colour
    scale, m^2/s) with the sensors; the error (fitted - true) / max|true| in percent; with ``std`` (each cell's
    standard deviation, m^2/s) a fifth panel of it, titled with the share of cells whose truth lies within 2 of
    them."""
    grid = true.shape[0]
    sx, sy = _sensor_xy(cells, grid, side)
    fig, axes = plt.subplots(1, 4 if std is None else 5, figsize=(17 if std is None else 21.5, 4.2))
    ax = axes[0]
    im = _image(ax, u0, side, cmap="coolwarm")
    ax.plot(sx, sy, "k.", ms=5)
    ax.set_title(f"initial temperature (K) and {len(cells)} sensors")
    fig.colorbar(im, ax=ax, fraction=0.046)
    low, high = float(min(true.min(), fitted.min())), float(max(true.max(), fitted.max()))
    for ax, field, title in ((axes[1], true, "true conductivity (m^2/s)"),
                             (axes[2], fitted, "recovered conductivity (m^2/s)")):
        im = _image(ax, field, side, cmap="viridis", vmin=low, vmax=high)
        ax.plot(sx, sy, "w.", ms=3, alpha=0.7)
        ax.set_title(title)
        fig.colorbar(im, ax=ax, fraction=0.046)
    error = 100.0 * (fitted - true) / float(np.abs(true).max())
    rel = float(np.linalg.norm(fitted - true) / np.linalg.norm(true))
    limit = max(float(np.abs(error).max()), 1e-6)
    im = _image(axes[3], error, side, cmap="RdBu_r", vmin=-limit, vmax=limit)
    axes[3].set_title(f"error, % of max true (||error|| / ||true|| = {100 * rel:.2f}%)", fontsize=9)
    fig.colorbar(im, ax=axes[3], fraction=0.046)
    if std is not None:
        within = float(np.mean(np.abs(fitted - true) <= 2.0 * std))
        im = _image(axes[4], std, side, cmap="magma")
        axes[4].set_title(f"one standard deviation (m^2/s)\ntruth within 2 sigma in {100 * within:.1f}% of cells",
                          fontsize=9)
        fig.colorbar(im, ax=axes[4], fraction=0.046)
    for ax in axes:
        ax.set_xlabel("x (m)")
        ax.set_ylabel("y (m)")
    fig.tight_layout()
    atomic_write.write_figure(path, fig, dpi=90)
    plt.close(fig)
    return path


def plot_readings(path: pathlib.Path, times: np.ndarray, observed: np.ndarray, fitted: np.ndarray,
                  cells: np.ndarray, shown: int = 6) -> pathlib.Path:
    """readings.png: ``shown`` sensors' observed readings (dots) and the fitted field's (lines) over time (K), each
    labelled in a legend beside the axes."""
    pick = np.unique(np.linspace(0, observed.shape[1] - 1, min(shown, observed.shape[1])).round().astype(int))
    fig, ax = plt.subplots(figsize=(10, 4.2))
    for n, s in enumerate(pick):
        colour = f"C{n % 10}"
        label = f"cell {tuple(int(v) for v in cells[s])}"
        ax.plot(times, observed[:, s], "o", color=colour, ms=4, label=f"{label} observed")
        ax.plot(times, fitted[:, s], "-", color=colour, lw=1.2, label=f"{label} fitted")
    ax.set_xlabel("time (s)")
    ax.set_ylabel("temperature (K)")
    ax.set_title("sensor readings: observed (dots) and simulated with the recovered field (lines)")
    legend_beside(ax, len(ax.lines))
    ax.grid(True, alpha=0.3)
    fig.tight_layout()   # counts the legend beside: the axes narrow to make room
    atomic_write.write_figure(path, fig, dpi=100)
    plt.close(fig)
    return path
