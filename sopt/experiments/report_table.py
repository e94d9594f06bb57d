"""The table of ``sopt report``: one row per run, its config keys that differ and its final metrics, the best run
marked; as aligned text (terminal), Markdown and CSV.

Columns, left to right: ``run`` (the run's name: its path relative to the runs' common parent), ``status``, the
keys (a sweep's swept keys in its space's order, then every other config key whose value differs between the runs),
the metrics (the chosen metric, ``loss``, every ``rel_error`` and ``rel_error/*``, then up to :data:`EXTRA_METRICS`
more final metrics in the order the runs give them, bookkeeping such as ``lr`` left out), ``steps_done`` and
``run_time_s`` from summary.json, and ``error`` when a run has one. ``--columns`` replaces everything after
``status`` with the columns it names.

One metric per report: the best run is the one whose curve of the chosen metric ends best, i.e. by the last value
metrics.jsonl logged (what ``curves.png`` draws and what ``sopt sweep --prune`` stopped trials on), when the runs
log it; by summary.json's final value when none does. ``sopt sweep``'s table and best line rank and show it the same
way. Where a run's final value differs from its curve's last one (a problem's ``finish`` evaluating the metric anew:
a fitting problem's final loss is its loss at the fitted values, after the last optimiser step), the table shows
both, headed ``<metric> (last logged)`` (the one that ranks) and ``<metric> (final)``. Both are the same quantity:
a multi-start fit logs its best start's loss as ``loss``, as its final ``loss`` is
(problems.fitting.FittingProblem.result_loss).
"""

from __future__ import annotations

import csv
import dataclasses
import difflib
import io
import math
import pathlib
from typing import Any, Iterable, Sequence

from sopt.experiments.run_records import Collection, RunRecord, format_key_value

# Final metrics the default columns leave out (what the trainer logs about itself, not about the problem).
BOOKKEEPING_METRICS = ("step", "lr", "time_s", "steps_per_s")
EXTRA_METRICS = 4
# Metrics always shown by default, whatever EXTRA_METRICS leaves out: a fit's error per parameter (rel_error/<name>).
ALWAYS_SHOWN_PREFIX = "rel_error"
# The header suffixes of the chosen metric's columns when its last logged and final values differ.
LAST_LOGGED, FINAL = "(last logged)", "(final)"
# Columns from summary.json (named so they cannot clash with the config's `steps` or a metric `time_s`).
SUMMARY_COLUMNS = ("steps_done", "run_time_s", "error")
# Statuses that never make the best run: no result (failed: diverged or crashed; pending: not started).
NEVER_BEST = ("failed", "pending")
MISSING = "-"          # an empty cell in the text and Markdown tables (empty in the CSV)
ERROR_WIDTH = 60       # characters of an error shown in the text table (the CSV and Markdown hold all of it)


@dataclasses.dataclass(frozen=True)
class Column:
    """A table column: ``kind`` is "run", "status", "key" (a dotted config key), "metric" (a final metric),
    "last" (a metric's last value in metrics.jsonl) or "summary" (one of :data:`SUMMARY_COLUMNS`). ``name`` is the
    header; ``key`` the metric or config key read when it differs from the header ("" when it is the header)."""

    name: str
    kind: str
    key: str = ""

    @property
    def source(self) -> str:
        """The metric or config key this column reads."""
        return self.key or self.name


