"""Reading run folders for the API: listing, episodes, logs, assets (comparison: eval.comparison).

A run's per-episode records come from its final summary once it has ended, and from its
``episodes.jsonl`` index while it runs (agentcanvas.eval.records); the cache follows a live
index incrementally, so a page of a 10,000-episode run costs what the new lines cost.

Every file read here is validated against its typed model (:mod:`agentcanvas.eval.records`:
summary.json as ``EvalRun``, episode.json as ``EpisodeResult``, index lines as records;
spec.json as ``RunSpec``); a file off its model is a ``DamagedRunError`` (422) naming the
run, the file and the field. :func:`served` checks the JSON files the routes read through
it (episode.json, spec.json, graph.json) before they are parsed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from agentcanvas.errors import (
    AgentCanvasError,
    AssetNotFoundError,
    DamagedRunError,
    EpisodeNotFoundError,
    NotFoundError,
    RunNotFoundError,
    UserInputError,
)
from agentcanvas.eval import comparison
from agentcanvas.eval.comparison import success_of
from agentcanvas.eval.records import (
    IndexTail,
    model_problem,
    read_episode,
    read_json_object,
    read_summary,
    summary_is_complete,
)
from agentcanvas.eval.run_index import RunIndex, RunQuery, compact_row, with_state
from agentcanvas.eval.run_spec import RunSpec
from agentcanvas.eval.store import RunDir
from agentcanvas.fileio import read_jsonl
from agentcanvas.paths import check_name, contained, safe_child

LOG_TAIL_BYTES = 200_000
MAX_SPEC_BYTES = 16 * 1024 * 1024  # a spec holds its frozen graph
MAX_LOG_BYTES = 64 * 1024 * 1024  # an episode's firing log served whole
Outcome = Literal["success", "failure", "error", "cancelled"]


@dataclass
class RunCache:
    """summary.json contents keyed by run id, reloaded when the file changes; the records
    of a live run from its index, followed incrementally."""

    runs_dir: Path
    unwritten: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """The scheduler's state of runs whose end the disk could not take yet: shown over
    their summary.json (status, error, health) by every read here."""
    _cache: dict[str, tuple[tuple[int, int], dict[str, Any]]] = field(default_factory=dict)
    _tails: dict[str, IndexTail] = field(default_factory=dict)
    _index: RunIndex = field(init=False)

    def __post_init__(self) -> None:
        self._index = RunIndex(self.runs_dir, self.unwritten)

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
            raise DamagedRunError(f"run {run_id}: summary.json: missing") from exc
        key = (stat.st_mtime_ns, stat.st_size)
        cached = self._cache.get(run_id)
        if cached is None or cached[0] != key:
            cached = (key, read_summary(path, f"run {run_id}: summary.json"))
            self._cache[run_id] = cached
        return with_state(cached[1], self.unwritten.get(run_id))

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


PAIRING_FIELDS = ("task", "episode_index")  # what comparison pairs records by


def comparable(summary: dict[str, Any]) -> dict[str, Any]:
    """``summary`` when each record names its task and episode index (what comparison pairs
    by); DamagedRunError naming the run, the file and the field of the first that does not."""
    for position, episode in enumerate(summary.get("episodes", [])):
        for key in PAIRING_FIELDS:
            if key not in episode:
                raise DamagedRunError(
                    f"run {summary.get('run_id')}: summary.json (or episodes.jsonl): field "
                    f"'episodes.{position}.{key}': missing, so the run cannot be compared"
                )
    return summary


MCNEMAR_ALPHA = 0.05


def compare_runs(
    a: dict[str, Any], b: dict[str, Any], run_a: RunDir | None = None, run_b: RunDir | None = None
) -> dict[str, Any]:
    """The compare route: :func:`agentcanvas.eval.comparison.compare_runs` of two runs, with
    their frozen graphs when their folders are given (None for one that cannot be read: the
    answer says so), its McNemar test's verdict at ``MCNEMAR_ALPHA`` said (the page words
    it, never decides it)."""
    graphs = None
    if run_a is not None and run_b is not None:
        graphs = (frozen_graph(run_a), frozen_graph(run_b))
    result = comparison.compare_runs(comparable(a), comparable(b), graphs)
    test = result["mcnemar"]
    test["alpha"] = MCNEMAR_ALPHA
    test["significant"] = test["p_value"] is not None and test["p_value"] < MCNEMAR_ALPHA
    return result


def frozen_graph(run_dir: RunDir) -> dict[str, Any] | None:
    """The graph the run ran: graph.json, else spec.json's; None when neither reads."""
    for path in (run_dir.graph_path, run_dir.spec_path):
        if not path.exists():
            continue
        try:
            real = contained(run_dir.root, path, field=f"run {run_dir.root.name}")
            data = check_json_file(run_dir, path, real)
        except AgentCanvasError:  # a damaged or linked-away file: the answer says so
            return None
        graph = data.get("graph") if path == run_dir.spec_path else data
        return graph if isinstance(graph, dict) else None
    return None


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
        episodes = [e for e in episodes if outcome_of(e) == outcome]
    key, _, order = sort.rpartition(":")
    if key in ("index", "steps", "status", "task"):
        episodes = sorted(
            episodes, key=lambda e: (e.get(key) is None, e.get(key)), reverse=order == "desc"
        )
    elif key.startswith(METRIC_SORT):
        episodes = _by_metric(episodes, key.removeprefix(METRIC_SORT), order == "desc")
    shown = [{**e, "outcome": outcome_of(e)} for e in episodes[offset : offset + limit]]
    return {"total": len(episodes), "episodes": shown}


