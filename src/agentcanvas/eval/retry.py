"""Retry: a new run of some of a run's episodes, with the same seeds, linked to the original.

A retry run's config lists its episodes explicitly (``EvalConfig.episodes``, each a
``(task, episode_index)``) and names the original (``retry_of``). Seeds derive from the run
seed and that identity (``eval.seeding``), and the retry keeps the original's seed, so each
retried episode starts exactly as it did the first time; its run indices are 0..k-1, and
comparisons, which pair episodes by ``(task, episode_index)``, pair it with the original.
The original run is only read, never written.

- :func:`parse_selection`: ``"errors"``, ``"failures"`` or run indices ``"3,17,40-45"``;
- :func:`select_episodes`: the episodes of a run folder a selection names —
  ``errors``: those that ended error, exception, timeout or no_verdict; ``failures``: those
  and the completed ones whose success is falsy; indices: those run indices of its plan;
- :func:`retry_config`: the new run's config, from the original's ``spec.json``;
  :func:`original_graph`: the graph to run it with (the original's, frozen in its spec).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, Literal

from agentcanvas.errors import RunNotFoundError, UserInputError
from agentcanvas.eval.config import EpisodeRef, EpisodeResult, EvalConfig
from agentcanvas.eval.episode_plan import plan_episodes
from agentcanvas.eval.episode_result import succeeded
from agentcanvas.eval.health import ERROR_STATUSES
from agentcanvas.eval.records import recorded_results
from agentcanvas.eval.run_spec import RunSpec
from agentcanvas.eval.store import RunDir
from agentcanvas.graph.model import Graph

__all__ = [
    "SELECTION_KEYWORDS",
    "Selection",
    "original_graph",
    "parse_indices",
    "parse_selection",
    "retry_config",
    "select_episodes",
]

Selection = Literal["errors", "failures"] | Sequence[int]
"""Which episodes of a run to retry: a keyword, or run indices."""

SELECTION_KEYWORDS: Final[dict[str, str]] = {
    "errors": "episodes that ended error, exception, timeout or no_verdict",
    "failures": "the errors, and completed episodes whose success is falsy",
}
MAX_SELECTED: Final = 1_000_000

# What a retry does not take over from the original: the plan's shape (the episodes are
# listed instead) and what would stop it before every listed episode ran.
_NOT_RETRIED: Final = {
    "tasks": None,
    "start_index": 0,
    "until_halfwidth": None,
    "until_decided_vs": None,
    "max_errors": None,
}


def parse_indices(text: str) -> list[int]:
    """Run indices from ``"3,17,40-45"`` (each once, ascending); UserInputError naming the
    part that is not an index (>= 0) or an ascending range ``a-b``."""
    indices: set[int] = set()
    parts = [part.strip() for part in text.split(",")]
    if not any(parts):
        raise UserInputError(f"selection {text!r}: give run indices like 3,17,40-45")
    for part in parts:
        low, dash, high = part.partition("-")
        if not _is_index(low) or (dash and not _is_index(high)):
            raise UserInputError(
                f"selection {text!r}: {part!r} is not a run index or a range like 40-45"
            )
        first, last = int(low), int(high) if dash else int(low)
        if last < first:
            raise UserInputError(
                f"selection {text!r}: range {part!r} goes down; write {last}-{first}"
            )
        if last - first + len(indices) >= MAX_SELECTED:
            raise UserInputError(f"selection {text!r}: more than {MAX_SELECTED} episodes")
        indices.update(range(first, last + 1))
    return sorted(indices)


def _is_index(text: str) -> bool:
    return text.isascii() and text.isdigit()


def parse_selection(text: str) -> Selection:
    """``errors``, ``failures`` (see SELECTION_KEYWORDS) or run indices (`parse_indices`)."""
    word = text.strip().lower()
    if word == "errors":
        return "errors"
    if word == "failures":
        return "failures"
    return parse_indices(text)


def select_episodes(run_dir: RunDir, selection: Selection) -> list[EpisodeRef]:
    """The episodes of the run in ``run_dir`` that ``selection`` names, in its run-index
    order. UserInputError when it names none, or an index the run did not plan."""
    spec = _spec(run_dir)
    run_id = run_dir.root.name
    if isinstance(selection, str):
        records = recorded_results(run_dir)  # the episode folders: the durable truth
        chosen = [r for r in records if _selected(r, selection)]
        if not chosen:
            raise UserInputError(
                f"run {run_id} has no {SELECTION_KEYWORDS[selection]}: nothing to retry"
            )
        return [EpisodeRef(task=r.task, episode_index=r.episode_index) for r in chosen]
    if not selection:
        raise UserInputError("selection: give at least one run index")
    plan = plan_episodes(spec.config, spec.graph_model(), run_id)
    unknown = [i for i in selection if not 0 <= i < len(plan)]
    if unknown:
        shown = ", ".join(map(str, unknown[:5])) + (" …" if len(unknown) > 5 else "")
        raise UserInputError(
            f"selection: run {run_id} has no episode {shown} (its run indices are "
            f"0-{len(plan) - 1})"
        )
    chosen_specs = [plan[i] for i in sorted(set(selection))]
    return [EpisodeRef(task=s.task, episode_index=s.episode_index) for s in chosen_specs]


def _selected(record: EpisodeResult, keyword: Literal["errors", "failures"]) -> bool:
    if record.status in ERROR_STATUSES:
        return True
    return keyword == "failures" and record.status == "completed" and not succeeded(record.metrics)


def retry_config(run_dir: RunDir, selection: Selection | str) -> EvalConfig:
    """The config of a new run that retries ``selection`` (a Selection, or its text for
    `parse_selection`) of the run in ``run_dir``: the original's graph name, seed, step
    budget, timeouts, attempts, workers, frames, log, certify, interval and engine, exactly
    the selected episodes (``episodes``), and ``retry_of`` the original. Its stop rules and
    error budget are not carried over: a retry runs every episode it lists. Run it with
    :func:`original_graph` (the graph the original ran, frozen in its spec)."""
    chosen = parse_selection(selection) if isinstance(selection, str) else selection
    episodes = select_episodes(run_dir, chosen)
    original = _spec(run_dir).config.model_dump(mode="json")
    update = {**_NOT_RETRIED, "episodes": episodes, "retry_of": run_dir.root.name}
    return EvalConfig.model_validate({**original, **update})


def original_graph(run_dir: RunDir) -> Graph:
    """The graph the run in ``run_dir`` ran (frozen in its spec.json)."""
    return _spec(run_dir).graph_model()


def _spec(run_dir: RunDir) -> RunSpec:
    if not run_dir.spec_path.is_file():
        raise RunNotFoundError(f"no run {run_dir.root.name!r} in {str(run_dir.root.parent)!r}")
    return RunSpec.read(run_dir)
