"""Pictures of neural_controller: the gait as a filmstrip (PNG) and an animation (GIF), and the training curve."""

from __future__ import annotations

import io
import os
from typing import Any, Sequence

import matplotlib

matplotlib.use("Agg")   # files only, no display
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.collections import LineCollection  # noqa: E402

from sopt.utils import atomic_write  # noqa: E402
from sopt.experiments.report_plots import legend_beside  # noqa: E402
from problems.neural_controller.robot import Robot  # noqa: E402


def _draw_robot(ax: Any, robot: Robot, x: np.ndarray, alpha: float, colour: Any) -> None:
    """The springs of ``robot`` at positions ``x`` (N, 2): passive ones thin in ``colour``, actuated ones thick
    and red."""
    actuated = np.zeros(len(robot.springs), bool)
    actuated[robot.actuators] = True
    segments = x[robot.springs]                                    # (S, 2 ends, 2)
    ax.add_collection(LineCollection(segments[~actuated], colors=[colour], linewidths=1.0, alpha=alpha))
    ax.add_collection(LineCollection(segments[actuated], colors=["tab:red"], linewidths=2.2, alpha=alpha))
    ax.plot(x[:, 0], x[:, 1], "o", ms=2.5, color=colour, alpha=alpha)


def _ground(ax: Any, ground: float, lo: float, hi: float) -> None:
    """The ground line with a tick every 0.05 m (the ticks make the robot's motion visible frame to frame)."""
    ax.axhline(ground, color="k", lw=1.0)
    for x in np.arange(np.floor(lo / 0.05) * 0.05, hi + 0.05, 0.05):
        ax.plot([x, x - 0.01], [ground, ground - 0.012], color="0.4", lw=0.7)


def plot_filmstrip(path: str | os.PathLike[str], robot: Robot, ground: float, times: Sequence[float],
                   walks: Sequence[tuple[str, np.ndarray]]) -> None:
    """Write ``path`` (PNG): one row per walk ((title, frames (F, N, 2) m)), one panel per frame following the
    robot (a window of fixed width about its centre), with the ground ticked every 0.05 m, the starting centre
    dotted and each panel titled with its time (``times``, s) and the centre's displacement (m)."""
    n_frames = max(len(f) for _, f in walks)
    start = [float(f[0][:, 0].mean()) for _, f in walks]
    width = float(np.ptp(walks[0][1][0][:, 0])) + 0.12
    top = max(float(f[:, :, 1].max()) for _, f in walks) + 0.02
    height = top - (ground - 0.02)
    fig, axes = plt.subplots(len(walks), n_frames, figsize=(1.6 * n_frames, 0.6 + 1.6 * len(walks) * height / width),
                             squeeze=False)
    for row, ((title, frames), x_start) in enumerate(zip(walks, start)):
        for k in range(n_frames):
            ax = axes[row, k]
            ax.set_axis_off()
            if k >= len(frames):
                continue
            x = frames[k]
            centre = float(x[:, 0].mean())
            lo, hi = centre - width / 2, centre + width / 2
            _draw_robot(ax, robot, x, alpha=1.0, colour="tab:blue")
            _ground(ax, ground, lo, hi)
            ax.axvline(x_start, color="0.5", lw=0.8, ls=":")
            ax.set_xlim(lo, hi)
            ax.set_ylim(ground - 0.02, top)
            ax.set_aspect("equal")
            ax.set_title(f"{times[k]:.2f} s, {centre - x_start:+.3f} m", fontsize=7)
        axes[row, 0].text(-0.05, 0.5, title, transform=axes[row, 0].transAxes, rotation=90, ha="right",
                          va="center", fontsize=8)
    fig.suptitle("gait (dotted: the centre at the start; red: actuated springs; ground ticks every 0.05 m)",
                 fontsize=8)
    fig.tight_layout()
    atomic_write.write_figure(path, fig, dpi=110)
    plt.close(fig)


def write_gif(path: str | os.PathLike[str], robot: Robot, ground: float, frames: np.ndarray,
              times: Sequence[float]) -> None:
    """Write ``path`` (animated GIF, Pillow, looping): the robot at each of ``frames`` ((F, N, 2) m) at ``times``
    (s), in one fixed view covering the whole walk."""
    from PIL import Image
    lo, hi = float(frames[:, :, 0].min()) - 0.05, float(frames[:, :, 0].max()) + 0.05
    top = float(frames[:, :, 1].max()) + 0.03
    images = []
    for x, t in zip(frames, times):
        fig, ax = plt.subplots(figsize=(6.0, 6.0 * (top - ground + 0.03) / (hi - lo) + 0.6))
        _draw_robot(ax, robot, x, alpha=1.0, colour="tab:blue")
        _ground(ax, ground, lo, hi)
        ax.set_xlim(lo, hi)
        ax.set_ylim(ground - 0.02, top + 0.01)
        ax.set_aspect("equal")
        ax.set_title(f"t = {t:.2f} s", fontsize=9)
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png", dpi=70)
        plt.close(fig)
        buffer.seek(0)
        images.append(Image.open(buffer).convert("P", palette=Image.Palette.ADAPTIVE))
    # real time, but at least 50 ms a frame (GIF viewers round shorter delays up or ignore them)
    duration = max(50, int(round(1000 * (times[1] - times[0])))) if len(times) > 1 else 100
    atomic_write.write_image(path, images[0], save_all=True, append_images=images[1:], duration=duration, loop=0)


def plot_distance(path: str | os.PathLike[str], history: list[dict[str, Any]], before: float,
                  title: str = "") -> Any:
    """Write ``path`` (PNG): -loss over the training steps (m: the distance walked less the posture term), linear
    scale, with the untrained controller's distance dashed, both labelled in a legend beside the axes; returns the figure."""
    steps = [0] + [m["step"] for m in history if m.get("loss") is not None]
    distance = [before] + [-m["loss"] for m in history if m.get("loss") is not None]
    fig, ax = plt.subplots(figsize=(5.5, 3.4))
    ax.plot(steps, distance, "o-", ms=3, label="controller (training)")
    ax.axhline(before, color="k", ls="--", lw=1.0, label="untrained")
    ax.set_xlabel("training step")
    ax.set_ylabel("-loss (m): distance less posture term")
    ax.set_title(title or "distance walked")
    ax.grid(True, alpha=0.3)
    legend_beside(ax, 2)
    fig.tight_layout()   # counts the legend beside: the axes narrow to make room
    atomic_write.write_figure(path, fig, dpi=100)
    plt.close(fig)
    return fig
