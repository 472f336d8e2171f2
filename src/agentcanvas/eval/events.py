"""Live events: what the backend's WebSocket ``/ws`` sends, one tagged union on ``type``.

Every producer builds one of these models (the runner, the backend's relay of subprocess
runs, the cancel route, canvas Play); the wire form is :meth:`LiveEventBase.wire`, the JSON
the dashboard reads (``api/web/js/live.js``, ``page_run.js``, ``page_runs.js``)::

    eval_episode_done  {type, source: "eval", run_id, episode}       one per finished episode
    eval_progress      {type, source: "eval", run_id, episodes_done, episodes_total,
                        success_rate}                                 one per finished episode
                   or  {type, source: "eval", run_id, summary}        a subprocess run's status
    eval_complete      {type, source: "eval", run_id, status}         once per run, at the end
    eval_waiting       {type, source: "eval", run_id, reason, waited_s, deadline_s,
                        placement}                                    while a run waits to start
    nav_status, nav_step, exec_log  {type, source: "canvas", ...}     canvas Play, the
                                                                      executor's fields as-is

:data:`LIVE_EVENT` reads one back from JSON (the subprocess's ``events.jsonl``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Final, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    TypeAdapter,
    model_serializer,
    model_validator,
)

from agentcanvas.eval.config import EpisodeResult

__all__ = [
    "LIVE_EVENT",
    "Broadcast",
    "CanvasEvent",
    "EvalComplete",
    "EvalEpisodeDone",
    "EvalProgress",
    "EvalWaiting",
    "LiveEvent",
    "LiveEventBase",
]

_COUNTS: Final = (
    "episodes_done",
    "episodes_total",
    "success_rate",
    "success_n",
    "error_count",
    "success_cs",
    "success_cs_n",
)


class LiveEventBase(BaseModel):
    """Base of every event: immutable, its wire form one call away."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    def wire(self) -> dict[str, Any]:
        """The JSON object sent to WebSocket clients."""
        return self.model_dump(mode="json")


class EvalEpisodeDone(LiveEventBase):
    """An episode of a run finished (its record, as in episode.json)."""

    type: Literal["eval_episode_done"] = "eval_episode_done"
    source: Literal["eval"] = "eval"
    run_id: str
    episode: EpisodeResult


class EvalProgress(LiveEventBase):
    """A run's progress: its counts after an episode, or (subprocess runs) its summary
    without the episode records when its status changes. Exactly one of the two shapes."""

    type: Literal["eval_progress"] = "eval_progress"
    source: Literal["eval"] = "eval"
    run_id: str
    episodes_done: int | None = None
    episodes_total: int | None = None
    success_rate: float | None = Field(
        default=None, description="Mean success over the scored episodes aggregated so far."
    )
    success_n: int | None = Field(
        default=None, description="How many scored episodes `success_rate` covers."
    )
    error_count: int | None = Field(
        default=None,
        description="Episodes so far that ended in error, exception, timeout or no_verdict "
        "(never scored: not in `success_rate`).",
    )
    success_cs: list[float] | None = Field(
        default=None,
        description="[lo, hi]: the success rate's anytime-valid confidence sequence on the "
        "plan-order prefix of finished episodes (beta-binomial mixture, Howard et al. 2021): "
        "valid however often it is looked at, unlike the final summary's fixed-n interval.",
    )
    success_cs_n: int | None = Field(
        default=None, description="Scored episodes of the prefix `success_cs` rests on."
    )
    summary: dict[str, Any] | None = Field(
        default=None, description="summary.json without `episodes` (the status-change shape)."
    )

    @model_validator(mode="after")
    def _one_shape(self) -> EvalProgress:
        counted = self.episodes_done is not None and self.episodes_total is not None
        if (self.summary is not None) != counted:
            return self
        raise ValueError(
            "eval_progress carries either episodes_done and episodes_total, or summary"
        )

    @model_serializer(mode="wrap")
    def _wire_shape(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        for key in _COUNTS if self.summary is not None else ("summary",):
            data.pop(key, None)
        if self.success_cs is None:  # before the first scored episode of the prefix
            data.pop("success_cs", None)
            data.pop("success_cs_n", None)
        return data


class EvalComplete(LiveEventBase):
    """A run ended with ``status`` (sent once, after its last episode events)."""

    type: Literal["eval_complete"] = "eval_complete"
    source: Literal["eval"] = "eval"
    run_id: str
    status: str


class EvalWaiting(LiveEventBase):
    """A run waits before its first episode, and why (the Ray engine: for its placement
    group, with what the cluster has free, as ``/queue`` says). Sent every few seconds while
    it waits; the run fails once ``waited_s`` reaches ``deadline_s``."""

    type: Literal["eval_waiting"] = "eval_waiting"
    source: Literal["eval"] = "eval"
    run_id: str
    reason: str
    waited_s: float
    deadline_s: float
    placement: dict[str, Any] | None = Field(
        default=None, description="state, placement_group, strategy, bundles (as /queue)."
    )


class CanvasEvent(LiveEventBase):
    """A step of canvas Play, with the executor's fields (step, node, status, ...) as-is."""

    model_config = ConfigDict(frozen=True, extra="allow")

    type: Literal["nav_status", "nav_step", "exec_log"]
    source: Literal["canvas"] = "canvas"


LiveEvent = Annotated[
    EvalEpisodeDone | EvalProgress | EvalComplete | EvalWaiting | CanvasEvent,
    Field(discriminator="type"),
]
LIVE_EVENT: Final[TypeAdapter[LiveEvent]] = TypeAdapter(LiveEvent)
Broadcast = Callable[[LiveEvent], None]
"""Whoever takes events: the backend's WebSocket fan-out, the events file, the CLI's bar."""
