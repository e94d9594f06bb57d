"""A run directory is the user's, not an attacker's: no file sopt writes follows a symbolic link planted there.

Every whole-file write goes through :mod:`sopt.utils.atomic_write` (a fresh mkstemp temporary file, fsync, os.replace:
a link at the name is replaced, a link at a temporary name is never opened) and metrics.jsonl is appended with
O_NOFOLLOW. Here: the writer's own cases (a link at the target, links at predictable temporary names, a failure
mid-write), the callers that wrote directly (pictures, report plots, the metrics log), and ``sopt resume`` and
``sopt report`` on folders holding a link for every name they write.
"""

from __future__ import annotations

import errno
import json
import os
import pathlib
import tempfile

import numpy as np
import pytest

from sopt.utils import atomic_write
from sopt.config.files import write_atomic
from sopt.data.image import save_image
from sopt.train import Callback, JSONLLogger
from tests.experiments.test_cli import RUN, sopt_main


def outside_files(folder: pathlib.Path, names: list[str]) -> dict[pathlib.Path, bytes]:
    """A file outside the run for each of ``names``, with known contents: what a planted link points to."""
    folder.mkdir(parents=True, exist_ok=True)
    files = {}
    for i, name in enumerate(names):
        path = folder / f"victim-{i}"
        path.write_bytes(f"precious {name}\n".encode())
        files[path] = path.read_bytes()
    return files


def unchanged(files: dict[pathlib.Path, bytes]) -> list[str]:
    """The outside files whose contents are not what they were (should be none)."""
    return [str(p) for p, data in files.items() if p.read_bytes() != data]


def temp_names(name: str) -> list[str]:
    """The temporary names a writer might use for ``name``: the predictable ``.<name>.<pid>.tmp`` of this process
    (what write_atomic used, opened with "w": it followed a link planted there)."""
    return [f".{name}.{os.getpid()}.tmp"]


# -- the atomic writer ----------------------------------------------------------------------------------------------
def test_a_link_at_a_temporary_name_is_never_written_through(tmp_path, monkeypatch):
    run = tmp_path / "run"
    run.mkdir()
    names = [*temp_names("summary.json"), ".summary.json.planted0.tmp"]
    victims = outside_files(tmp_path / "outside", names)
    for name, victim in zip(names, victims):
        (run / name).symlink_to(victim)
    # mkstemp's first candidate is the planted name: O_EXCL refuses it and it takes the next one
    candidates = iter(["planted0", "fresh001"])
    monkeypatch.setattr(tempfile, "_get_candidate_names", lambda: candidates)
    write_atomic(run / "summary.json", '{"status": "running"}\n')
    assert unchanged(victims) == []
    assert (run / "summary.json").read_text(encoding="utf-8") == '{"status": "running"}\n'
    assert not (run / "summary.json").is_symlink()


