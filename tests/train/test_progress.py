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


def test_process_seconds_count_from_the_process_start_not_the_import() -> None:
    """Time spent before sopt.train.progress is imported (interpreter start-up, imports, building a problem) counts."""
    import subprocess
    import sys
    code = ("import time\ntime.sleep(1.0)\nfrom sopt.train.progress import process_seconds\n"
            "print(f'{process_seconds():.3f}')\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert 1.0 <= float(r.stdout) < 120.0, r.stdout


def test_sopt_runs_seconds_here_are_the_commands_not_the_trainings(monkeypatch, capsys) -> None:
    """``finished N steps (S s here)``: S from the process's start (250 s ago here), not the run's 12 s of training."""
    import pathlib
    import time

    from sopt.experiments import cli
    from sopt.experiments.runner import RunOutcome
    from sopt.train import progress

    monkeypatch.setattr(progress, "_PROCESS_START", time.perf_counter() - 250.0)
    outcome = RunOutcome(pathlib.Path("runs/x"), "finished", 300, {"loss": 0.5, "time_s": 12.0}, seconds=12.0)
    assert cli._print_outcome(outcome) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith("finished 300 steps (250.") and line.endswith(" s here): loss 0.5"), line
