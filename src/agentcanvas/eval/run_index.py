"""The run listing's index: one compact row per run folder, re-read only when it changed.

``GET /api/eval/v2/runs`` is polled by the web page and the CLI while runs execute. Each
request stats every ``summary.json`` (cheap) and re-reads only those whose (mtime, size,
inode) changed since the last request; a re-read skips the per-episode records without
building them (msgspec keeps them as raw bytes, never parsed), so a listing costs the same
whatever the runs' size and however many of them are running.

A summary that is not what ``EvalRun`` says (garbage, a list, a field of the wrong type),
or a folder with a spec.json but no summary, is still listed, by its id, as a row marked
``damaged`` (``"summary.json: field 'status': ..."``) with the status ``damaged``; nothing
one folder holds can break the listing or a search of the others.

A row also carries the run's name, tags and note (``meta.json``, part of the cache key), its
health verdict, and ``config_diff``: the config fields whose values differ between the listed
runs of the same graph, so two runs that differ in step budget do not look alike.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import msgspec
from pydantic import ValidationError

from agentcanvas.errors import DamagedRunError, UnsafeNameError
from agentcanvas.eval import health
from agentcanvas.eval.records import (
    field_problem,
    model_problem,
    read_json_object,
    summary_problem,
)
from agentcanvas.eval.run_meta import META_FILE, RunMeta
from agentcanvas.paths import check_name

__all__ = [
    "DAMAGED",
    "RunIndex",
    "RunQuery",
    "compact_row",
    "config_differences_by_graph",
    "damaged_row",
    "read_checked_meta",
    "with_state",
]

MAX_META_BYTES = 1024 * 1024  # a name, a few tags and a note

DAMAGED = "damaged"
"""The status of a listed run whose summary.json cannot be read as a summary."""

_RawSummary = dict[str, msgspec.Raw]
_StatKey = tuple[int, int, int, int, int]
_NOT_COMPARED = frozenset({"worker_count", "graph_name", "version"})  # speed dial, group key


@dataclass(frozen=True)
class RunQuery:
    """Which runs a listing shows: by status, a text in name/tags/note/id/graph, a tag, a
    graph."""

    status: str | None = None
    text: str | None = None
    tag: str | None = None
    graph: str | None = None
    retry_of: str | None = None
    """Only the retries of this run (their config's ``retry_of``)."""

    def matches(self, row: dict[str, Any]) -> bool:
        if self.status and row.get("status") != self.status:
            return False
        if self.retry_of and (row.get("config") or {}).get("retry_of") != self.retry_of:
            return False
        if self.graph and row.get("graph_name") != self.graph:
            return False
        if self.tag and self.tag not in row.get("tags", []):
            return False
        if not self.text:
            return True
        fields = [row.get("name"), row.get("note"), row.get("run_id"), row.get("graph_name")]
        haystack = " ".join([*(f for f in fields if f), *row.get("tags", [])]).casefold()
        return all(word in haystack for word in self.text.casefold().split())


def config_differences_by_graph(rows: list[dict[str, Any]]) -> dict[str, list[str]]:
    """Per graph with two or more runs among ``rows``: the config fields whose values differ."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        config = row.get("config")
        if isinstance(config, dict):
            groups.setdefault(str(row.get("graph_name")), []).append(config)
    differing: dict[str, list[str]] = {}
    for graph, configs in groups.items():
        keys = sorted(set().union(*configs) - _NOT_COMPARED)
        diff = [k for k in keys if len({msgspec.json.encode(c.get(k)) for c in configs}) > 1]
        if len(configs) > 1 and diff:
            differing[graph] = diff
    return differing


def damaged_row(run_id: str, problem: str) -> dict[str, Any]:
    """The row of a run whose summary.json is off its model: its id, ``damaged`` (the file
    and the field) and the listing's keys, empty."""
    row: dict[str, Any] = {
        "run_id": run_id,
        "status": DAMAGED,
        "damaged": problem,
        "graph_name": None,
        "config": None,
        "episodes_total": None,
        "episodes_done": None,
        "success_rate": None,
        "health": None,
    }
    for key in ("n", "n_planned", "n_errors", "errors_as_failures", "lo", "hi"):
        row[f"success_{key}"] = None
    return row


def compact_row(fields: dict[str, Any]) -> dict[str, Any]:
    """A listing row: a summary without ``episodes``, plus ``success_rate``."""
    row = {k: v for k, v in fields.items() if k != "episodes"}
    metrics = row.get("aggregate_metrics")
    success = metrics.get("success") if isinstance(metrics, dict) else None
    row["success_rate"] = success.get("mean") if isinstance(success, dict) else None
    # What the rate covers: scored episodes of the plan, errors not scored.
    for key in ("n", "n_planned", "n_errors", "errors_as_failures", "lo", "hi"):
        row[f"success_{key}"] = success.get(key) if isinstance(success, dict) else None
    if "health" not in row:  # written by the scheduler, before any runner existed
        row["health"] = health.of_summary(row).model_dump(mode="json")
    return row


def with_state(summary: dict[str, Any], state: Mapping[str, Any] | None) -> dict[str, Any]:
    """``summary`` (or a row) with the state a backend holds for its run in memory, not on
    disk yet (a run that ended on a full disk: its status and error), its health recomputed."""
    if not state:
        return summary
    merged = {**summary, **state}
    merged["health"] = health.of_summary(merged).model_dump(mode="json")
    return merged


@dataclass
class RunIndex:
    """Compact rows of the runs under ``runs_dir``, newest first; ``unwritten``: the state
    of runs whose end the disk could not take yet (the scheduler's), shown over their files."""

    runs_dir: Path
    unwritten: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    _rows: dict[str, tuple[_StatKey, dict[str, Any]]] = field(default_factory=dict)

    def page(
        self, offset: int, limit: int, status: str | None = None, query: RunQuery | None = None
    ) -> dict[str, Any]:
        """``{"total", "runs", "tags", "graphs"}``: rows of ``status`` (all when None) matching
        ``query``, paged, each with ``config_diff``: the fields that differ between all the
        runs of its graph (:func:`config_differences_by_graph`), filtered or not; ``tags``
        and ``graphs``: every tag and graph of every run, for filters."""
        query = replace(query or RunQuery(), status=status or (query.status if query else None))
        every = self.rows()
        rows = [row for row in every if query.matches(row)]
        differing = config_differences_by_graph(every)  # all runs of a graph, not the page
        shown = []
        for row in rows[offset : offset + limit]:
            keys = differing.get(str(row.get("graph_name")), [])
            config = row.get("config") or {}
            shown.append({**row, "config_diff": {k: config.get(k) for k in keys}})
        tags = sorted({tag for row in every for tag in row.get("tags", [])})
        graphs = sorted({str(row["graph_name"]) for row in every if row.get("graph_name")})
        return {"total": len(rows), "runs": shown, "tags": tags, "graphs": graphs}

    def rows(self) -> list[dict[str, Any]]:
        """Every run's row (a damaged one marked), newest (largest run id) first."""
        seen: dict[str, tuple[_StatKey, dict[str, Any]]] = {}
        for run_id in self._run_ids():
            entry = self._refresh(run_id)
            if entry is not None:
                seen[run_id] = entry
        self._rows = seen  # forgets folders that vanished
        return [
            with_state(seen[run_id][1], self.unwritten.get(run_id))
            for run_id in sorted(seen, reverse=True)
        ]

    def _run_ids(self) -> list[str]:
        try:
            entries = list(os.scandir(self.runs_dir))
        except OSError:  # no runs folder yet
            return []
        ids = []
        for entry in entries:
            try:
                check_name("run_id", entry.name)
            except UnsafeNameError:
                continue
            if entry.is_dir(follow_symlinks=False):
                ids.append(entry.name)
        return ids

    def _refresh(self, run_id: str) -> tuple[_StatKey, dict[str, Any]] | None:
        folder = self.runs_dir / run_id
        path = folder / "summary.json"
        meta_stat = _meta_stat(folder)
        try:
            stat = path.stat()
        except OSError:
            if not (folder / "spec.json").exists():
                return None  # an empty folder: a run being created
            row = damaged_row(run_id, "summary.json: missing (the folder holds only a spec)")
            return (0, -1, 0, *meta_stat), _with_meta(row, folder)
        key = (stat.st_mtime_ns, stat.st_size, stat.st_ino, *meta_stat)
        cached = self._rows.get(run_id)
        if cached is not None and cached[0] == key:
            return cached
        row = _read_row(run_id, path)
        if row.get("damaged") and cached is not None and not cached[1].get("damaged"):
            # Summaries are replaced atomically, so this is damage, not a torn write: the
            # last good row stays, marked.
            row = {**cached[1], "damaged": row["damaged"]}
        return key, _with_meta(row, folder)


def read_checked_meta(folder: Path, name: str = "meta.json") -> RunMeta:
    """The run's meta.json validated against ``RunMeta`` (an empty one when there is none);
    DamagedRunError naming ``name`` and the field when it is off the model."""
    path = folder / META_FILE
    if not path.exists():
        return RunMeta()
    data = read_json_object(path, name, MAX_META_BYTES)
    problem = model_problem(RunMeta, data)
    if problem is not None:
        raise DamagedRunError(f"{name}: {problem}")
    try:
        return RunMeta.model_validate(data)
    except ValidationError as exc:  # a missing field of RunMeta has a default: not reached
        raise DamagedRunError(f"{name}: {field_problem(exc)}") from exc


def _with_meta(row: dict[str, Any], folder: Path) -> dict[str, Any]:
    """The row with the run's name, tags and note; a damaged meta.json hides nothing else
    of the run (empty meta, and the row says so in ``damaged`` unless its summary does)."""
    try:
        meta = read_checked_meta(folder)
    except DamagedRunError as exc:
        meta = RunMeta()
        row["damaged"] = row.get("damaged") or str(exc)
    row.update(meta.model_dump())
    return row


def _meta_stat(folder: Path) -> tuple[int, int]:
    try:
        stat = (folder / META_FILE).stat()
    except OSError:
        return (0, -1)
    return (stat.st_mtime_ns, stat.st_ino)


def _read_row(run_id: str, path: Path) -> dict[str, Any]:
    """The compact row of a summary.json, or its damaged row naming the field."""
    try:
        raw = msgspec.json.decode(path.read_bytes(), type=_RawSummary)
        fields = {k: msgspec.json.decode(v) for k, v in raw.items() if k != "episodes"}
    except OSError as exc:
        return damaged_row(run_id, f"summary.json: cannot be read: {exc.strerror or exc}")
    except msgspec.ValidationError:
        return damaged_row(run_id, "summary.json: expected a JSON object")
    except (msgspec.DecodeError, RecursionError) as exc:
        return damaged_row(run_id, f"summary.json: not valid JSON: {str(exc)[:200]}")
    problem = summary_problem({**fields, "episodes": []})
    if problem is not None:
        return damaged_row(run_id, f"summary.json: {problem}")
    return compact_row(fields)
