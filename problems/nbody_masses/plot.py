"""Pictures of nbody_masses: observed vs fitted orbits, and the mass of each body with its error.

Each picture is built by a ``*_figure`` function that returns the :class:`matplotlib.figure.Figure` (on the Agg
canvas: no display, no global backend state), so tests check the data drawn, and a ``plot_*`` function that writes
it. Legends sit beside the axes, never over the data.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import numpy as np

from sopt.utils import atomic_write
from sopt.experiments.report_plots import legend_beside, new_figure

if TYPE_CHECKING:
    from matplotlib.figure import Figure

DPI = 100


def orbits_figure(observed: np.ndarray, fitted: np.ndarray, initial: np.ndarray) -> "Figure":
    """Per body, the observed positions (dots, (K, N, 2)), the trajectory of the fitted masses (solid,
    (T + 1, N, 2)) and that of the initial guess (dotted), each body in its own colour and legend entry."""
    from matplotlib import colormaps

    fig = new_figure((7.6, 6.0))
    ax = fig.add_subplot()
    colours = colormaps["tab10"]
    for i in range(observed.shape[1]):
        c = colours(i % 10)
        ax.plot(initial[:, i, 0], initial[:, i, 1], ls=":", lw=1.0, color=c, alpha=0.7)
        ax.plot(fitted[:, i, 0], fitted[:, i, 1], lw=1.4, color=c, label=f"body {i}")
        ax.plot(observed[:, i, 0], observed[:, i, 1], "o", ms=3.5, mfc="none", color=c)
        ax.plot(fitted[0, i, 0], fitted[0, i, 1], "*", ms=9, color=c)
        ax.annotate(str(i), fitted[0, i], textcoords="offset points", xytext=(5, 5), color=c)
    ax.plot([], [], "o", mfc="none", color="k", label="observed")
    ax.plot([], [], "-", color="k", label="fitted masses")
    ax.plot([], [], ":", color="k", label="initial guess")
    ax.plot([], [], "*", color="k", label="start")
    ax.set_aspect("equal", adjustable="datalim")
    ax.set_xlabel("x (length units)")
    ax.set_ylabel("y (length units)")
    ax.set_title("orbits: observed vs fitted")
    legend_beside(ax, observed.shape[1] + 4)
    ax.grid(True, alpha=0.3)
    return fig


def plot_orbits(path: str | os.PathLike[str], observed: np.ndarray, fitted: np.ndarray,
                initial: np.ndarray) -> "Figure":
    """Write :func:`orbits_figure` to ``path`` (PNG); returns the figure."""
    fig = orbits_figure(observed, fitted, initial)
    atomic_write.write_figure(path, fig, dpi=DPI)
    return fig


def masses_figure(true: np.ndarray, fitted: np.ndarray, std: np.ndarray | None) -> "Figure":
    """True and fitted mass per body (bars; fitted with 2-sigma error bars when ``std`` is given) and below it
    each body's relative error |fitted - true| / true (log scale, the 1% line dashed; the 2-sigma level as a black
    tick when ``std`` is given); each panel's legend beside it."""
    n = true.size
    idx = np.arange(n)
    fig = new_figure((max(6.5, 2.5 + 0.8 * n), 6.0))
    top, bottom = fig.subplots(2, 1, sharex=True, gridspec_kw={"height_ratios": [2, 1]})
    width = 0.38
    top.bar(idx - width / 2, true, width, color="0.7", label="true")
    top.bar(idx + width / 2, fitted, width, color="tab:blue", label="fitted" + (" (2 sigma)" if std is not None
                                                                                 else ""),
            yerr=None if std is None else 2 * std, capsize=4, ecolor="k")
    top.set_ylabel("mass (mass units)")
    top.set_title("mass per body" + (" (error bars: 2 sigma)" if std is not None else ""))
    top.grid(True, axis="y", alpha=0.3)
    legend_beside(top, 2)
    err = np.abs(fitted - true) / true
    bottom.bar(idx, np.maximum(err, 1e-8), 0.5, color="tab:orange", label="|fitted - true| / true")
    if std is not None:
        bottom.plot(idx, 2 * std / true, "k_", ms=18, mew=2, label="2 sigma / true (noise)")
    bottom.axhline(0.01, color="k", ls="--", lw=1.0, label="1%")
    bottom.set_yscale("log")
    bottom.set_ylabel("relative error")
    bottom.set_xlabel("body")
    bottom.set_xticks(idx)
    bottom.grid(True, axis="y", alpha=0.3)
    legend_beside(bottom, 3)
    return fig


def plot_masses(path: str | os.PathLike[str], true: np.ndarray, fitted: np.ndarray,
                std: np.ndarray | None) -> "Figure":
    """Write :func:`masses_figure` to ``path`` (PNG); returns the figure."""
    fig = masses_figure(true, fitted, std)
    atomic_write.write_figure(path, fig, dpi=DPI)
    return fig
