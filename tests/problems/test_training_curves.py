"""The neural-field problems' shared training-curves picture, checked on the data it draws: which records a panel
keeps (numbers only; finite; > 0 on a log axis), the axis scales, the markers rule and the "no data" panel."""

from __future__ import annotations

import math

import numpy as np
from PIL import Image

from problems.training_curves import metric_series, plot_training_curves, training_curves_figure

HISTORY = [{"step": 1, "loss": 0.5, "psnr": 10.0}, {"step": 2, "loss": 0.0, "psnr": "n/a"},
           {"step": 3, "loss": math.nan, "psnr": -1.0}, {"step": 4, "loss": 0.125}, {"step": 5, "event": "resume"}]
PANELS = (("loss", "training loss", True), ("psnr", "PSNR (dB)", False), ("iou", "IoU", False))


def test_a_series_keeps_the_finite_numbers_and_on_a_log_axis_the_positive_ones():
    steps, values = metric_series(HISTORY, "loss", positive=True)
    np.testing.assert_array_equal(steps, [1.0, 4.0])
    np.testing.assert_array_equal(values, [0.5, 0.125])
    steps, values = metric_series(HISTORY, "loss", positive=False)
    np.testing.assert_array_equal(steps, [1.0, 2.0, 4.0])
    np.testing.assert_array_equal(values, [0.5, 0.0, 0.125])
    steps, values = metric_series(HISTORY, "psnr", positive=False)   # the string is no number
    np.testing.assert_array_equal(steps, [1.0, 3.0])
    np.testing.assert_array_equal(values, [10.0, -1.0])


def test_each_panel_draws_its_key_and_one_without_data_says_so(tmp_path):
    figure = plot_training_curves(tmp_path / "curves.png", HISTORY, PANELS, (9.0, 3.0), markers_below=3)
    assert Image.open(tmp_path / "curves.png").size == (900, 300)
    loss, psnr, iou = figure.axes
    assert [ax.get_title() for ax in figure.axes] == ["training loss", "PSNR (dB)", "IoU"]
    assert (loss.get_yscale(), psnr.get_yscale()) == ("log", "linear")
    np.testing.assert_array_equal(loss.lines[0].get_xdata(), [1.0, 4.0])
    np.testing.assert_array_equal(psnr.lines[0].get_ydata(), [10.0, -1.0])
    assert [line.get_label() for line in loss.lines + psnr.lines] == ["loss", "psnr"]
    assert loss.lines[0].get_marker() == "o"   # 2 points < markers_below
    assert not iou.lines and [t.get_text() for t in iou.texts] == ["no data"]
    many = [{"step": s, "loss": 1.0 / s} for s in range(1, 4)]
    assert training_curves_figure(many, PANELS[:1], (4.0, 3.0), markers_below=3).axes[0].lines[0].get_marker() \
        in ("None", "", None)