@dataclasses.dataclass
class ReportTable:
    """The runs' table. ``keys``: the config keys that differ (swept keys first), whatever the columns shown;
    ``best``: the best run by ``metric`` and ``mode`` (None when no run qualifies). ``by_curve``: whether the
    metric's value that ranks is the last logged one (see the module docstring) rather than summary.json's;
    ``split``: whether some run's two values differ, so the table shows both and names the one that ranks."""

    runs: list[RunRecord]
    columns: list[Column]
    metric: str
    mode: str
    keys: list[str]
    best: RunRecord | None
    by_curve: bool = False
    split: bool = False

    def value(self, run: RunRecord) -> float | None:
        """The run's value of the metric that ranks it (and that the curves and the metric-vs-key plots show)."""
        return ranking_value(run, self.metric, self.by_curve)

    @property
    def metric_label(self) -> str:
        """How the table and plots name the ranking metric: ``loss``, or ``loss (last logged)`` when split."""
        return f"{self.metric} {LAST_LOGGED}" if self.split else self.metric

    def cell(self, run: RunRecord, column: Column) -> Any:
        """The raw value of a cell (None when the run has none)."""
        if column.kind == "run":
            return run.name
        if column.kind == "status":
            return run.status
        if column.kind == "key":
            return run.value(column.source)
        if column.kind == "metric":
            return run.metrics.get(column.source)
        if column.kind == "last":
            return run.last_logged(column.source)
        return {"steps_done": run.steps_done, "run_time_s": run.time_s, "error": run.error}[column.name]

    def rows(self) -> list[list[Any]]:
        """The raw values, one list per run in ``columns``' order."""
        return [[self.cell(run, column) for column in self.columns] for run in self.runs]

    def numeric(self, column: Column) -> bool:
        """Whether every value of a column is a number (such columns are right-aligned)."""
        values = [self.cell(run, column) for run in self.runs]
        return column.kind not in ("run", "status") and all(
            v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)) for v in values)


def differing_keys(runs: Sequence[RunRecord], space_keys: Sequence[str] = ()) -> list[str]:
    """The swept keys (every one of ``space_keys`` some run has), then each other dotted config key whose value
    is not the same in every run with a config (missing in one and set in another counts as different), in the
    order the configs give them."""
    keys = [key for key in space_keys if any(run.value(key) is not None for run in runs)]
    configs = [run.config for run in runs if run.config is not None]
    seen: dict[str, None] = {}
    for config in configs:
        seen.update(dict.fromkeys(config))
    for key in seen:
        if key in keys:
            continue
        values = [config.get(key) for config in configs]
        if any(value != values[0] or type(value) is not type(values[0]) for value in values[1:]):
            keys.append(key)
    return keys


def metric_names(runs: Iterable[RunRecord]) -> list[str]:
    """Every final metric name of the runs, in the order they first appear."""
    names: dict[str, None] = {}
    for run in runs:
        names.update(dict.fromkeys(run.metrics))
    return list(names)


def ranking_value(run: RunRecord, metric: str, by_curve: bool) -> float | None:
    """``metric``'s last value in the run's metrics.jsonl (``by_curve``), else its final value in summary.json."""
    return run.last_logged(metric) if by_curve else run.metrics.get(metric)


def ranks_by_curve(runs: Sequence[RunRecord], metric: str) -> tuple[bool, bool]:
    """(by_curve, split): whether some run logs ``metric`` in metrics.jsonl (then the curves' last values rank
    the runs, as they are what curves.png draws and the pruner judged), and whether a run that can be the best
    has a final value (summary.json) other than its last logged one (non-finite and missing counting as equal)."""
    by_curve = any(run.series(metric)[0] for run in runs)
    if not by_curve:
        return False, False

    def finite(value: float | None) -> float | None:
        return value if value is not None and math.isfinite(value) else None

    split = any(finite(run.metrics.get(metric)) != finite(run.last_logged(metric))
                for run in runs if run.status not in NEVER_BEST)
    return True, split


def best_run(runs: Sequence[RunRecord], metric: str, mode: str, by_curve: bool = False) -> RunRecord | None:
    """The run with the least (mode "min") or greatest ("max") finite ``metric`` (its final value, or its last
    logged one when ``by_curve``: :func:`ranking_value`), failed and pending runs left out; the first of equals;
    None when no run qualifies."""
    if mode not in ("min", "max"):
        raise ValueError(f"mode = {mode!r}: allowed 'min' or 'max'")
    best, best_value = None, math.nan
    for run in runs:
        value = ranking_value(run, metric, by_curve)
        if run.status in NEVER_BEST or value is None or not math.isfinite(value):
            continue
        if best is None or (value < best_value if mode == "min" else value > best_value):
            best, best_value = run, value
    return best


