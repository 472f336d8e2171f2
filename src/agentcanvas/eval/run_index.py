"""The run listing's index: one compact row per run folder, re-read only when it changed.

``GET /api/eval/v2/runs`` is polled by the web page and the CLI while runs execute. Each
request stats every ``summary.json`` (cheap) and re-reads only those whose (mtime, size,
inode) changed since the last request; a re-read skips the per-episode records without
building them (msgspec keeps them as raw bytes, never parsed), so a listing costs the same
whatever the runs' size and however many of them are running.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from agentcanvas.errors import UnsafeNameError
from agentcanvas.paths import check_name

__all__ = ["RunIndex", "compact_row"]

_RawSummary = dict[str, msgspec.Raw]
_StatKey = tuple[int, int, int]


def compact_row(fields: dict[str, Any]) -> dict[str, Any]:
    """A listing row: a summary without ``episodes``, plus ``success_rate``."""
    row = {k: v for k, v in fields.items() if k != "episodes"}
    metrics = row.get("aggregate_metrics")
    success = metrics.get("success") if isinstance(metrics, dict) else None
    row["success_rate"] = success.get("mean") if isinstance(success, dict) else None
    return row


@dataclass
class RunIndex:
    """Compact rows of the runs under ``runs_dir``, newest first."""

    runs_dir: Path
    _rows: dict[str, tuple[_StatKey, dict[str, Any]]] = field(default_factory=dict)

    def page(self, offset: int, limit: int, status: str | None = None) -> dict[str, Any]:
        """``{"total", "runs"}``: rows matching ``status`` (all when None), paged."""
        rows = [row for row in self.rows() if not status or row.get("status") == status]
        return {"total": len(rows), "runs": rows[offset : offset + limit]}

    def rows(self) -> list[dict[str, Any]]:
        """Every readable run's row, newest (largest run id) first."""
        seen: dict[str, tuple[_StatKey, dict[str, Any]]] = {}
        for run_id in self._run_ids():
            entry = self._refresh(run_id)
            if entry is not None:
                seen[run_id] = entry
        self._rows = seen  # forgets folders that vanished
        return [seen[run_id][1] for run_id in sorted(seen, reverse=True)]

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
        path = self.runs_dir / run_id / "summary.json"
        try:
            stat = path.stat()
        except OSError:
            return None
        key = (stat.st_mtime_ns, stat.st_size, stat.st_ino)
        cached = self._rows.get(run_id)
        if cached is not None and cached[0] == key:
            return cached
        row = _read_row(path)
        if row is None:  # unreadable now (a run being created): the last row, if any
            return cached
        return key, row


def _read_row(path: Path) -> dict[str, Any] | None:
    try:
        raw = msgspec.json.decode(path.read_bytes(), type=_RawSummary)
        fields = {k: msgspec.json.decode(v) for k, v in raw.items() if k != "episodes"}
    except (OSError, msgspec.DecodeError, msgspec.ValidationError):
        return None
    return compact_row(fields)
