"""``sopt report DIR...``: compare runs in a table (terminal, Markdown, CSV) and plots, optionally TensorBoard files.

DIR is a run directory, a sweep directory or a folder holding them (:mod:`sopt.experiments.run_records`). The
table (:mod:`sopt.experiments.report_table`) is printed and written, with the plots
(:mod:`sopt.experiments.report_plots`), into the output folder::

    <out>/report.md               the table (best run in bold) and the plots
    <out>/report.csv              the table, numbers in full, a `best` column
    <out>/curves.png              the metric (or loss) against the step, every run
    <out>/metric_vs_<key>.png     the metric that ranks against each numeric key that differs (or is swept)

One metric ranks the runs, marks the best, and is drawn: the chosen metric's last value in metrics.jsonl (where
its curve ends) when the runs log it, else its final value (:mod:`sopt.experiments.report_table`).
    <out>/tensorboard/<run>/      event files (--tensorboard)

The output folder is ``--out``, else ``<DIR>/report`` for one sweep or folder, else ``./report``. It is never
overwritten silently: an earlier report in it is replaced only with ``--force``, and a folder holding anything
else is refused. Errors (a missing DIR, no runs, an unknown metric or column, the output folder) are one line
``error: ...`` on stderr and exit status 2, before anything is written.
"""

from __future__ import annotations

import argparse
import pathlib
import shutil
import sys
from typing import Sequence

from sopt.utils import atomic_write
from sopt.experiments import report_table, tensorboard_export
from sopt.experiments.report_table import ReportTable
from sopt.experiments.run_dir import check_name
from sopt.experiments.run_records import Collection, NoRunsError, collect_runs

REPORT_FILES = ("report.md", "report.csv", "curves.png")
TENSORBOARD_FOLDER = "tensorboard"
EVENT_FILE_PREFIX = "events.out.tfevents."


class _UsageError(ValueError):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:   # one line, no usage block (the lead's CLI convention)
        raise _UsageError(f"{message} (see sopt report --help)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="sopt report",
        description="Compare runs: a table of the config keys that differ and the final metrics, the best run, "
                    "and plots (loss curves, metric against each swept key). DIR: a run directory, a sweep "
                    "directory, or a folder holding them (e.g. runs/fit_projectile).",
        epilog="Writes report.md, report.csv, curves.png and metric_vs_<key>.png into --out (default "
               "DIR/report for one sweep or folder, else ./report); an earlier report there is replaced only "
               "with --force.")
    parser.add_argument("dirs", nargs="+", metavar="DIR", help="run directories, sweep directories or folders")
    parser.add_argument("--metric", metavar="NAME", help="final metric that picks the best run and is plotted "
                                                         "(default: the sweep's metric, else loss)")
    parser.add_argument("--mode", choices=("min", "max"), help="whether the best run has the least or the "
                                                                "greatest --metric (default: the sweep's, else min)")
    parser.add_argument("--columns", metavar="A,B,...", help="comma-separated columns after run and status: "
                        "final metrics, dotted config keys, steps_done, run_time_s, error (default: the keys "
                        "that differ, the metric, loss and a few more metrics, steps_done, run_time_s)")
    parser.add_argument("--out", metavar="DIR", help="output folder (default: DIR/report for one sweep or "
                                                    "folder, else ./report)")
    parser.add_argument("--force", action="store_true", help="replace an earlier report in the output folder")
    parser.add_argument("--no-plots", action="store_true", help="write the table only")
    parser.add_argument("--tensorboard", action="store_true",
                        help="also write TensorBoard event files per run into OUT/tensorboard/<run> "
                             "(needs tensorboardX: pip install 'sopt[tensorboard]')")
    return parser


def choose_metric(collection: Collection, metric: str | None, mode: str | None) -> tuple[str, str]:
    """The metric and mode of the best run: the given ones; else the sweeps' (when they all name the same); else
    ``loss`` and ``min``. A given metric that is the sweeps' takes their mode unless ``mode`` is given."""
    sweep_choices = {(s.get("metric"), s.get("mode")) for s in collection.sweeps.values()}
    sweep_metric, sweep_mode = next(iter(sweep_choices)) if len(sweep_choices) == 1 else (None, None)
    if sweep_mode not in ("min", "max"):
        sweep_metric, sweep_mode = None, None
    chosen = metric or (sweep_metric if isinstance(sweep_metric, str) else "loss")
    if mode is None:
        mode = sweep_mode if chosen == sweep_metric else "min"
    return chosen, mode


def default_out(dirs: Sequence[str]) -> pathlib.Path:
    """``DIR/report`` when one DIR is given and it is a sweep or a folder of runs (not a run directory), else
    ``./report``."""
    if len(dirs) == 1:
        folder = pathlib.Path(dirs[0])
        is_run = any((folder / marker).is_file() for marker in ("summary.json", "config.toml"))
        if (folder / "sweep.json").is_file() or not is_run:
            return folder / "report"
    return pathlib.Path("report")


def _is_report_entry(path: pathlib.Path) -> bool:
    """A file or folder an earlier report wrote: its files, plots and event files (nothing else)."""
    name = path.name
    if path.is_file():
        return name in REPORT_FILES or (name.startswith("metric_vs_") and name.endswith(".png"))
    if path.is_dir() and name == TENSORBOARD_FOLDER and not path.is_symlink():
        return all(p.is_dir() or (p.is_file() and p.name.startswith(EVENT_FILE_PREFIX)) for p in path.rglob("*"))
    return False


