"""Runs and episodes of a workspace as tables: rows, pandas DataFrames, CSV and parquet files.

One row per run (:func:`run_rows`, :func:`runs_df`) or per episode (:func:`episode_rows`,
:func:`episodes_df`), with nested fields flattened into columns, like Inspect's
``evals_df``/``samples_df``:

- a run row: ``run_id``, its ``name``, ``tags`` and ``note`` (``meta.json``; tags a list,
  JSON text in CSV), ``graph_name``, ``status``, ``health`` (the run's verdict; a run
  with errors is never ``clean``), counts, ``config_<field>`` for each config field,
  ``metric_<name>`` (the aggregate mean) with ``metric_<name>_lo/_hi/_n``, and
  ``count_<status>`` for each episode status;
- an episode row: ``run_id`` and ``graph_name`` first, then the record's fields and
  ``metric_<name>`` for each of its metrics (missing metrics are empty).

Runs are read through the run-folder readers only: the listing through
:class:`~agentcanvas.eval.run_index.RunIndex` (the summaries without their records) and each
run's records through :func:`~agentcanvas.eval.records.episode_records` (a complete
summary's, else the live ``episodes.jsonl`` index), so a run still going exports what it has.
Every step is linear in the number of episodes.

Rows are plain dicts (no pandas); pandas and pyarrow are imported only by the DataFrame and
parquet functions. CSV cells are strict: a missing or non-finite value is an empty cell,
a nested value is JSON text.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TextIO

from agentcanvas import jsontext
from agentcanvas.errors import RunNotFoundError, UserInputError
from agentcanvas.eval import health
from agentcanvas.eval.records import episode_records, read_summary
from agentcanvas.eval.run_index import RunIndex
from agentcanvas.eval.store import RunDir
from agentcanvas.paths import runs_dir, safe_child

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "EPISODE_COLUMNS",
    "Format",
    "Table",
    "csv_text",
    "episode_rows",
    "episodes_df",
    "export_run",
    "read_run",
    "run_row",
    "run_rows",
    "runs_df",
    "workspace_runs",
    "write_csv",
    "write_parquet",
]

Format = Literal["csv", "parquet"]
FORMATS: tuple[Format, ...] = ("csv", "parquet")
Row = dict[str, Any]
Table = tuple[list[str], list[Row]]
"""Column names (in order) and the rows; a row may lack a column (missing value)."""

EPISODE_COLUMNS = (
    "run_id",
    "graph_name",
    "index",
    "episode_id",
    "task",
    "episode_index",
    "seed",
    "status",
    "steps",
    "attempts",
    "step_budget",
    "duration_s",
    "scene_id",
    "instruction",
    "error",
    "node_errors",
)
_RUN_COLUMNS = (
    "run_id",
    "name",
    "tags",
    "note",
    "graph_name",
    "status",
    "health",
    "error_count",
    "episodes_total",
    "episodes_done",
    "episodes_complete",
    "started_at",
    "finished_at",
    "determinism_guaranteed",
    "determinism_level",
    "error",
)
# Beside each mean: its interval, the scored n, what it covers of the plan, its errors, the
# rate with errors as failures and the worst/best cases; the kind and the method.
_AGGREGATE_PARTS = (
    "lo", "hi", "n", "n_planned", "n_errors", "errors_as_failures", "worst", "best",
    "kind", "method",
)  # fmt: skip


def workspace_runs(workspace: str | Path | None) -> Path:
    """The run folders of ``workspace`` (default: AGENTCANVAS_HOME, else the cwd)."""
    return runs_dir(None if workspace is None else Path(workspace).expanduser().resolve())


def read_run(runs: Path, run_id: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The summary of run ``run_id`` under ``runs`` and its records (the one rule).

    UserInputError naming ``run_id`` when there is no such run or it has no summary yet;
    DamagedRunError naming the file and the field when its summary is off ``EvalRun`` (the
    records of a live run's index that are no valid record are skipped).
    """
    folder = safe_child(runs, "run_id", run_id, field="run_id")
    run_dir = RunDir(folder)
    if not run_dir.summary_path.is_file():
        exists = folder.is_dir()
        what = "has no summary.json yet" if exists else "does not exist"
        raise (UserInputError if exists else RunNotFoundError)(
            f"run_id: run {run_id!r} {what} in {str(runs)!r} (give a run id listed there, "
            "or run from the workspace that holds it / set AGENTCANVAS_HOME to it)"
        )
    summary = read_summary(run_dir.summary_path, f"run {run_id}: summary.json")
    return summary, episode_records(run_dir, summary)


