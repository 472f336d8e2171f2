"""The WebSocket events' wire form is the JSON the dashboard reads, and reads back as itself."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from agentcanvas.eval.config import EpisodeResult
from agentcanvas.eval.events import (
    LIVE_EVENT,
    CanvasEvent,
    EvalComplete,
    EvalEpisodeDone,
    EvalProgress,
    LiveEventBase,
)

EPISODE = EpisodeResult(index=3, episode_index=1, seed=7, status="timeout", metrics={"success": 0})

# Each event next to the dict its producer sent before the models existed.
WIRE: list[tuple[LiveEventBase, dict[str, Any]]] = [
    (
        EvalEpisodeDone(run_id="r1", episode=EPISODE),
        {
            "type": "eval_episode_done",
            "source": "eval",
            "run_id": "r1",
            "episode": EPISODE.model_dump(mode="json"),
        },
    ),
    (
        EvalProgress(
            run_id="r1",
            episodes_done=4,
            episodes_total=9,
            success_rate=0.5,
            success_n=2,
            error_count=2,
        ),
        {
            "type": "eval_progress",
            "source": "eval",
            "run_id": "r1",
            "episodes_done": 4,
            "episodes_total": 9,
            "success_rate": 0.5,
            "success_n": 2,
            "error_count": 2,
        },
    ),
    (
        EvalProgress(
            run_id="r1",
            episodes_done=4,
            episodes_total=9,
            success_rate=0.5,
            success_n=2,
            error_count=0,
            success_cs=[0.1, 0.9],
            success_cs_n=2,
        ),
        {
            "type": "eval_progress",
            "source": "eval",
            "run_id": "r1",
            "episodes_done": 4,
            "episodes_total": 9,
            "success_rate": 0.5,
            "success_n": 2,
            "error_count": 0,
            "success_cs": [0.1, 0.9],
            "success_cs_n": 2,
        },
    ),
    (
        EvalProgress(run_id="r1", summary={"status": "running", "episodes_done": 0}),
        {
            "type": "eval_progress",
            "source": "eval",
            "run_id": "r1",
            "summary": {"status": "running", "episodes_done": 0},
        },
    ),
    (
        EvalComplete(run_id="r1", status="cancelled"),
        {"type": "eval_complete", "source": "eval", "run_id": "r1", "status": "cancelled"},
    ),
    (
        CanvasEvent.model_validate({"type": "nav_status", "status": "running", "budget": 5}),
        {"type": "nav_status", "status": "running", "budget": 5, "source": "canvas"},
    ),
]


@pytest.mark.parametrize(("event", "expected"), WIRE, ids=lambda v: getattr(v, "type", ""))
def test_the_wire_form_is_what_the_dashboard_reads(
    event: LiveEventBase, expected: dict[str, Any]
) -> None:
    assert event.wire() == expected
    assert LIVE_EVENT.validate_python(expected) == event  # the tag picks the model back


def test_eval_progress_has_exactly_one_shape() -> None:
    with pytest.raises(ValidationError, match="either episodes_done"):
        EvalProgress(run_id="r1")
    with pytest.raises(ValidationError, match="either episodes_done"):
        EvalProgress(run_id="r1", episodes_done=1, episodes_total=2, summary={})


def test_an_unknown_type_names_the_tag() -> None:
    with pytest.raises(ValidationError, match="type"):
        LIVE_EVENT.validate_python({"type": "eval_started", "run_id": "r1"})
