"""Reading run folders for the API: listing, episodes, logs, assets (comparison: eval.comparison).

A run's per-episode records come from its final summary once it has ended, and from its
``episodes.jsonl`` index while it runs (agentcanvas.eval.records); the cache follows a live
index incrementally, so a page of a 10,000-episode run costs what the new lines cost.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from agentcanvas.errors import (
    AssetNotFoundError,
    EpisodeNotFoundError,
    RunNotFoundError,
    UserInputError,
)
from agentcanvas.eval.comparison import compare_runs as compare_runs  # the compare route
from agentcanvas.eval.comparison import success_of
from agentcanvas.eval.records import IndexTail, summary_is_complete
from agentcanvas.eval.run_index import RunIndex, RunQuery, compact_row
from agentcanvas.eval.store import RunDir
from agentcanvas.fileio import read_json, read_jsonl
from agentcanvas.paths import check_name, contained, safe_child

LOG_TAIL_BYTES = 200_000
Outcome = Literal["success", "failure", "error", "cancelled"]


@dataclass
class RunCache:
    """summary.json contents keyed by run id, reloaded when the file changes; the records
    of a live run from its index, followed incrementally."""

    runs_dir: Path
    _cache: dict[str, tuple[tuple[int, int], dict[str, Any]]] = field(default_factory=dict)
    _tails: dict[str, IndexTail] = field(default_factory=dict)
    _index: RunIndex = field(init=False)

    def __post_init__(self) -> None:
        self._index = RunIndex(self.runs_dir)

    def run_dir(self, run_id: str) -> RunDir:
        folder = safe_child(self.runs_dir, "run_id", run_id, field="run_id")
        if not folder.is_dir():
            raise RunNotFoundError(f"run_id: no run {run_id!r}")
        return RunDir(folder)

    def summary_file(self, run_id: str) -> dict[str, Any]:
        """summary.json as written: while the run goes, without per-episode records."""
        run_dir = self.run_dir(run_id)
        path = served(run_dir, run_dir.summary_path)
        try:
            stat = path.stat()
        except OSError as exc:
            raise UserInputError(f"run_id: run {run_id!r} has no summary.json") from exc
        key = (stat.st_mtime_ns, stat.st_size)
        cached = self._cache.get(run_id)
        if cached is None or cached[0] != key:
            cached = (key, read_json(path))
            self._cache[run_id] = cached
        return cached[1]

    def summary(self, run_id: str) -> dict[str, Any]:
        """The summary with every episode record sorted by index, also while the run goes."""
        raw = self.summary_file(run_id)
        if summary_is_complete(raw):
            self._tails.pop(run_id, None)
            return raw
        tail = self._tails.get(run_id)
        if tail is None:
            tail = self._tails[run_id] = IndexTail(self.run_dir(run_id).episodes_index_path)
        return {**raw, "episodes": tail.records()}

    def list(
        self, offset: int, limit: int, status: str | None = None, query: RunQuery | None = None
    ) -> dict[str, Any]:
        """Newest first; compact rows (no per-episode records), from the run index."""
        return self._index.page(offset, limit, status, query)


def compact(summary: dict[str, Any]) -> dict[str, Any]:
    return compact_row(summary)


def episodes_page(
    summary: dict[str, Any],
    offset: int,
    limit: int,
    status: str | None,
    sort: str,
    outcome: Outcome | None = None,
    task: str | None = None,
) -> dict[str, Any]:
    episodes = summary.get("episodes", [])
    if task:
        episodes = [e for e in episodes if e.get("task") == task]
    if status:
        episodes = [e for e in episodes if e.get("status") == status]
    if outcome:
        episodes = [e for e in episodes if _outcome(e) == outcome]
    key, _, order = sort.partition(":")
    if key in ("index", "steps", "status", "task"):
        episodes = sorted(
            episodes, key=lambda e: (e.get(key) is None, e.get(key)), reverse=order == "desc"
        )
    return {"total": len(episodes), "episodes": episodes[offset : offset + limit]}


def _outcome(episode: dict[str, Any]) -> Outcome | None:
    """An error is a run failure (status not completed, nor cancelled by a stopped run); a
    failure is the task's (success 0)."""
    if episode.get("status") == "cancelled":
        return "cancelled"
    if episode.get("status") != "completed":
        return "error"
    success = success_of(episode)
    return None if success is None else ("success" if success else "failure")


def served(run_dir: RunDir, path: Path) -> Path:
    """The real path of a file of the run folder about to be served; refused if a link
    (anywhere on the way) leads out of the run folder."""
    return contained(run_dir.root, path, field=f"run {run_dir.root.name}")


def episode_folder(run_dir: RunDir, index: int) -> Path:
    folder = served(run_dir, run_dir.episode_dir(index))
    if not folder.is_dir():
        raise EpisodeNotFoundError(f"episode {index} of run {run_dir.root.name} does not exist")
    return folder


def episode_log(run_dir: RunDir, index: int) -> dict[str, Any]:
    episode_folder(run_dir, index)
    path = served(run_dir, run_dir.episode_log_path(index))
    if not path.exists():
        return {"records": [], "torn_lines": 0}
    read = read_jsonl(path)
    return {"records": list(read.records), "torn_lines": read.torn_lines}


def episode_assets(run_dir: RunDir, index: int) -> list[str]:
    episode_folder(run_dir, index)
    folder = served(run_dir, run_dir.episode_assets_dir(index))
    if not folder.is_dir():
        return []
    return sorted(p.name for p in folder.iterdir() if _servable(folder, p))


def asset_path(run_dir: RunDir, index: int, name: str) -> Path:
    episode_folder(run_dir, index)
    check_name("asset", name, field="asset")
    folder = served(run_dir, run_dir.episode_assets_dir(index))  # the real assets folder
    path = contained(folder, folder / name, field="asset")
    if not path.is_file():
        raise AssetNotFoundError(f"asset: {name!r} does not exist in episode {index}")
    return path


def _servable(folder: Path, path: Path) -> bool:
    try:
        return contained(folder, path).is_file()
    except UserInputError:
        return False


def log_tail(path: Path) -> str:
    if not path.exists():
        return ""
    with path.open("rb") as handle:
        handle.seek(max(0, path.stat().st_size - LOG_TAIL_BYTES))
        return handle.read().decode("utf-8", "replace")