def is_always_shown(name: str) -> bool:
    """``rel_error`` and ``rel_error/<name>``: shown by default however many other metrics there are."""
    return name == ALWAYS_SHOWN_PREFIX or name.startswith(ALWAYS_SHOWN_PREFIX + "/")


def metric_columns(metric: str, split: bool) -> list[Column]:
    """The chosen metric's columns: one headed by its name, or, when ``split``, its last logged value (which
    ranks) then its final one, each header saying which."""
    if not split:
        return [Column(metric, "metric")]
    return [Column(f"{metric} {LAST_LOGGED}", "last", metric), Column(f"{metric} {FINAL}", "metric", metric)]


def default_columns(runs: Sequence[RunRecord], keys: Sequence[str], metric: str,
                    split: bool = False) -> list[Column]:
    """The columns after ``run`` and ``status`` when ``--columns`` is not given (see the module docstring)."""
    columns = [Column(key, "key") for key in keys]
    names = metric_names(runs)
    metrics = [name for name in (metric, "loss") if name in names or (name == metric and split)]
    extras = [name for name in names if name not in metrics and name not in BOOKKEEPING_METRICS]
    shown = [*metrics, *[name for name in extras if is_always_shown(name)],
             *[name for name in extras if not is_always_shown(name)][:EXTRA_METRICS]]
    for name in dict.fromkeys(shown):
        columns += metric_columns(metric, split) if name == metric else [Column(name, "metric")]
    columns += [Column("steps_done", "summary"), Column("run_time_s", "summary")]
    if any(run.error for run in runs):
        columns.append(Column("error", "summary"))
    return columns


def resolve_columns(names: Sequence[str], runs: Sequence[RunRecord]) -> list[Column]:
    """``--columns``' names as columns: a final metric, else a config key, else a summary column. Raises
    ValueError (one line, with a "did you mean") for a name no run has."""
    metrics = metric_names(runs)
    keys: dict[str, None] = {}
    for run in runs:
        keys.update(dict.fromkeys(run.config or {}))
        keys.update(dict.fromkeys(run.params))
    columns = []
    for name in names:
        if name in ("run", "status"):
            continue           # always shown
        if name in metrics:
            columns.append(Column(name, "metric"))
        elif name in keys:
            columns.append(Column(name, "key"))
        elif name in SUMMARY_COLUMNS:
            columns.append(Column(name, "summary"))
        else:
            known = [*metrics, *keys, *SUMMARY_COLUMNS]
            near = difflib.get_close_matches(name, known, n=1)
            hint = f"did you mean {near[0]!r}? " if near else ""
            raise ValueError(f"--columns {name!r}: no run has this metric or config key; {hint}"
                             f"metrics: {', '.join(metrics) or 'none'}; summary: {', '.join(SUMMARY_COLUMNS)}")
    return columns


def build_table(collection: Collection, metric: str, mode: str, columns: Sequence[str] | None = None,
                metric_given: bool = True) -> ReportTable:
    """The table of ``collection``'s runs. ``metric``/``mode`` choose the best run; ``columns``: the names of
    ``--columns`` (None: :func:`default_columns`). Raises ValueError (one line) for a ``metric_given`` metric no run
    has (unless no run has any metric yet, e.g. a sweep whose trials are all pending) or an unknown column."""
    runs = collection.runs
    names = metric_names(runs)
    if metric_given and names and metric not in names:
        near = difflib.get_close_matches(metric, names, n=1)
        hint = f"did you mean {near[0]!r}? " if near else ""
        raise ValueError(f"--metric {metric!r}: no run has this final metric; {hint}metrics: {', '.join(names)}")
    keys = differing_keys(runs, collection.space_keys)
    by_curve, split = ranks_by_curve(runs, metric)
    if columns is None:
        chosen = default_columns(runs, keys, metric, split)
    else:
        chosen = resolve_columns(columns, runs)
        if split:   # the header always names the value that ranks
            chosen = [metric_columns(metric, split)[0], *chosen]
    return ReportTable(runs=list(runs), columns=[Column("run", "run"), Column("status", "status"), *chosen],
                       metric=metric, mode=mode, keys=keys, best=best_run(runs, metric, mode, by_curve),
                       by_curve=by_curve, split=split)


