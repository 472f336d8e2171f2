"""EpisodeResult: one episode's self-describing record, and the words it ends with.

The record is ``episode.json``, a line of ``episodes.jsonl`` and an entry of summary.json
(``agentcanvas.eval.records``). Besides its ``status`` it says *why* the episode ended
(``end_reason``, one of :data:`END_REASONS`) and, when a node is to blame, which one
(``failed_node``). An error carries its message (``error``, ``node_errors`` per node); an
exception that ended the episode also its traceback (``traceback``), and each in-process node
that raised its own (``node_tracebacks``), both bounded (``graph.summarize.format_traceback``).

Records written before these fields existed still load: the fields are then unset (None or
empty), and :func:`agentcanvas.eval.triage.end_reason_of` infers a reason from the rest.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Literal

from pydantic import BaseModel, Field

__all__ = [
    "END_REASONS",
    "RUN_FORMAT_VERSION",
    "STATUS_OF_END",
    "EndReason",
    "EpisodeResult",
    "EpisodeStatus",
    "MetricValue",
    "succeeded",
]

RUN_FORMAT_VERSION: Literal[1] = 1
EpisodeStatus = Literal["completed", "timeout", "exception", "error", "no_verdict", "cancelled"]
MetricValue = float | int | bool | str | None

EndReason = Literal[
    "success",
    "env_done",
    "budget_exhausted",
    "timeout",
    "error",
    "exception",
    "worker_lost",
    "no_verdict",
    "cancelled",
]

END_REASONS: Final[dict[EndReason, str]] = {
    "success": "completed, and its success metric is true",
    "env_done": "completed: the env signalled done without success (or the graph scores no "
    "success metric)",
    "budget_exhausted": "completed: the step budget ran out before the env signalled done, "
    "without success",
    "timeout": "a wall-clock deadline ended it: a node-set call's (failed_node is that node), "
    "a panel call's, or the episode's safety net (failed_node is a node still running then)",
    "error": "a node failed (node_errors; failed_node is the first by id), or the episode was "
    "refused before it ran (a step budget below 1)",
    "exception": "an exception outside the node calls, e.g. the env could not start the "
    "episode (traceback holds where it was raised)",
    "worker_lost": "its worker's env server or Ray actor died on every attempt",
    "no_verdict": "the graph completed without metrics (no graphOut value): nothing to score",
    "cancelled": "the run was cancelled, interrupted, or stopped by a rule or its error budget "
    "while the episode ran",
}
"""Every end reason with what it means (the field's documentation, also served)."""

STATUS_OF_END: Final[dict[EndReason, EpisodeStatus]] = {
    "success": "completed",
    "env_done": "completed",
    "budget_exhausted": "completed",
    "timeout": "timeout",
    "error": "error",
    "exception": "exception",
    "worker_lost": "exception",
    "no_verdict": "no_verdict",
    "cancelled": "cancelled",
}
"""The status an episode with each end reason has."""


def succeeded(metrics: Mapping[str, Any]) -> bool:
    """Whether ``metrics`` score a success: a ``success`` value that is truthy (as the
    comparisons read it)."""
    value = metrics.get("success")
    return value is not None and bool(value)


class EpisodeResult(BaseModel):
    """One episode's self-describing record (episode.json, and an entry of summary.json)."""

    version: Literal[1] = RUN_FORMAT_VERSION
    index: int = Field(description="Position in the run (0 … episodes_total-1).")
    episode_id: str = ""
    task: str = ""
    episode_index: int = Field(description="The env's episode index within its task.")
    seed: int
    status: EpisodeStatus
    steps: int = 0
    metrics: dict[str, MetricValue] = Field(
        default_factory=dict,
        description="The scored metrics: those of a completed episode (empty otherwise).",
    )
    partial_metrics: dict[str, MetricValue] = Field(
        default_factory=dict,
        description="What an episode that did not complete had harvested before it ended "
        "(the seed's partial results): kept, never scored.",
    )
    error: str | None = None
    node_errors: dict[str, str] = Field(default_factory=dict)
    attempts: int = 1
    step_budget: int | None = None
    scene_id: str = ""
    instruction: str = ""
    duration_s: float = 0.0
    end_reason: EndReason | None = Field(
        default=None,
        description="Why the episode ended: "
        + "; ".join(f"{name}: {meaning}" for name, meaning in END_REASONS.items())
        + ". None in records written before the field existed.",
    )
    failed_node: str | None = Field(
        default=None,
        description="The node whose failure or deadline ended the episode (end reasons error "
        "and timeout), when a node is to blame.",
    )
    traceback: str | None = Field(
        default=None,
        description="The traceback of the exception that ended the episode, bounded in lines "
        "and bytes (innermost frames kept); None when no exception did.",
    )
    node_tracebacks: dict[str, str] = Field(
        default_factory=dict,
        description="Per node id, the bounded traceback of the exception an in-process node "
        "raised (its message is in node_errors).",
    )

    def identity(self) -> dict[str, Any]:
        """The fields that must be bit-identical across worker counts.

        Wall time and supervision retries (``attempts``) are how a run went, not what it
        scored; tracebacks name files, which differ where the code was shipped (Ray).
        """
        return self.model_dump(exclude={"duration_s", "attempts", "traceback", "node_tracebacks"})
