"""``POST /api/eval/v2/start`` refuses unknown tasks and bad error budgets before anything is
queued; ``max_errors`` stops a run early; ``submit --follow`` exits like ``eval``. A real
``agentcanvas serve`` on loopback over the workspace of ``support.truth_workspace``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.background import BackgroundTask

from agentcanvas import exit_codes
from agentcanvas.api.strict_json import StrictJSONResponse
from support.backend import RUN_DEADLINE_S, Backend
from support.cli import run_cli
from support.truth_workspace import write_truth_workspace

START = "/api/eval/v2/start"


def _raise_on_constant(name: str) -> Any:
    raise ValueError(f"not strict JSON: {name}")


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_truth_workspace(tmp_path_factory.mktemp("start_checks") / "ws")


@pytest.fixture(scope="module")
def backend(workspace: Path) -> Iterator[Backend]:
    with Backend(workspace) as server:
        yield server


def run_folders(workspace: Path) -> set[str]:
    root = workspace / "outputs" / "eval_runs"
    return {p.name for p in root.iterdir()} if root.exists() else set()


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        (
            {"graph_name": "walk", "tasks": ["nope"]},
            "tasks",
            "unknown task 'nope' for env 'tenv' (valid: walk, explode)",
        ),
        (
            {"graph_name": "walk", "tasks": ["walk", "nope", "nix"]},
            "tasks",
            "unknown task 'nope', 'nix'",
        ),
        ({"graph_name": "clean", "max_errors": 1.5}, "max_errors", "a fraction must be"),
        ({"graph_name": "clean", "max_errors": -2}, "max_errors", "a count must be between 0 and"),
        ({"graph_name": "clean", "max_errors": True}, "max_errors", "a count (>= 0)"),
        ({"graph_name": "clean", "episode_timeout_s": 0}, "episode_timeout_s", "greater than"),
    ],
)
def test_bad_starts_are_422_naming_the_field_and_queue_nothing(
    backend: Backend, workspace: Path, body: dict[str, Any], field: str, words: str
) -> None:
    before = run_folders(workspace)
    response = backend.http.post(START, json=body)
    assert response.status_code == 422, response.text
    answer = response.json()
    assert [p["field"] for p in answer["problems"]] == [field]
    assert words in answer["detail"]
    assert backend.queue()["queued"] == [] and backend.queue()["running"] == []
    assert run_folders(workspace) == before


def test_max_errors_stops_a_queued_run_as_failed(backend: Backend) -> None:
    run_id = backend.start_run("raises", 20, 1, max_errors=1)
    summary = backend.wait_status(run_id, "failed", RUN_DEADLINE_S)
    assert summary["error"].startswith("max_errors 1 exceeded: 2 episodes ended in error")
    assert summary["health"]["verdict"] == "failed"
    assert sum(summary["status_counts"].values()) < 20  # stopped early: the rest never ran
    served = backend.http.get(f"/api/eval/v2/status/{run_id}").text
    json.loads(served, parse_constant=_raise_on_constant)  # what we serve is strict JSON


def _submit(workspace: Path, backend: Backend, *args: str) -> Any:
    return run_cli(
        "submit", *args, "--url", backend.url, workspace=workspace, timeout_s=RUN_DEADLINE_S
    )


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (["clean", "-n", "2", "--follow"], exit_codes.OK),
        (["raises", "-n", "2", "--follow"], exit_codes.EPISODE_ERRORS),
        (["raises", "-n", "6", "--max-errors", "0", "--follow"], exit_codes.RUN_FAILED),
        (["walk", "--tasks", "nope", "--follow"], exit_codes.USAGE),
    ],
    ids=["clean", "errors", "max-errors", "unknown-task"],
)
def test_submit_follow_exits_like_eval(
    workspace: Path, backend: Backend, args: list[str], code: int
) -> None:
    proc = _submit(workspace, backend, *args)
    assert proc.returncode == code, proc.stdout + proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    if code == exit_codes.USAGE:
        assert "unknown task 'nope' for env 'tenv' (valid: walk, explode)" in proc.stderr
        return
    started, final = proc.stdout.split("\n", 1)
    json.loads(started, parse_constant=_raise_on_constant)
    summary = json.loads(final, parse_constant=_raise_on_constant)
    assert (
        summary["health"]["verdict"]
        == {
            exit_codes.OK: "clean",
            exit_codes.EPISODE_ERRORS: "errors",
            exit_codes.RUN_FAILED: "failed",
        }[code]
    )


def test_served_json_never_holds_nan() -> None:
    response = StrictJSONResponse(
        {"mean": float("nan"), "hi": float("inf"), "rows": [float("-inf"), 1.5]},
        background=BackgroundTask(lambda: None),
    )
    body = json.loads(response.body, parse_constant=_raise_on_constant)
    assert body == {"mean": None, "hi": None, "rows": [None, 1.5]}