# -- rows ------------------------------------------------------------------------------------


def run_row(summary: Mapping[str, Any]) -> Row:
    """One run's row, from its listing row (a summary without ``episodes``, with the run's
    ``name``, ``tags`` and ``note``)."""
    timings = summary.get("timings") or {}
    determinism = summary.get("determinism") or {}
    verdict = health.of_summary(summary)
    row: Row = {
        "run_id": summary.get("run_id"),
        "name": summary.get("name"),
        "tags": list(summary.get("tags") or []),
        "note": summary.get("note"),
        "graph_name": summary.get("graph_name"),
        "status": summary.get("status"),
        "health": verdict.verdict,
        "error_count": verdict.error_count,
        "episodes_total": summary.get("episodes_total"),
        "episodes_done": summary.get("episodes_done"),
        "episodes_complete": summary.get("episodes_complete", True),
        "started_at": timings.get("started_at"),
        "finished_at": timings.get("finished_at"),
        "determinism_guaranteed": determinism.get("guaranteed"),
        "determinism_level": determinism.get("level"),
        "error": summary.get("error"),
    }
    for key, value in (summary.get("config") or {}).items():
        row[f"config_{key}"] = value
    for name, aggregate in (summary.get("aggregate_metrics") or {}).items():
        if isinstance(aggregate, Mapping):
            row[f"metric_{name}"] = aggregate.get("mean")
            for part in _AGGREGATE_PARTS:
                row[f"metric_{name}_{part}"] = aggregate.get(part)
    for status, count in (summary.get("status_counts") or {}).items():
        row[f"count_{status}"] = count
    return row


def run_rows(workspace: str | Path | None = None) -> Table:
    """Every run of ``workspace`` (default: AGENTCANVAS_HOME, else the cwd), oldest first."""
    rows = [run_row(summary) for summary in reversed(RunIndex(workspace_runs(workspace)).rows())]
    return _columns(_RUN_COLUMNS, rows), rows


def episode_rows(summary: Mapping[str, Any], records: Iterable[Mapping[str, Any]]) -> Table:
    """One row per record, each carrying the run's ``run_id`` and ``graph_name``."""
    run_id, graph_name = summary.get("run_id"), summary.get("graph_name")
    rows = []
    for record in records:
        row: Row = {"run_id": run_id, "graph_name": graph_name}
        for key, value in record.items():
            if key == "metrics" and isinstance(value, Mapping):
                row.update((f"metric_{name}", metric) for name, metric in value.items())
            elif key == "partial_metrics" and isinstance(value, Mapping):  # never scored
                row.update((f"partial_{name}", metric) for name, metric in value.items())
            elif key != "version":
                row[key] = value
        rows.append(row)
    return _columns(EPISODE_COLUMNS, rows), rows


def _columns(first: Sequence[str], rows: Iterable[Row]) -> list[str]:
    """``first``, then every other key of ``rows`` in order of first appearance."""
    seen = dict.fromkeys(first)
    for row in rows:
        for key in row:
            if key not in seen:
                seen[key] = None
    return list(seen)


def workspace_episode_rows(
    workspace: str | Path | None = None, run_ids: Iterable[str] | None = None
) -> Table:
    """The episode rows of ``run_ids`` (default: every run, oldest first), concatenated."""
    runs = workspace_runs(workspace)
    if run_ids is None:
        run_ids = [str(row["run_id"]) for row in run_rows(workspace)[1]]
    columns: list[str] = list(EPISODE_COLUMNS)
    rows: list[Row] = []
    for run_id in run_ids:
        run_columns, run_rows_ = episode_rows(*read_run(runs, run_id))
        columns = _columns(columns, [dict.fromkeys(run_columns)])
        rows.extend(run_rows_)
    return columns, rows


