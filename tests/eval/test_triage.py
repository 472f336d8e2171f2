"""Failure triage: episodes that did not succeed, grouped by cause, counted, biggest first.

Records here are written as runs write them (``EpisodeResult``, or its JSON as in an old
summary without the newer fields); tests/eval/test_retry.py triages a real run's records.
"""

from __future__ import annotations

from typing import Any

import pytest

from agentcanvas.eval.config import EndReason, EpisodeResult
from agentcanvas.eval.store import RunDir
from agentcanvas.eval.triage import FAILURE_KINDS, end_reason_of, normalise, triage, triage_run
from agentcanvas.fileio import atomic_write_json


def record(index: int, reason: EndReason | None, task: str = "t", **fields: Any) -> EpisodeResult:
    status = {
        "success": "completed",
        "env_done": "completed",
        "budget_exhausted": "completed",
        "worker_lost": "exception",
        None: fields.pop("status", "completed"),
    }.get(reason, reason)
    return EpisodeResult(
        index=index,
        task=task,
        episode_index=index,
        seed=index,
        status=status,
        end_reason=reason,
        **fields,
    )


def mixed_run() -> list[EpisodeResult]:
    boom = {"policy": "tglue.act: RuntimeError: act failed at step {}"}
    return [
        record(0, "success", metrics={"success": 1}),
        record(1, "error", node_errors={"policy": boom["policy"].format(3)}, failed_node="policy"),
        record(2, "error", "u", node_errors={"policy": boom["policy"].format(7)}),
        record(3, "exception", error="NodeSetError: level 'bad_load' cannot be built"),
        record(
            4,
            "timeout",
            error="wall-clock timeout after 0.5 s (safety net; not a score)",
            failed_node="env",
        ),
        record(
            5,
            "timeout",
            error="wall-clock timeout after 2 s (safety net; not a score)",
            failed_node="env",
        ),
        record(6, "error", node_errors={"policy": boom["policy"].format(1)}, failed_node="policy"),
        record(7, "env_done", metrics={"success": 0}),
        record(8, "budget_exhausted", metrics={"success": False}, steps=5, step_budget=5),
        record(9, "cancelled", error="cancelled with the run"),
        record(10, "worker_lost", error="its Ray worker was lost on each of 2 attempt(s)"),
        record(11, "no_verdict", error="the graph completed without metrics"),
        record(12, "success", "u", metrics={"success": True}),
    ]


def test_failures_are_grouped_by_cause_and_sorted_by_count() -> None:
    report = triage(mixed_run())
    assert (report.episodes, report.succeeded, report.failed) == (13, 2, 11)
    first, second = report.groups[:2]
    assert (first.kind, first.node, first.count) == ("node_error", "policy", 3)
    assert first.cause == "tglue.act: RuntimeError: act failed at step <n>"
    assert first.episodes == [1, 2, 6] and first.tasks == ["t", "u"]
    assert first.example == "tglue.act: RuntimeError: act failed at step 3"
    assert (second.kind, second.node, second.count) == ("timeout", "env", 2)
    assert second.cause == "wall-clock timeout after <n> s (safety net; not a score)"
    assert second.episodes == [4, 5]
    singles = [(g.kind, g.episodes) for g in report.groups[2:]]
    # One each: in the documented order of kinds.
    assert singles == [
        ("exception", [3]),
        ("worker_lost", [10]),
        ("budget_exhausted", [8]),
        ("env_verdict", [7]),
        ("no_verdict", [11]),
        ("cancelled", [9]),
    ]
    assert [kind for kind, _ in singles] == [
        k for k in FAILURE_KINDS if k not in ("node_error", "timeout")
    ]
    assert report.model_dump(mode="json")["groups"][0]["count"] == 3  # strict JSON out


def test_a_clean_run_has_no_groups() -> None:
    report = triage([record(i, "success", metrics={"success": 1}) for i in range(4)])
    assert (report.episodes, report.succeeded, report.failed, report.groups) == (4, 4, 0, [])


@pytest.mark.parametrize(
    ("message", "normalised"),
    [
        ("boom at step 3", "boom at step <n>"),
        ("after 0.25 s and 1e-05", "after <n> s and <n>"),
        ("episode 20260101_000000:17 failed", "episode <n>_<n>:<n> failed"),
        ("object at 0x7f3a2b1c0d90", "object at <id>"),
        ("request 3f2a9c1e-4b5d-4e6f-8a7b-9c0d1e2f3a4b lost", "request <id> lost"),
        ("actor 1a2b3c4d5e6f7a8b gone", "actor <id> gone"),
        ("policy2 and env_3 are names", "policy2 and env_3 are names"),
    ],
)
def test_normalise_replaces_what_differs_between_episodes(message: str, normalised: str) -> None:
    assert normalise(message) == normalised


def test_records_written_before_end_reason_are_triaged_too(tmp_path: Any) -> None:
    """An old summary's records (no end_reason, failed_node): the reason is inferred."""
    old = [
        {
            "index": 0,
            "episode_index": 0,
            "seed": 0,
            "status": "completed",
            "task": "t",
            "metrics": {"success": 1},
            "steps": 3,
            "step_budget": 10,
        },
        {
            "index": 1,
            "episode_index": 1,
            "seed": 1,
            "status": "completed",
            "task": "t",
            "metrics": {"success": 0},
            "steps": 10,
            "step_budget": 10,
        },
        {
            "index": 2,
            "episode_index": 2,
            "seed": 2,
            "status": "completed",
            "task": "t",
            "metrics": {"success": 0},
            "steps": 4,
            "step_budget": 10,
        },
        {
            "index": 3,
            "episode_index": 3,
            "seed": 3,
            "status": "error",
            "task": "t",
            "error": "node errors in: n",
            "node_errors": {"n": "g.n: ValueError: bad 4"},
        },
    ]
    reasons = [end_reason_of(EpisodeResult.model_validate(r)) for r in old]
    assert reasons == ["success", "budget_exhausted", "env_done", "error"]
    run_dir = RunDir(tmp_path / "20250101_000000")
    run_dir.create()
    summary = {
        "version": 1,
        "run_id": "20250101_000000",
        "status": "completed",
        "graph_name": "g",
        "config": {"graph_name": "g"},
        "episodes_total": 4,
        "episodes": old,
    }
    atomic_write_json(run_dir.summary_path, summary)
    report = triage_run(run_dir)
    assert report.failed == 3
    node_error = next(g for g in report.groups if g.kind == "node_error")
    assert (node_error.node, node_error.cause) == ("n", "g.n: ValueError: bad <n>")
