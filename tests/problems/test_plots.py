"""The problems' pictures, checked on the data they draw (not pixels): neural_field_image's truth | prediction |
error figure with the PSNR in its title, nbody_masses' masses and orbits and the fits' shared curves with every
line labelled and each legend beside its axes, outside the data."""

from __future__ import annotations

import numpy as np
import pytest

from sopt.data import generated_image, psnr
from problems.fitting.plot import history_figure
from problems.nbody_masses.plot import masses_figure, orbits_figure, plot_masses
from problems.neural_field_image.plot import comparison_figure, plot_comparison


def legends_outside(figure) -> list[bool]:
    """Per axes with a legend: whether the legend lies right of the axes (no data under it) inside the figure."""
    figure.canvas.draw()
    out = []
    for axes in figure.axes:
        legend = axes.get_legend()
        if legend is not None:
            box, drawn = legend.get_window_extent(), axes.get_window_extent()
            out.append(box.x0 >= drawn.x1 and box.x1 <= figure.bbox.x1)
    return out


def test_neural_field_comparison_is_truth_prediction_error_with_the_psnr_in_the_title(tmp_path):
    truth = generated_image(16).reshape(16, 16, 3)
    prediction = np.clip(truth + np.random.default_rng(0).normal(0.0, 0.05, truth.shape), 0.0, 1.0)
    figure = plot_comparison(tmp_path / "comparison.png", truth, prediction)
    assert (tmp_path / "comparison.png").stat().st_size > 0
    panels = [axes for axes in figure.axes if axes.images]
    assert [axes.get_title() for axes in panels] == ["truth", "prediction", "error |prediction - truth|"]
    np.testing.assert_allclose(panels[0].images[0].get_array(), truth)
    np.testing.assert_allclose(panels[1].images[0].get_array(), prediction)
    np.testing.assert_allclose(panels[2].images[0].get_array(), np.abs(prediction - truth).mean(axis=-1))
    assert figure.get_suptitle() == f"PSNR {psnr(prediction.reshape(-1, 3), truth.reshape(-1, 3)):.2f} dB"
    with pytest.raises(ValueError, match=r"one shape, got \(16, 16, 3\) and \(16, 3\)"):
        comparison_figure(truth, prediction[0])


def test_nbody_masses_legends_are_beside_the_bars(tmp_path):
    true, fitted, std = np.array([1.0, 2.0, 3.0]), np.array([1.1, 1.9, 3.0]), np.array([0.1, 0.1, 0.1])
    figure = plot_masses(tmp_path / "masses.png", true, fitted, std)
    assert legends_outside(figure) == [True, True]
    top, bottom = figure.axes
    assert [t.get_text() for t in top.get_legend().get_texts()] == ["true", "fitted (2 sigma)"]
    assert [p.get_height() for p in top.patches] == pytest.approx([*true, *fitted])
    assert [t.get_text() for t in bottom.get_legend().get_texts()] == [
        "2 sigma / true (noise)", "1%", "|fitted - true| / true"]
    assert legends_outside(masses_figure(true, fitted, None)) == [True, True]


def test_nbody_orbits_label_every_body_beside_the_orbits():
    rng = np.random.default_rng(1)
    figure = orbits_figure(rng.random((5, 3, 2)), rng.random((20, 3, 2)), rng.random((20, 3, 2)))
    assert legends_outside(figure) == [True]
    texts = [t.get_text() for t in figure.axes[0].get_legend().get_texts()]
    assert texts == ["body 0", "body 1", "body 2", "observed", "fitted masses", "initial guess", "start"]


def test_fit_curves_label_every_element_start_and_truth_beside_the_panels():
    history = [{"step": s, "loss": 1.0 / (s + 1), "value/masses": [1.0 + 0.01 * s, 2.0, 3.0],
                "value/drag": [0.1, 0.2], "rel_error/field": 0.1 / (s + 1)} for s in range(0, 50, 10)]
    figure = history_figure(history, {"masses": [1.5, 2.0, 3.0], "drag": 0.15, "field": [0.0] * 100},
                            {"masses": "kg"}, title="nbody")
    loss, masses, drag, field = figure.axes[:4]
    assert [line.get_label() for line in masses.lines] == [
        "masses[0]", "masses[1]", "masses[2]", "masses[0] true", "masses[1] true", "masses[2] true"]
    np.testing.assert_allclose(masses.lines[0].get_ydata(), [1.0, 1.1, 1.2, 1.3, 1.4])
    assert masses.lines[3].get_color() == masses.lines[0].get_color()    # a body's truth in its colour
    assert [line.get_label() for line in drag.lines] == ["start 0", "start 1", "true"]
    assert [line.get_label() for line in loss.lines] == ["loss"]
    assert [line.get_label() for line in field.lines] == ["relative error"]
    assert legends_outside(figure) == [True, True]                  # the panels with more than one line


def test_a_multi_start_fits_loss_panel_draws_its_best_starts_loss():
    # fit_projectile's records: loss is the best start's (min of start_loss), loss_sum the optimised sum; the
    # panel draws the former, as the console's final loss and sopt report rank by it, and its title says so
    history = [{"step": s, "loss": min(0.5 / s, 0.3), "loss_sum": 0.5 / s + 0.9, "start_loss": [0.5 / s, 0.3, 0.6],
                "value/drag": [0.1, 0.2, 0.3]} for s in (10, 20)]
    loss = history_figure(history, {"drag": 0.15}, {}).axes[0]
    assert loss.get_title() == "loss (the best of 3 starts)"
    np.testing.assert_allclose(loss.lines[0].get_ydata(), [0.05, 0.025])
    assert history_figure([{k: v for k, v in r.items() if k != "start_loss"} for r in history],
                          {"drag": 0.15}, {}).axes[0].get_title() == "loss"


def test_neural_controller_distance_curve_is_labelled_beside(tmp_path):
    from problems.neural_controller.plot import plot_distance

    history = [{"step": 10, "loss": -0.5}, {"step": 20, "loss": -1.0}, {"step": 20, "event": "end"}]
    figure = plot_distance(tmp_path / "distance.png", history, before=0.1)
    axes = figure.axes[0]
    assert [line.get_label() for line in axes.lines] == ["controller (training)", "untrained"]
    np.testing.assert_allclose(axes.lines[0].get_ydata(), [0.1, 0.5, 1.0])
    assert legends_outside(figure) == [True]


def test_heat_readings_label_observed_and_fitted_beside(tmp_path, monkeypatch):
    from problems.heat_inverse import plot

    drawn = []
    monkeypatch.setattr(plot.atomic_write, "write_figure", lambda path, fig, **kw: drawn.append(fig))
    times = np.linspace(0.0, 1.0, 5)
    observed, fitted = np.arange(10.0).reshape(5, 2), np.arange(10.0).reshape(5, 2) + 0.5
    plot.plot_readings(tmp_path / "readings.png", times, observed, fitted, np.array([[1, 2], [3, 4]]))
    axes = drawn[0].axes[0]
    assert [line.get_label() for line in axes.lines] == [
        "cell (1, 2) observed", "cell (1, 2) fitted", "cell (3, 4) observed", "cell (3, 4) fitted"]
    np.testing.assert_allclose(axes.lines[3].get_ydata(), fitted[:, 1])
    assert legends_outside(drawn[0]) == [True]