# -- pandas ------------------------------------------------------------------------------------


def runs_df(workspace: str | Path | None = None) -> pd.DataFrame:
    """The runs of ``workspace`` as a DataFrame, one row per run (oldest first).

    ``workspace`` defaults to AGENTCANVAS_HOME, else the current directory.
    """
    return to_frame(run_rows(workspace))


def episodes_df(
    workspace: str | Path | None = None, run_ids: str | Iterable[str] | None = None
) -> pd.DataFrame:
    """The episodes of ``workspace``'s runs (or of ``run_ids``) as one DataFrame, one row
    per episode, each with its ``run_id`` and ``graph_name``."""
    if isinstance(run_ids, str):
        run_ids = [run_ids]
    return to_frame(workspace_episode_rows(workspace, run_ids))


def to_frame(table: Table) -> pd.DataFrame:
    """A DataFrame of ``table`` (missing values are None/NaN); nested values stay objects."""
    import pandas as pd

    columns, rows = table
    return pd.DataFrame.from_records(rows, columns=columns)


# -- files -------------------------------------------------------------------------------------


def _cell(value: Any) -> Any:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return ""
    if isinstance(value, (dict, list, tuple)):
        return jsontext.dumps(value, compact=True)
    return value


def write_csv(table: Table, out: TextIO) -> int:
    """Write ``table`` as CSV (header first) to ``out``; the number of data rows."""
    columns, rows = table
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    writer.writerows([_cell(row.get(column)) for column in columns] for row in rows)
    return len(rows)


def csv_text(table: Table) -> str:
    """``table`` as CSV text."""
    out = io.StringIO()
    write_csv(table, out)
    return out.getvalue()


def write_parquet(table: Table, path: Path) -> int:
    """Write ``table`` as a parquet file at ``path``; the number of rows.

    A nested value is stored as JSON text, and a column whose values mix kinds (numbers
    and text) as text, so that every column has one type.
    """
    import pandas as pd

    columns, rows = table
    data = {column: _parquet_column([row.get(column) for row in rows]) for column in columns}
    pd.DataFrame(data, columns=columns).to_parquet(path, engine="pyarrow", index=False)
    return len(rows)


def _parquet_column(values: list[Any]) -> list[Any]:
    values = [_nested_as_text(v) for v in values]
    kinds = {_kind(v) for v in values if v is not None}
    if len(kinds) > 1:
        return [None if v is None else str(v) for v in values]
    return values


def _nested_as_text(value: Any) -> Any:
    if isinstance(value, (dict, list, tuple)):
        return jsontext.dumps(value, compact=True)
    return value


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    return type(value).__name__


def export_run(
    run_id: str, fmt: str, output: Path | None, workspace: str | Path | None = None
) -> tuple[Path | None, int]:
    """Write run ``run_id``'s episodes to ``output`` as ``fmt`` (csv or parquet).

    ``output`` None writes CSV to stdout. Returns the path written (None for stdout) and the
    number of episode rows. UserInputError naming the field for an unknown format or run.
    """
    if fmt not in FORMATS:
        raise UserInputError(f"--format: {fmt!r} is not one of {', '.join(FORMATS)}")
    if output is None and fmt == "parquet":
        raise UserInputError("--output: parquet is binary; give a file path (--output PATH)")
    table = episode_rows(*read_run(workspace_runs(workspace), run_id))
    if output is None:
        import sys

        return None, write_csv(table, sys.stdout)
    if output.is_dir():
        raise UserInputError(f"--output: {str(output)!r} is a folder; give a file path")
    try:
        if fmt == "parquet":
            return output, write_parquet(table, output)
        with output.open("w", encoding="utf-8", newline="") as handle:
            return output, write_csv(table, handle)
    except OSError as exc:
        raise UserInputError(f"--output: cannot write {str(output)!r}: {exc}") from exc
