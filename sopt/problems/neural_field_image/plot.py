"""Training curves as a PNG drawn with numpy and Pillow (no matplotlib): loss on a log scale, and PSNR."""

from __future__ import annotations

import math
import os
from typing import Any, Sequence

import numpy as np
from PIL import Image, ImageDraw, ImageFont

_PANEL = (420, 300)             # width, height of one chart in pixels
_MARGIN = (58, 16, 16, 36)      # left, top, right, bottom, around the plotting area
_INK, _GRID, _LINE = (40, 40, 40), (225, 225, 225), (31, 119, 180)


def _nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """About ``count`` round tick values (1, 2 or 5 times a power of ten apart), the first <= low, the last >= high."""
    if high <= low:
        high = low + 1.0
    raw = (high - low) / count
    power = 10.0 ** math.floor(math.log10(raw))
    step = min((m * power for m in (1, 2, 5, 10) if m * power >= raw), default=10 * power)
    start, stop = math.floor(low / step + 1e-9), math.ceil(high / step - 1e-9)
    return [k * step for k in range(start, stop + 1)]


def _chart(draw: ImageDraw.ImageDraw, origin: tuple[int, int], xs: Sequence[float], ys: Sequence[float],
           title: str, log_y: bool, font: Any) -> None:
    left, top = origin[0] + _MARGIN[0], origin[1] + _MARGIN[1] + 12
    right, bottom = origin[0] + _PANEL[0] - _MARGIN[2], origin[1] + _PANEL[1] - _MARGIN[3]
    draw.text((left, origin[1] + 4), title, fill=_INK, font=font)
    x = np.asarray(xs, np.float64)
    y = np.asarray(ys, np.float64)
    keep = np.isfinite(y) & (y > 0 if log_y else True)
    x, y = x[keep], y[keep]
    if x.size == 0:
        draw.text((left + 10, (top + bottom) // 2), "no data", fill=_INK, font=font)
        return
    v = np.log10(y) if log_y else y
    x_lo, x_hi = float(x.min()), float(x.max()) if x.max() > x.min() else float(x.min()) + 1.0
    if log_y:
        v_lo, v_hi = math.floor(v.min()), math.ceil(v.max())
        v_hi = v_hi if v_hi > v_lo else v_lo + 1
        y_ticks = [float(k) for k in range(int(v_lo), int(v_hi) + 1)]
    else:
        pad = 0.05 * (v.max() - v.min() or 1.0)
        y_ticks = _nice_ticks(float(v.min() - pad), float(v.max() + pad))
        v_lo, v_hi = y_ticks[0], y_ticks[-1]

    def px(xv: float, vv: float) -> tuple[float, float]:
        return (left + (xv - x_lo) / (x_hi - x_lo) * (right - left),
                bottom - (vv - v_lo) / (v_hi - v_lo) * (bottom - top))

    for t in y_ticks:
        _, yy = px(x_lo, t)
        draw.line([(left, yy), (right, yy)], fill=_GRID)
        label = f"1e{int(t)}" if log_y else f"{t:g}"
        draw.text((left - 6 - draw.textlength(label, font=font), yy - 6), label, fill=_INK, font=font)
    for t in _nice_ticks(x_lo, x_hi):
        xx, _ = px(t, v_lo)
        if left - 1 <= xx <= right + 1:
            draw.line([(xx, bottom), (xx, bottom + 4)], fill=_INK)
            label = f"{t:g}"
            draw.text((xx - draw.textlength(label, font=font) / 2, bottom + 6), label, fill=_INK, font=font)
    draw.rectangle([left, top, right, bottom], outline=_INK)
    points = [px(a, b) for a, b in zip(x, v)]
    if len(points) == 1:
        draw.ellipse([points[0][0] - 2, points[0][1] - 2, points[0][0] + 2, points[0][1] + 2], fill=_LINE)
    else:
        draw.line(points, fill=_LINE, width=2)
    draw.text(((left + right) / 2 - 12, bottom + 20), "step", fill=_INK, font=font)


def plot_curves(history: Sequence[dict[str, Any]], path: str | os.PathLike[str]) -> None:
    """Write the loss (log scale) and PSNR (dB) of ``history`` (the Trainer's metrics records) side by side."""
    loss = [(m["step"], m["loss"]) for m in history if m.get("loss") is not None]
    psnr = [(m["step"], m["psnr"]) for m in history if m.get("psnr") is not None]
    image = Image.new("RGB", (2 * _PANEL[0], _PANEL[1]), "white")
    draw = ImageDraw.Draw(image)
    font = ImageFont.load_default()
    _chart(draw, (0, 0), [s for s, _ in loss], [v for _, v in loss], "training loss (batch)", True, font)
    _chart(draw, (_PANEL[0], 0), [s for s, _ in psnr], [v for _, v in psnr], "PSNR of the full image (dB)", False,
           font)
    image.save(path, format="PNG")
