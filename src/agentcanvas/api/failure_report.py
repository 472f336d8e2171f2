"""Why a run's episodes failed, as ``agentcanvas failures`` prints it and the REST route and
the run page serve it: :func:`agentcanvas.eval.triage.triage`'s groups, each with its kind in
plain words (``label``), what the kind means, and the traceback of its example episode; and
how many episodes a retry of ``errors`` or ``failures`` would run again.

Pure: records in, a :class:`FailureReport` out (no FastAPI here, so the CLI imports it
without the web stack). The words for one record's failure — its end reason and the first
line of its message — are :func:`record_problem`'s, used by the CLI's tables too.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

from pydantic import BaseModel, Field

from agentcanvas.eval.config import EpisodeResult
from agentcanvas.eval.episode_result import succeeded
from agentcanvas.eval.health import ERROR_STATUSES
from agentcanvas.eval.triage import FAILURE_KINDS, FailureGroup, FailureKind, triage

__all__ = [
    "MAX_MESSAGE_CHARS",
    "FailureGroupReport",
    "FailureReport",
    "failure_report",
    "first_line",
    "kind_label",
    "record_message",
    "record_problem",
]

MAX_MESSAGE_CHARS: Final = 200
"""A message shown in a table or a list: its first line, cut to this many characters."""

_LABELS: Final[dict[FailureKind, str]] = {
    "exception": "exception outside the nodes",
    "node_error": "exception in a node",
    "timeout": "timed out",
    "worker_lost": "worker lost (its env server died on every attempt)",
    "budget_exhausted": "budget exhausted",
    "env_verdict": "the env said it failed",
    "no_verdict": "no verdict (no metrics to score)",
    "cancelled": "cancelled with the run",
}


class FailureGroupReport(FailureGroup):
    """A group of :class:`~agentcanvas.eval.triage.FailureGroup` with its words."""

    label: str = Field(description="The kind in plain words, with the node when there is one.")
    meaning: str = Field(description="What the kind means (FAILURE_KINDS).")
    example_episode: int = Field(description="The run index of the example (its first episode).")
    example_traceback: str | None = Field(
        default=None,
        description="The example episode's traceback (the node's, for a node error), as "
        "recorded: bounded in lines and bytes. None when none was recorded.",
    )


class FailureReport(BaseModel):
    """A run's episodes that did not succeed, grouped by cause, largest group first."""

    run_id: str
    episodes: int = Field(description="Episode records looked at.")
    succeeded: int = Field(description="Of those, episodes that ended in success.")
    failed: int = Field(description="Of those, episodes that did not (the groups' counts).")
    errors: int = Field(
        description="Episodes a retry of 'errors' would run again (ended error, exception, "
        "timeout or no_verdict)."
    )
    retryable_failures: int = Field(
        description="Episodes a retry of 'failures' would run again (the errors, and completed "
        "episodes whose success is falsy; cancelled ones are not)."
    )
    groups: list[FailureGroupReport]


def kind_label(kind: FailureKind, node: str | None) -> str:
    """A kind in plain words: ``exception in node mid``, ``budget exhausted``…"""
    if kind == "node_error" and node:
        return f"exception in node {node}"
    if kind == "timeout" and node:
        return f"timed out in node {node}"
    return _LABELS[kind]


def first_line(text: str, max_chars: int = MAX_MESSAGE_CHARS) -> str:
    """The first non-empty line of ``text``, cut to ``max_chars`` (with an ellipsis)."""
    line = next((part.strip() for part in text.splitlines() if part.strip()), "")
    return line if len(line) <= max_chars else line[: max_chars - 1] + "…"


def record_message(record: EpisodeResult) -> str:
    """What went wrong, from the record's fields: the failed node's own error (the first line,
    bounded; with how many other nodes failed), else the episode's error; "" for none."""
    node = record.failed_node
    if node is None and record.node_errors:
        node = min(record.node_errors)
    if node is not None and record.node_errors.get(node):
        others = len(record.node_errors) - 1
        more = f" (+{others} other node(s))" if others > 0 else ""
        return f"node {node}: {first_line(record.node_errors[node])}{more}"
    return first_line(record.error or "")


def record_problem(record: EpisodeResult) -> str:
    """``status (end reason): message`` of a record that did not succeed; the end reason only
    where it says more than the status."""
    reason = record.end_reason
    head = record.status if reason in (None, record.status) else f"{record.status} ({reason})"
    message = record_message(record)
    return f"{head}: {message}" if message else head


def _traceback(record: EpisodeResult, node: str | None) -> str | None:
    if node is not None and node in record.node_tracebacks:
        return record.node_tracebacks[node]
    return record.traceback or next(iter(record.node_tracebacks.values()), None)


def failure_report(run_id: str, raw: Iterable[EpisodeResult | Mapping[str, Any]]) -> FailureReport:
    """The report of a run's episode records (see the module's doc)."""
    records = [r if isinstance(r, EpisodeResult) else EpisodeResult.model_validate(r) for r in raw]
    by_index = {r.index: r for r in records}
    found = triage(records)
    groups = [
        FailureGroupReport(
            **group.model_dump(),
            label=kind_label(group.kind, group.node),
            meaning=FAILURE_KINDS[group.kind],
            example_episode=group.episodes[0],
            example_traceback=_traceback(by_index[group.episodes[0]], group.node),
        )
        for group in found.groups
    ]
    errors = sum(r.status in ERROR_STATUSES for r in records)
    task_failures = sum(r.status == "completed" and not succeeded(r.metrics) for r in records)
    return FailureReport(
        run_id=run_id,
        episodes=found.episodes,
        succeeded=found.succeeded,
        failed=found.failed,
        errors=errors,
        retryable_failures=errors + task_failures,
        groups=groups,
    )
