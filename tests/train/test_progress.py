"""sopt.train.progress.training_bar: a tqdm TrainingBar showing the TrainingRate when a bar is shown, else a
HiddenBar that takes the same calls and prints nothing."""

from __future__ import annotations

from sopt.train.progress import HiddenBar, TrainingRate, training_bar


def test_a_shown_bar_is_a_training_bar_counting_from_initial_with_the_rate() -> None:
    from sopt.train.progress import TrainingBar   # loads sopt.train.progress_bar (tqdm) on first use
    from sopt.train.progress_bar import TrainingBar as defined

    rate = TrainingRate(clock=lambda: 0.0, compile_clock=lambda: 0.0)
    bar = training_bar(100, 40, rate, shown=True)
    try:
        assert TrainingBar is defined and type(bar) is TrainingBar
        assert (bar.total, bar.n, bar.training_rate) == (100, 40, rate)
        bar.update(2)
        assert bar.n == 42
    finally:
        bar.close()


def test_a_hidden_bar_takes_the_trainers_calls_and_prints_nothing(capsys) -> None:
    rate = TrainingRate()
    bar = training_bar(100, 40, rate, shown=False)
    assert type(bar) is HiddenBar and bar.training_rate is rate
    bar.update(1)
    bar.set_postfix({"loss": "0.5"}, refresh=False)
    bar.close()
    assert capsys.readouterr() == ("", "")