# -- formats ---------------------------------------------------------------------------------------------------------
def _show(value: Any, column: Column) -> str:
    """A cell as the text and Markdown tables show it: metrics with 5 significant digits, config values as
    :func:`format_key_value` writes them, run times with 3 decimals."""
    if value is None:
        return MISSING
    if column.kind in ("metric", "last"):
        return f"{value:.5g}"
    if column.name == "run_time_s":
        return f"{value:.3f}"
    return format_key_value(value)


def _csv_value(value: Any) -> str:
    """A cell in the CSV: floats in full (``repr``, so they read back exactly), booleans as TOML writes them."""
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value)
    return format_key_value(value)


def best_line(table: ReportTable) -> str:
    """``best by loss (min): trial-002, loss = 0.0012`` (``best by loss (last logged) (min): ...`` when the
    metric's last logged and final values differ) or why there is none."""
    label = table.metric_label
    if table.best is None:
        return f"best by {label} ({table.mode}): none (no finished run has a finite {label})"
    return f"best by {label} ({table.mode}): {table.best.name}, {label} = {table.value(table.best):.6g}"


def text_table(table: ReportTable) -> str:
    """The table as aligned text: a header, a rule, one line per run (the best one marked ``*``), then
    :func:`best_line`. Numeric columns are right-aligned, errors cut to :data:`ERROR_WIDTH` characters."""
    header = [column.name for column in table.columns]
    lines = []
    for run in table.runs:
        cells = [_show(table.cell(run, column), column) for column in table.columns]
        cells = [(c if len(c) <= ERROR_WIDTH else c[:ERROR_WIDTH - 3] + "...") for c in cells]
        cells[0] = ("* " if run is table.best else "  ") + cells[0]
        lines.append(cells)
    header[0] = "  " + header[0]
    widths = [max(len(row[i]) for row in [header, *lines]) for i in range(len(header))]
    right = [table.numeric(column) for column in table.columns]

    def join(cells: list[str]) -> str:
        return "  ".join(c.rjust(w) if r else c.ljust(w) for c, w, r in zip(cells, widths, right)).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([join(header), rule, *(join(cells) for cells in lines), "", best_line(table)]) + "\n"


def _markdown_cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def markdown(table: ReportTable, sources: Sequence[str], plots: Sequence[pathlib.Path] = ()) -> str:
    """The report as Markdown: a heading, where the runs come from, :func:`best_line`, the table (the best run's
    name in bold) and the plots as images (paths relative to the report)."""
    header = [_markdown_cell(column.name) for column in table.columns]
    align = ["---:" if table.numeric(column) else "---" for column in table.columns]
    lines = ["# sopt report", "",
             f"{len(table.runs)} run{'s' if len(table.runs) != 1 else ''} from {', '.join(sources)}.",
             "", best_line(table) + ".", "",
             "| " + " | ".join(header) + " |", "|" + "|".join(align) + "|"]
    for run in table.runs:
        cells = [_markdown_cell(_show(table.cell(run, column), column)) for column in table.columns]
        if run is table.best:
            cells[0] = f"**{cells[0]}**"
        lines.append("| " + " | ".join(cells) + " |")
    for plot in plots:
        lines += ["", f"![{plot.stem}]({plot.name})"]
    return "\n".join(lines) + "\n"


def csv_text(table: ReportTable) -> str:
    """The table as CSV (csv module, excel dialect): the columns' names then ``best`` (1 for the best run,
    else 0), floats written in full."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow([column.name for column in table.columns] + ["best"])
    for run in table.runs:
        writer.writerow([_csv_value(table.cell(run, column)) for column in table.columns]
                        + [1 if run is table.best else 0])
    return buffer.getvalue()
