"""The health verdict, the error budget and the exit code of a run (pure functions)."""

from __future__ import annotations

import json

import pytest

from agentcanvas import exit_codes, jsontext
from agentcanvas.errors import UserInputError, describe
from agentcanvas.eval.config import EvalConfig, EvalRun
from agentcanvas.eval.health import assess, error_budget_exceeded, of_summary


def test_a_completed_run_is_clean_only_when_every_episode_has_a_verdict() -> None:
    assert assess("completed", {"completed": 4}, 4, None).verdict == "clean"
    for status in ("error", "exception", "timeout", "no_verdict"):
        health = assess("completed", {"completed": 3, status: 1}, 4, None)
        assert (health.verdict, health.error_count) == ("errors", 1)
        assert health.reason == f"1 of 4 episodes ended without a verdict ({status} 1)"


def test_an_unfinished_run_says_so_with_its_reason() -> None:
    health = assess("failed", {"error": 3, "cancelled": 7}, 10, "max_errors 2 exceeded: …")
    assert (health.verdict, health.error_count) == ("failed", 3)
    assert health.reason is not None and health.reason.startswith("max_errors 2 exceeded")
    assert assess("aborted", {}, 5, None).verdict == "aborted"
    assert assess("cancelled", {"cancelled": 5}, 5, None).error_count == 0
    running = assess("running", {"exception": 1}, 5, None)
    assert (running.verdict, running.error_count) == ("in_progress", 1)


@pytest.mark.parametrize(
    ("budget", "errors", "total", "stops"),
    [
        (None, 100, 100, False),
        (0, 0, 10, False),
        (0, 1, 10, True),
        (2, 2, 10, False),
        (2, 3, 10, True),
        (0.25, 2, 10, False),  # 2 <= 2.5
        (0.25, 3, 10, True),
    ],
)
def test_the_error_budget(budget: int | float | None, errors: int, total: int, stops: bool) -> None:
    assert (error_budget_exceeded(budget, errors, total) is not None) is stops


def test_the_summary_carries_the_verdict_and_strict_json() -> None:
    run = EvalRun(
        run_id="r",
        graph_name="g",
        config=EvalConfig(graph_name="g"),
        episodes_total=2,
        status="completed",
        status_counts={"exception": 2},
    )
    dumped = run.model_dump(mode="json")
    assert dumped["health"] == {
        "verdict": "errors",
        "error_count": 2,
        "reason": "2 of 2 episodes ended without a verdict (exception 2)",
    }
    assert EvalRun.model_validate(dumped).health == run.health  # a summary read back


def test_exit_codes_for_runs() -> None:
    assert exit_codes.for_run("completed", "clean") == 0
    assert exit_codes.for_run("completed", "errors") == 3
    for status in ("failed", "cancelled", "aborted"):
        assert exit_codes.for_run(status, status) == 2


def test_strict_json_text() -> None:
    text = jsontext.dumps({"a": float("nan"), "b": [float("inf"), 2.0], "c": (1, -float("inf"))})

    def refuse(name: str) -> None:
        raise ValueError(name)

    assert json.loads(text, parse_constant=refuse) == {"a": None, "b": [None, 2.0], "c": [1, None]}
    with pytest.raises(TypeError):
        jsontext.dumps({"x": object()})
    assert jsontext.dumps({"x": object()}, default=lambda o: float("nan")) == '{"x": null}'


def test_an_error_carries_its_type_once() -> None:
    relayed = UserInputError("UserInputError: panel field 'task_id': no")
    assert describe(relayed) == "UserInputError: panel field 'task_id': no"
    assert describe(RuntimeError("boom")) == "RuntimeError: boom"


def test_a_summary_written_without_a_verdict_gets_one() -> None:
    written_by_scheduler = {"status": "cancelled", "episodes_total": 0, "error": None}
    assert of_summary(written_by_scheduler).verdict == "cancelled"
    assert of_summary({"status": "queued"}).verdict == "in_progress"


def test_a_whole_float_max_errors_is_a_count_zero_included() -> None:
    """JSON Schema calls 0.0 and 3.0 integers: the start body's schema accepts them as counts,
    so the config must too (schemathesis found 0.0 refused as a fraction)."""
    from agentcanvas.eval.config import EvalConfig

    for given, count in ((0.0, 0), (3.0, 3)):
        value = EvalConfig(graph_name="g", max_errors=given).max_errors
        assert value == count and isinstance(value, int)
