"""Pictures of nbody_masses: observed vs fitted orbits, and the mass of each body with its error."""

from __future__ import annotations

import os

import matplotlib

matplotlib.use("Agg")   # files only, no display
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from sopt import atomic_write  # noqa: E402

def plot_orbits(path: str | os.PathLike[str], observed: np.ndarray, fitted: np.ndarray, initial: np.ndarray) -> None:
    """Write ``path`` (PNG): per body, the observed positions (dots, (K, N, 2)), the trajectory of the fitted
    masses (solid, (T + 1, N, 2)) and that of the initial guess (dotted), each body in its own colour."""
    fig, ax = plt.subplots(figsize=(6.4, 6.0))
    colours = plt.get_cmap("tab10")
    for i in range(observed.shape[1]):
        c = colours(i % 10)
        ax.plot(initial[:, i, 0], initial[:, i, 1], ls=":", lw=1.0, color=c, alpha=0.7)
        ax.plot(fitted[:, i, 0], fitted[:, i, 1], lw=1.4, color=c)
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
    ax.legend(loc="best", fontsize=8)
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    atomic_write.write_figure(path, fig, dpi=100)
    plt.close(fig)


def plot_masses(path: str | os.PathLike[str], true: np.ndarray, fitted: np.ndarray, std: np.ndarray | None) -> None:
    """Write ``path`` (PNG): true and fitted mass per body (bars; fitted with 2-sigma error bars when ``std`` is
    given) and below it each body's relative error |fitted - true| / true (log scale, the 1% line dashed; the
    2-sigma level as a black tick when ``std`` is given)."""
    n = true.size
    idx = np.arange(n)
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(max(5.0, 1.0 + 0.8 * n), 6.0), sharex=True,
                                      gridspec_kw={"height_ratios": [2, 1]})
    width = 0.38
    top.bar(idx - width / 2, true, width, color="0.7", label="true")
    top.bar(idx + width / 2, fitted, width, color="tab:blue", label="fitted",
            yerr=None if std is None else 2 * std, capsize=4, ecolor="k")
    top.set_ylabel("mass (mass units)")
    top.set_title("mass per body" + (" (error bars: 2 sigma)" if std is not None else ""))
    top.legend(fontsize=8)
    top.grid(True, axis="y", alpha=0.3)
    err = np.abs(fitted - true) / true
    bottom.bar(idx, np.maximum(err, 1e-8), 0.5, color="tab:orange", label="|fitted - true| / true")
    if std is not None:
        bottom.plot(idx, 2 * std / true, "k_", ms=18, mew=2, label="2 sigma / true (noise)")
    bottom.axhline(0.01, color="k", ls="--", lw=1.0, label="1%")
    bottom.set_yscale("log")
    bottom.set_ylabel("relative error")
    bottom.set_xlabel("body")
    bottom.set_xticks(idx)
    bottom.legend(fontsize=8)
    bottom.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    atomic_write.write_figure(path, fig, dpi=100)
    plt.close(fig)
