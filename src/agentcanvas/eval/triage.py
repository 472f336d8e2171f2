"""Failure triage: a run's episodes that did not succeed, grouped by cause, biggest first.

:func:`triage` is pure: given a run's episode records it puts every episode that did not
succeed in one :class:`FailureGroup` per cause — an exception's type and message, a node's
error, what timed out (with the node named), a lost worker, the step budget, the env's own
verdict, no verdict, a cancel — with numbers and ids in the messages normalised
(:func:`normalise`), so that ``boom at step 3`` and ``boom at step 7`` are one cause. Each
group has its count, its episodes (run indices) and their tasks; the groups are sorted by
count, largest first (then by kind, node and cause, so the order is always the same).
:func:`triage_run` reads a run folder's records and triages them (``agentcanvas failures
RUN``, the REST route and the run page show it).

Records written before ``end_reason`` existed are triaged too: :func:`end_reason_of` infers
their reason from the status, the metrics and the step budget.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any, Final, Literal

from pydantic import BaseModel, Field

from agentcanvas.eval.config import EndReason, EpisodeResult
from agentcanvas.eval.episode_result import succeeded
from agentcanvas.eval.records import episode_records, read_summary
from agentcanvas.eval.store import RunDir

__all__ = [
    "FAILURE_KINDS",
    "FailureGroup",
    "FailureKind",
    "FailureTriage",
    "cause_of",
    "end_reason_of",
    "normalise",
    "triage",
    "triage_run",
]

FailureKind = Literal[
    "exception",
    "node_error",
    "timeout",
    "worker_lost",
    "budget_exhausted",
    "env_verdict",
    "no_verdict",
    "cancelled",
]

FAILURE_KINDS: Final[dict[FailureKind, str]] = {
    "exception": "an exception outside the node calls ended it (cause: its type and message)",
    "node_error": "a node failed (node: the first by id; cause: its error)",
    "timeout": "a wall-clock deadline ended it (node: the call it waited for, when known)",
    "worker_lost": "its worker's env server or Ray actor died on every attempt",
    "budget_exhausted": "the step budget ran out before the env said done, without success",
    "env_verdict": "the env ended it without success (a failure the agent earned)",
    "no_verdict": "the graph completed without metrics: nothing to score",
    "cancelled": "the run was cancelled or stopped while it ran (not the agent's doing)",
}
"""Every kind of failure with what it means."""

_KIND_OF: Final[dict[EndReason, FailureKind]] = {
    "exception": "exception",
    "error": "node_error",
    "timeout": "timeout",
    "worker_lost": "worker_lost",
    "budget_exhausted": "budget_exhausted",
    "env_done": "env_verdict",
    "no_verdict": "no_verdict",
    "cancelled": "cancelled",
}
_REASON_OF_STATUS: Final[dict[str, EndReason]] = {
    "timeout": "timeout",
    "exception": "exception",
    "error": "error",
    "no_verdict": "no_verdict",
    "cancelled": "cancelled",
}
_FIXED_CAUSE: Final[dict[FailureKind, str]] = {
    "budget_exhausted": "the step budget ran out before the env said done",
    "env_verdict": "the env ended the episode without success",
    "no_verdict": "the graph completed without metrics (no graphOut value)",
    "cancelled": "cancelled with the run",
}
MAX_CAUSE_CHARS: Final = 300

_UUID = re.compile(
    r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b"
)
_ADDRESS = re.compile(r"\b0x[0-9a-fA-F]+\b")
_HEX_ID = re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{8,}\b")
# Not inside a name (policy2, env_3), but each part of 20260101_000000:17.
_NUMBER = re.compile(r"(?<![A-Za-z<\d])(?<![A-Za-z]_)\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")


class FailureGroup(BaseModel):
    """Episodes that did not succeed for the same cause."""

    kind: FailureKind = Field(description="What ended them (see FAILURE_KINDS).")
    cause: str = Field(
        description="The cause, the same for every episode of the group: the error with "
        "numbers and ids normalised (<n>, <id>), or a fixed sentence for budget_exhausted, "
        "env_verdict, no_verdict and cancelled."
    )
    node: str | None = Field(
        default=None, description="The node to blame (node_error, timeout), when there is one."
    )
    count: int = Field(description="How many episodes of the run ended so.")
    episodes: list[int] = Field(description="Their run indices, ascending.")
    tasks: list[str] = Field(description="Their tasks, each once, sorted.")
    example: str = Field(description="The first episode's error as recorded (not normalised).")


class FailureTriage(BaseModel):
    """A run's episodes that did not succeed, grouped by cause, largest group first."""

    episodes: int = Field(description="Episode records looked at.")
    succeeded: int = Field(description="Of those, episodes that ended in success.")
    failed: int = Field(description="Of those, episodes that did not (the groups' counts).")
    groups: list[FailureGroup] = Field(
        description="One per cause, by count (largest first), then kind, node and cause."
    )