def check_output_folder(out: pathlib.Path, force: bool) -> list[pathlib.Path]:
    """The entries of an earlier report in ``out`` that ``--force`` lets the new report replace. Raises
    ValueError (one line) when ``out`` is no folder, holds anything else, or holds a report and not ``force``."""
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {str(out)!r}: exists and is not a folder")
    for parent in out.parents:
        if parent.exists() and not parent.is_dir():
            raise ValueError(f"--out {str(out)!r}: {str(parent)!r} is a file, not a folder")
    if not out.exists():
        return []
    entries = sorted(out.iterdir())
    others = [entry.name for entry in entries if not _is_report_entry(entry)]
    if others:
        raise ValueError(f"--out {str(out)!r}: holds files that are not an earlier report's ({', '.join(others[:3])}"
                         f"{', ...' if len(others) > 3 else ''}); choose an empty or new folder")
    if entries and not force:
        raise ValueError(f"--out {str(out)!r}: holds an earlier report ({', '.join(e.name for e in entries[:3])}"
                         f"{', ...' if len(entries) > 3 else ''}); give --force to replace it, or another --out")
    return entries


def write_plots(table: ReportTable, out: pathlib.Path) -> list[pathlib.Path]:
    """``curves.png`` (the metric against the step, or loss when no metrics.jsonl has the metric) and
    ``metric_vs_<key>.png`` for each key of :func:`plotted_keys`; returns the files written."""
    from sopt.experiments import report_plots

    written = []
    for name in dict.fromkeys((table.metric, "loss")):
        if any(run.series(name)[0] for run in table.runs):
            figure = report_plots.curves_figure(table.runs, name, table.keys, table.best)
            written.append(report_plots.save(figure, out / "curves.png"))
            break
    for key in plotted_keys(table):
        others = [k for k in table.keys if k != key]
        figure = report_plots.metric_vs_key_figure(table.runs, key, table.metric, others, table.best,
                                                   value=table.value,
                                                   label=table.metric_label if table.split else None)
        written.append(report_plots.save(figure, out / report_plots.plot_file_name(key)))
    return written


def plotted_keys(table: ReportTable) -> list[str]:
    """The keys worth a metric-vs-key plot: those that differ (or are swept) with at least two distinct numbers
    among the runs with a result (not failed or pending) and a finite value of the metric that ranks."""
    from sopt.experiments.report_plots import NOT_RESULTS, is_numeric_value

    keys = []
    for key in table.keys:
        results = [run for run in table.runs if run.status not in NOT_RESULTS
                   and is_numeric_value(table.value(run))]
        values = [run.value(key) for run in results]
        numbers = {float(v) for v in values if is_numeric_value(v)}
        if len(numbers) >= 2 and all(is_numeric_value(v) or v is None for v in values):
            keys.append(key)
    return keys


def report_main(argv: list[str]) -> int:
    """``sopt report DIR... [--metric NAME] [--mode min|max] [--columns A,B] [--out DIR] [--force] [--no-plots]
    [--tensorboard]``. Returns the exit status: 0 written; 2 a usage, DIR, metric, column or output-folder error
    (one line ``error: ...`` on stderr, nothing written); 1 a file could not be written."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except _UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except SystemExit as exc:                       # --help
        return exc.code if isinstance(exc.code, int) else 0
    columns = None
    if args.columns is not None:
        columns = [name.strip() for name in args.columns.split(",") if name.strip()]
        if not columns:
            print(f"error: --columns {args.columns!r}: give comma-separated column names", file=sys.stderr)
            return 2
    try:
        collection = collect_runs(args.dirs)
        metric, mode = choose_metric(collection, args.metric, args.mode)
        table = report_table.build_table(collection, metric, mode, columns, metric_given=args.metric is not None)
        out = pathlib.Path(args.out) if args.out is not None else default_out(args.dirs)
        if args.out == "":
            raise ValueError("--out '': give a folder name")
        check_name(out, "--out")
        earlier = check_output_folder(out, args.force)
        if args.tensorboard:
            tensorboard_export.check_available()
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ValueError(f"--out {str(out)!r}: cannot make the folder ({' '.join(str(exc).split())})") from exc
    except (NoRunsError, ValueError, tensorboard_export.TensorBoardMissing) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    for run in table.runs:
        for note in run.notes:
            print(f"warning: {run.name}: {note}", file=sys.stderr)
    print(report_table.text_table(table), end="")
    try:
        for entry in earlier:                       # only an earlier report's files (check_output_folder)
            shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
        plots = [] if args.no_plots else write_plots(table, out)
        atomic_write.write_text(out / "report.md", report_table.markdown(table, args.dirs, plots))
        atomic_write.write_text(out / "report.csv", report_table.csv_text(table))
        print(f"wrote {out / 'report.md'}, report.csv" + "".join(f", {p.name}" for p in plots))
        if args.tensorboard:
            logdir = out / TENSORBOARD_FOLDER
            written = tensorboard_export.write_events(table.runs, logdir)
            print(f"wrote TensorBoard events of {len(written)} run{'s' if len(written) != 1 else ''} into "
                  f"{logdir} (view: tensorboard --logdir {logdir})")
    except OSError as exc:
        print(f"error: writing the report into {str(out)!r}: {' '.join(str(exc).split())}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(report_main(sys.argv[1:]))
