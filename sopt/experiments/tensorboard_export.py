"""TensorBoard event files of runs (``sopt report --tensorboard``), for people who watch runs in TensorBoard.

Each run's metrics.jsonl becomes one event file under ``<out>/<run name>/``: every number of every metrics record
a scalar at its step (a list of numbers, such as a per-start loss, one scalar per entry named ``<name>/<index>``;
``step`` itself and nulls left out). ``tensorboard --logdir <out>`` then shows the runs side by side. Written with
tensorboardX, an optional dependency (``pip install sopt[tensorboard]``).
"""

from __future__ import annotations

import pathlib
from typing import Any, Iterator, Sequence

from sopt.experiments.run_records import RunRecord

INSTALL_HINT = "pip install 'sopt[tensorboard]' (or tensorboardX>=2.6)"
MAX_LIST_SCALARS = 16   # a longer list in a record (a field, a weight vector) is no scalar series: left out


class TensorBoardMissing(RuntimeError):
    """tensorboardX is not installed; the message is one line saying how to install it."""


def check_available() -> None:
    """Raises TensorBoardMissing unless tensorboardX can be imported (call before writing anything)."""
    try:
        import tensorboardX  # noqa: F401
    except ImportError as exc:
        raise TensorBoardMissing(f"--tensorboard needs tensorboardX, which is not installed: {INSTALL_HINT}") \
            from exc


def scalars(record: dict[str, Any]) -> Iterator[tuple[str, float]]:
    """(tag, value) of each number in a metrics record: scalars by name, short lists as ``name/index``; ``step``,
    ``event``, strings, booleans and nulls left out."""
    for name, value in record.items():
        if name in ("step", "event"):
            continue
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            yield name, float(value)
        elif isinstance(value, list) and len(value) <= MAX_LIST_SCALARS:
            for index, item in enumerate(value):
                if isinstance(item, (int, float)) and not isinstance(item, bool):
                    yield f"{name}/{index}", float(item)


def write_run_events(run: RunRecord, logdir: pathlib.Path) -> int:
    """Writes ``run``'s metrics records as scalars into an event file in ``logdir``; returns how many scalars
    (0, and no file, when the run has no metrics.jsonl records). Non-finite values are written as they are."""
    history = [record for record in run.history() if isinstance(record.get("step"), int)]
    if not history:
        return 0
    from tensorboardX import SummaryWriter

    count = 0
    logdir.mkdir(parents=True, exist_ok=True)
    writer = SummaryWriter(logdir=str(logdir), flush_secs=3600)
    try:
        for record in history:
            for tag, value in scalars(record):
                writer.add_scalar(tag, value, global_step=record["step"])
                count += 1
    finally:
        writer.close()
    return count


def write_events(runs: Sequence[RunRecord], out: pathlib.Path) -> dict[str, int]:
    """Event files of every run under ``out/<run name>/``; returns run name -> scalars written (runs with none
    are left out)."""
    check_available()
    written = {}
    for run in runs:
        count = write_run_events(run, out / run.name)
        if count:
            written[run.name] = count
    return written