def normalise(message: str) -> str:
    """``message`` with what differs between episodes of one cause replaced: UUIDs, hex
    addresses and long hex ids by ``<id>``, numbers by ``<n>`` (a number inside a name,
    ``policy2``, is kept); cut to MAX_CAUSE_CHARS."""
    text = _UUID.sub("<id>", message)
    text = _ADDRESS.sub("<id>", text)
    text = _HEX_ID.sub("<id>", text)
    text = _NUMBER.sub("<n>", text)
    return text if len(text) <= MAX_CAUSE_CHARS else text[:MAX_CAUSE_CHARS] + "…"


def end_reason_of(record: EpisodeResult) -> EndReason:
    """The record's end reason; for a record written before the field existed, inferred:
    a completed episode's success, else the step budget when it used all of it, else the
    env; every other status is the reason of its name."""
    if record.end_reason is not None:
        return record.end_reason
    if record.status != "completed":
        return _REASON_OF_STATUS[record.status]
    if succeeded(record.metrics):
        return "success"
    budget = record.step_budget
    return "budget_exhausted" if budget is not None and record.steps >= budget else "env_done"


def cause_of(record: EpisodeResult) -> tuple[FailureKind, str | None, str] | None:
    """``(kind, node, cause)`` of an episode that did not succeed; None for a success."""
    reason = end_reason_of(record)
    if reason == "success":
        return None
    kind = _KIND_OF[reason]
    if kind in _FIXED_CAUSE:
        return kind, None, _FIXED_CAUSE[kind]
    node = record.failed_node
    if node is None and kind in ("node_error", "timeout") and record.node_errors:
        node = min(record.node_errors)
    message = record.node_errors.get(node, "") if node is not None else ""
    return kind, node, normalise(message or record.error or f"ended {record.status}")


def triage(records: Iterable[EpisodeResult | Mapping[str, Any]]) -> FailureTriage:
    """Group the records that did not succeed by cause (see the module's doc)."""
    groups: dict[tuple[FailureKind, str | None, str], list[EpisodeResult]] = {}
    total = 0
    for raw in records:
        record = raw if isinstance(raw, EpisodeResult) else EpisodeResult.model_validate(raw)
        total += 1
        key = cause_of(record)
        if key is not None:
            groups.setdefault(key, []).append(record)
    order = list(FAILURE_KINDS)
    keys = sorted(groups, key=lambda k: (-len(groups[k]), order.index(k[0]), k[1] or "", k[2]))
    found = [_group(key, groups[key]) for key in keys]
    failed = sum(g.count for g in found)
    return FailureTriage(episodes=total, succeeded=total - failed, failed=failed, groups=found)


def _group(key: tuple[FailureKind, str | None, str], members: list[EpisodeResult]) -> FailureGroup:
    members = sorted(members, key=lambda r: r.index)
    kind, node, cause = key
    first = members[0]
    example = (first.node_errors.get(node, "") if node else "") or first.error or cause
    return FailureGroup(
        kind=kind,
        cause=cause,
        node=node,
        count=len(members),
        episodes=[r.index for r in members],
        tasks=sorted({r.task for r in members}),
        example=example,
    )


def triage_run(run_dir: RunDir) -> FailureTriage:
    """:func:`triage` of a run folder's records: the summary's when the run ended, else the
    index's (a live run, or one a crash stopped). DamagedRunError for an unreadable summary."""
    summary = read_summary(run_dir.summary_path)
    return triage(episode_records(run_dir, summary))
