"""The shared picture of a fit: the loss and every parameter's value (or relative error) over the steps."""

from __future__ import annotations

import math
import os
from typing import Any

import numpy as np

from sopt import atomic_write


def _series(history: list[dict[str, Any]], key: str) -> tuple[np.ndarray, np.ndarray]:
    """(steps, values) of ``key`` over ``history``; values (steps,) for numbers, (steps, n) for lists."""
    rows = [(m["step"], m[key]) for m in history if m.get(key) is not None]
    if not rows:
        return np.zeros(0), np.zeros(0)
    steps = np.array([s for s, _ in rows], np.float64)
    values = np.array([np.atleast_1d(np.asarray(v, np.float64)) for _, v in rows])
    return steps, values


def plot_history(history: list[dict[str, Any]], true: dict[str, Any], units: dict[str, str],
                 path: str | os.PathLike[str], title: str = "") -> None:
    """Write ``path`` (PNG): the loss on a log scale, then one panel per parameter of ``true``.

    A parameter logged as ``value/<name>`` is drawn as its value(s) over the steps (one line per element, e.g. per
    start of a multi-start fit) with the true value dashed; one logged only as ``rel_error/<name>`` (a field) as its
    relative error on a log scale. ``history``: metrics records (``step``, ``loss``, ...).
    """
    import matplotlib   # imported here: a second of start-up that a config error should not wait for
    matplotlib.use("Agg")   # files only, no display
    import matplotlib.pyplot as plt

    names = list(true)
    panels = 1 + len(names)
    cols = min(panels, 3)
    rows = math.ceil(panels / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.2 * rows), squeeze=False)
    flat = axes.ravel()
    steps, loss = _series(history, "loss")
    ax = flat[0]
    if steps.size:
        ax.semilogy(steps, np.maximum(loss[:, 0], 1e-300))
    ax.set_title("loss")
    ax.set_xlabel("step")
    ax.grid(True, alpha=0.3)
    for ax, name in zip(flat[1:], names):
        unit = units.get(name, "")
        label = f"{name} ({unit})" if unit else name
        steps, values = _series(history, f"value/{name}")
        t = np.asarray(true[name], np.float64)
        if steps.size:
            ax.plot(steps, values, lw=1.2, alpha=0.9 if values.shape[1] <= 4 else 0.5)
            if t.size == 1:
                ax.axhline(float(t.reshape(-1)[0]), color="k", ls="--", lw=1.0, label="true")
            elif t.size == values.shape[1]:
                for v in t.ravel():
                    ax.axhline(float(v), color="k", ls="--", lw=0.6)
            ax.set_title(label)
        else:
            steps, err = _series(history, f"rel_error/{name}")
            if steps.size:
                ax.semilogy(steps, np.maximum(err[:, 0], 1e-300))
            ax.set_title(f"{name}: relative error")
        ax.set_xlabel("step")
        ax.grid(True, alpha=0.3)
    for ax in flat[panels:]:
        ax.axis("off")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    atomic_write.write_figure(path, fig, dpi=100)
    plt.close(fig)