def test_a_failed_write_leaves_no_temporary_file_and_the_old_file_whole(tmp_path, monkeypatch):
    path = tmp_path / "summary.json"
    write_atomic(path, "old\n")

    def disk_full(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(os, "fsync", disk_full)
    with pytest.raises(OSError, match="No space left"):
        write_atomic(path, "new\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["summary.json"]   # no .tmp left behind
    assert path.read_text(encoding="utf-8") == "old\n"


def test_a_figure_that_fails_while_being_written_leaves_the_old_picture(tmp_path, monkeypatch):
    from matplotlib.figure import Figure

    from sopt.experiments import report_plots
    path = tmp_path / "curves.png"
    path.write_bytes(b"the old picture")
    real_savefig = Figure.savefig

    def savefig_then_disk_full(self: Figure, fname, **kwargs) -> None:   # the bytes go out, then the disk fills
        real_savefig(self, fname, **kwargs)
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(Figure, "savefig", savefig_then_disk_full)
    figure = Figure()
    figure.add_subplot().plot([0, 1], [1, 0])
    with pytest.raises(OSError, match="No space left"):
        report_plots.save(figure, path)
    assert path.read_bytes() == b"the old picture"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["curves.png"]


def test_pictures_replace_a_link_rather_than_follow_it(tmp_path):
    from matplotlib.figure import Figure

    from sopt.experiments import report_plots
    names = ["target.png", "metric_vs_seed.png"]
    victims = outside_files(tmp_path / "outside", names)
    run = tmp_path / "run"
    run.mkdir()
    for name, victim in zip(names, victims):
        (run / name).symlink_to(victim)
    save_image(run / "target.png", np.full((4, 4, 3), 0.5))
    figure = Figure()
    figure.add_subplot().plot([0, 1], [1, 0])
    report_plots.save(figure, run / "metric_vs_seed.png")
    assert unchanged(victims) == []
    for name in names:
        assert not (run / name).is_symlink() and (run / name).read_bytes().startswith(b"\x89PNG")


def test_the_metrics_log_never_appends_through_a_link(tmp_path):
    victims = outside_files(tmp_path / "outside", ["metrics.jsonl", "metrics.jsonl (new run)"])
    (old_victim, _), (new_victim, _) = victims.items()
    resumed, fresh = tmp_path / "resumed", tmp_path / "fresh"
    resumed.mkdir()
    fresh.mkdir()
    (resumed / "metrics.jsonl").symlink_to(old_victim)
    (fresh / "metrics.jsonl").symlink_to(new_victim)
    appending = JSONLLogger(resumed / "metrics.jsonl", append=True)
    appending.on_train_start(None)
    with pytest.raises(OSError, match=r"metrics\.jsonl' is a symbolic link; .*never through a link"):
        appending.on_metrics(None, {"step": 1, "loss": 0.5})
    starting = JSONLLogger(fresh / "metrics.jsonl")   # a new log: the link is replaced by an empty file
    starting.on_train_start(None)
    starting.on_metrics(None, {"step": 1, "loss": 0.5})
    assert unchanged(victims) == []
    assert not (fresh / "metrics.jsonl").is_symlink()
    assert json.loads((fresh / "metrics.jsonl").read_text(encoding="utf-8")) == {"step": 1, "loss": 0.5}


# -- sopt resume and sopt report on a run directory full of links -------------------------------------------------------
class _StopAt(Callback):
    """Asks the trainer to stop at step ``at``, as SIGTERM does: the run ends ``interrupted`` with a checkpoint."""

    def __init__(self, at: int) -> None:
        super().__init__(every=at)

    def on_metrics(self, trainer, metrics) -> None:
        trainer.stop("interrupted by the test")


# every file sopt writes into a fit_projectile run (a finished run's folder, and error.txt of a failed one); all but
# config.toml and .lock get a link (resume reads config.toml and never writes it; .lock is opened with O_NOFOLLOW by
# the run's lock, so a link there is refused, not followed)
RUN_FILES = ["config.toml", ".config.json", ".lock", "overrides.txt", "env.json", "inputs.json", "summary.json",
             "metrics.jsonl", "checkpoint.npz", "result.json", "curves.png", "trajectories.png", "error.txt"]
LINKED = [name for f in RUN_FILES for name in [f, *temp_names(f)] if name not in ("config.toml", ".lock")]
REPORT_FILES = ["report.md", "report.csv", "curves.png"]


def test_resume_and_report_write_no_file_through_a_planted_link(tmp_path):
    from sopt.experiments import runner
    from sopt.experiments.cli import load_run_config
    from sopt.experiments.run_dir import claim_out_dir
    cls, config = load_run_config(None, "fit_projectile", RUN)
    run = claim_out_dir(tmp_path / "run")
    outcome = runner.start(cls(config), run, RUN, progress=False, callbacks=[_StopAt(10)])
    assert outcome.status == "interrupted"

    # each file the run has moves outside and is linked back (resume reads them through the links); each file it
    # has not written yet, and each predictable temporary name, links to an outside file of known contents
    outside = tmp_path / "outside"
    victims = outside_files(outside, LINKED)
    for name, victim in zip(LINKED, victims):
        if (run / name).exists():
            victim.write_bytes((run / name).read_bytes())
            victims[victim] = victim.read_bytes()
            (run / name).unlink()
        (run / name).symlink_to(victim)

    code, stdout, stderr = sopt_main(["resume", str(run), "--no-progress"])
    assert code == 0, stderr
    assert unchanged(victims) == []
    written = ["summary.json", "metrics.jsonl", "checkpoint.npz", "result.json", "curves.png", "trajectories.png"]
    for name in written:
        assert (run / name).is_file() and not (run / name).is_symlink(), name
    assert json.loads((run / "summary.json").read_text(encoding="utf-8"))["status"] == "finished"
    # the list of planted names is complete: resume wrote no regular file that had no link planted for it
    assert {p.name for p in run.iterdir() if not p.is_symlink()} <= set(RUN_FILES)

    report = tmp_path / "report"
    report.mkdir()
    report_victims = outside_files(tmp_path / "outside-report", REPORT_FILES)
    for name, victim in zip(REPORT_FILES, report_victims):
        (report / name).symlink_to(victim)
    code, stdout, stderr = sopt_main(["report", str(run), "--out", str(report), "--force"])
    assert code == 0, stderr
    assert unchanged(report_victims) == []
    assert sorted(p.name for p in report.iterdir() if p.is_file() and not p.is_symlink()) == sorted(REPORT_FILES)
