"""fit_cloth's pictures: the observed and fitted cloth at a few observation times in 3D (cloth.png), and, for a
per-spring fit, the true and fitted stiffness of every spring family and their error (stiffness_field.png)."""

from __future__ import annotations

import pathlib

import matplotlib

matplotlib.use("Agg")   # files only, no display
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from sopt.utils import atomic_write  # noqa: E402
from problems.fit_cloth.smoothness import family_shapes  # noqa: E402

FAMILIES = ("horizontal", "vertical", "shear /", "shear \\")


def plot_cloth(path: pathlib.Path, times: np.ndarray, observed: np.ndarray, fitted: np.ndarray, x0: np.ndarray,
               springs: np.ndarray, nx: int, ny: int, shown: int = 4) -> pathlib.Path:
    """cloth.png: at ``shown`` observation times, the observed particles (dots) and the cloth simulated with the
    fitted parameters (its structural springs as a wireframe), in 3D with y (up) drawn vertical.
    ``observed``/``fitted``: (K, N, 3) m; ``times``: (K,) s."""
    k = len(times)
    picks = np.unique(np.linspace(0, k - 1, min(shown, k)).round().astype(int))
    structural = springs[: (nx - 1) * ny + nx * (ny - 1)]   # SpringSystem.cloth lists them first
    everything = np.concatenate([observed.reshape(-1, 3), fitted.reshape(-1, 3), x0.reshape(-1, 3)])
    low, high = everything.min(axis=0), everything.max(axis=0)
    fig = plt.figure(figsize=(4.2 * len(picks), 4.4))
    for n, i in enumerate(picks):
        ax = fig.add_subplot(1, len(picks), n + 1, projection="3d")
        for a, b in structural:
            seg = fitted[i, [a, b]]
            ax.plot(seg[:, 0], seg[:, 2], seg[:, 1], color="C1", lw=0.8)
        ax.scatter(observed[i, :, 0], observed[i, :, 2], observed[i, :, 1], color="C0", s=8, depthshade=False)
        ax.set_xlim(low[0], high[0])
        ax.set_ylim(low[2], high[2])
        ax.set_zlim(low[1], high[1])
        ax.set_xlabel("x (m)", fontsize=7)
        ax.set_ylabel("z (m)", fontsize=7)
        ax.set_zlabel("y, up (m)", fontsize=7)
        ax.tick_params(labelsize=6)
        ax.view_init(elev=15, azim=-60)
        ax.set_title(f"t = {times[i]:.3g} s", fontsize=9)
    fig.suptitle("cloth: observed particles (blue dots), fitted cloth (orange wireframe)")
    fig.tight_layout()
    atomic_write.write_figure(path, fig, dpi=90)
    plt.close(fig)
    return path


def _family_grids(values: np.ndarray, nx: int, ny: int) -> list[np.ndarray]:
    grids, offset = [], 0
    for rows, cols in family_shapes(nx, ny):
        grids.append(values[offset:offset + rows * cols].reshape(rows, cols))
        offset += rows * cols
    return grids


def plot_stiffness_field(path: pathlib.Path, x0: np.ndarray, springs: np.ndarray, true: np.ndarray,
                         fitted: np.ndarray) -> pathlib.Path:
    """stiffness_field.png: per spring family (columns; each a grid of springs, row 0 at the cloth's free edge), the
    true and fitted stiffness (N/m, one colour scale) and the error (fitted - true) / true in percent."""
    nx = int(np.unique(np.round(x0[:, 0], 6)).size)
    ny = x0.shape[0] // nx
    rel = 100.0 * (fitted - true) / true
    low, high = float(min(true.min(), fitted.min())), float(max(true.max(), fitted.max()))
    limit = max(float(np.abs(rel).max()), 1e-6)
    rows = (("true stiffness (N/m)", _family_grids(true, nx, ny), dict(cmap="viridis", vmin=low, vmax=high)),
            ("fitted stiffness (N/m)", _family_grids(fitted, nx, ny), dict(cmap="viridis", vmin=low, vmax=high)),
            ("error (%)", _family_grids(rel, nx, ny), dict(cmap="RdBu_r", vmin=-limit, vmax=limit)))
    fig, axes = plt.subplots(3, 4, figsize=(13, 8.5), squeeze=False)
    for r, (label, grids, style) in enumerate(rows):
        for c, grid in enumerate(grids):
            ax = axes[r, c]
            im = ax.imshow(grid, origin="lower", interpolation="nearest", **style)
            ax.set_title(f"{FAMILIES[c]}: {label}", fontsize=8)
            ax.set_xticks([])
            ax.set_yticks([])
            if c == 3:
                fig.colorbar(im, ax=axes[r, :].tolist(), fraction=0.02)
    field_error = float(np.linalg.norm(fitted - true) / np.linalg.norm(true))
    fig.suptitle(f"per-spring stiffness: ||fitted - true|| / ||true|| = {100 * field_error:.3f}% "
                 f"({true.size} springs; top row of each grid = the pinned edge)")
    atomic_write.write_figure(path, fig, dpi=90)
    plt.close(fig)
    return path