METRIC_SORT = "metric."  # sort=metric.<name>:asc|desc


def _by_metric(episodes: list[dict[str, Any]], name: str, desc: bool) -> list[dict[str, Any]]:
    """Numeric order of a metric (stable; episodes without a number last either way)."""

    def value(episode: dict[str, Any]) -> float | None:
        metrics = episode.get("metrics")
        v = metrics.get(name) if isinstance(metrics, dict) else None
        return float(v) if isinstance(v, int | float) and math.isfinite(v) else None

    numbered = [e for e in episodes if value(e) is not None]
    return [
        *sorted(numbered, key=lambda e: value(e) or 0.0, reverse=desc),
        *(e for e in episodes if value(e) is None),
    ]


def outcome_of(episode: dict[str, Any]) -> Outcome | None:
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
    (anywhere on the way) leads out of the run folder. An episode.json, spec.json or
    graph.json is validated first (:func:`check_json_file`)."""
    real = contained(run_dir.root, path, field=f"run {run_dir.root.name}")
    if path.name in _CHECKED:
        check_json_file(run_dir, path, real)
    return real


_CHECKED = frozenset({"episode.json", "spec.json", "graph.json"})


def check_json_file(run_dir: RunDir, path: Path, real: Path) -> dict[str, Any]:
    """A run folder's episode.json (``EpisodeResult``, bounded), spec.json (``RunSpec``)
    or graph.json (an object), validated; DamagedRunError naming the file and the field.
    A missing episode.json is left to its route (404); a missing spec is a 404."""
    name = f"run {run_dir.root.name}: {path.relative_to(run_dir.root)}"
    if path.name == "episode.json":
        if not real.exists():
            return {}
        return read_episode(real, name)
    if not real.exists():
        raise NotFoundError(f"{name} does not exist")
    data = read_json_object(real, name, MAX_SPEC_BYTES)
    if path.name == "spec.json":
        problem = model_problem(RunSpec, data)
        if problem is not None:
            raise DamagedRunError(f"{name}: {problem}")
    return data


def read_episode_record(run_dir: RunDir, index: int) -> dict[str, Any]:
    """Episode ``index``'s episode.json, validated, with its ``assets`` (the episode route's
    answer; 404 when the episode has no record yet)."""
    episode_folder(run_dir, index)
    path = run_dir.episode_json_path(index)
    real = contained(run_dir.root, path, field=f"run {run_dir.root.name}")
    if not real.exists():
        raise EpisodeNotFoundError(
            f"episode {index} of run {run_dir.root.name}: episode.json does not exist"
        )
    record = check_json_file(run_dir, path, real)
    return {**record, "assets": episode_assets(run_dir, index)}


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
    if path.stat().st_size > MAX_LOG_BYTES:
        name = (
            f"run {run_dir.root.name}: {run_dir.episode_log_path(index).relative_to(run_dir.root)}"
        )
        raise DamagedRunError(f"{name}: larger than {MAX_LOG_BYTES} bytes, not read")
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
