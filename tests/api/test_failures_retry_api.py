"""``GET /runs/{id}/failures`` and ``POST /retry/{id}`` over a real backend, on runs of
``support.failure_workspace``'s ``mixed`` graph: the report is the CLI's (``agentcanvas
failures --json``), a retry is queued like a start and runs exactly the selected episodes
with the original's seeds, linked by ``retry_of`` (and listed by ``?retry_of=``); bad or empty
selections are 400s naming ``select``, an unknown run a 404, a damaged folder a 422."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from support.backend import Backend
from support.cli import run_cli
from support.failure_workspace import write_failure_workspace

API = "/api/eval/v2"
UNKNOWN = "20990101_000000"
CLI_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Runs:
    mixed: str  # walk #1 errs in node mid, explode #0 and #1 cannot start
    clean: str  # every episode succeeds


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Backend]:
    backend = Backend(write_failure_workspace(tmp_path_factory.mktemp("retry_ws")))
    try:
        yield backend
    finally:
        backend.close()


@pytest.fixture(scope="module")
def runs(backend: Backend) -> Runs:
    mixed = backend.start_run("mixed", 2, 1, seed=3, name="mixed api")
    clean = backend.start_run("walk", 2, 1)
    for run_id in (mixed, clean):
        backend.wait_status(run_id, "completed")
    return Runs(mixed, clean)


def test_failures_answers_the_cli_report(backend: Backend, runs: Runs) -> None:
    response = backend.http.get(f"{API}/runs/{runs.mixed}/failures")
    assert response.status_code == 200, response.text
    report = response.json()
    assert [(g["kind"], g["node"], g["count"], g["episodes"]) for g in report["groups"]] == [
        ("exception", None, 2, [2, 3]),
        ("node_error", "mid", 1, [1]),
    ]
    assert [g["label"] for g in report["groups"]] == [
        "exception outside the nodes",
        "exception in node mid",
    ]
    proc = run_cli(
        "failures", runs.mixed, "--json", workspace=backend.workspace, timeout_s=CLI_TIMEOUT_S
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == report
    clean = backend.api("GET", f"{API}/runs/{runs.clean}/failures")
    assert (clean["failed"], clean["groups"], clean["errors"]) == (0, [], 0)


def test_failures_of_an_unknown_or_damaged_run(backend: Backend) -> None:
    assert backend.http.get(f"{API}/runs/{UNKNOWN}/failures").status_code == 404
    damaged = backend.run_dir("20980101_000000")
    damaged.mkdir(parents=True)
    (damaged / "summary.json").write_text('{"status": 3}')
    response = backend.http.get(f"{API}/runs/{damaged.name}/failures")
    assert response.status_code == 422, response.text
    assert "summary.json" in response.json()["detail"]


def test_retry_queues_a_linked_run_of_the_selected_episodes(backend: Backend, runs: Runs) -> None:
    original = backend.status(runs.mixed)
    seeds = {(e["task"], e["episode_index"]): e["seed"] for e in original["episodes"]}
    response = backend.http.post(f"{API}/retry/{runs.mixed}", json={"select": "errors"})
    assert response.status_code == 200, response.text
    started = response.json()
    assert started["status"] == "queued" and started["via_subprocess"] is True
    retry = backend.wait_status(started["run_id"], "completed")
    assert retry["config"]["retry_of"] == runs.mixed
    expected = [("walk", 1), ("explode", 0), ("explode", 1)]
    assert [(e["task"], e["episode_index"], e["seed"]) for e in retry["episodes"]] == [
        (task, index, seeds[task, index]) for task, index in expected
    ]
    listed = backend.api("GET", f"{API}/runs", params={"retry_of": runs.mixed})["runs"]
    assert [r["run_id"] for r in listed] == [started["run_id"]]

    by_index = backend.http.post(
        f"{API}/retry/{runs.mixed}", json={"select": "0,2", "worker_count": 2, "name": "two"}
    )
    assert by_index.status_code == 200, by_index.text
    second = backend.wait_status(by_index.json()["run_id"], "completed")
    assert second["config"]["worker_count"] == 2
    assert backend.api("GET", f"{API}/runs/{second['run_id']}/meta")["name"] == "two"
    assert [(e["task"], e["episode_index"]) for e in second["episodes"]] == [
        ("walk", 0),
        ("explode", 0),
    ]


@pytest.mark.parametrize(
    ("body", "detail"),
    [
        ({"select": "1,x"}, "select: selection '1,x': 'x' is not a run index"),
        ({"select": "7"}, "select: selection: run {run} has no episode 7"),
    ],
)
def test_a_bad_selection_is_a_400_naming_select(
    backend: Backend, runs: Runs, body: dict[str, Any], detail: str
) -> None:
    response = backend.http.post(f"{API}/retry/{runs.mixed}", json=body)
    assert response.status_code == 400, response.text
    assert response.json()["detail"].startswith(detail.format(run=runs.mixed))


def test_an_empty_selection_an_unknown_run_and_a_bad_body(backend: Backend, runs: Runs) -> None:
    empty = backend.http.post(f"{API}/retry/{runs.clean}", json={"select": "errors"})
    assert empty.status_code == 400, empty.text
    assert empty.json()["detail"].startswith(f"select: run {runs.clean} has no episodes that")
    unknown = backend.http.post(f"{API}/retry/{UNKNOWN}", json={"select": "errors"})
    assert unknown.status_code == 404, unknown.text
    missing = backend.http.post(f"{API}/retry/{runs.mixed}", json={"worker_count": 2})
    assert missing.status_code == 422 and "body.select" in missing.json()["detail"]


def test_cli_retry_submit_queues_it_on_the_backend(backend: Backend, runs: Runs) -> None:
    """``retry --submit``: POST /retry/{id} (the run named on the backend) to
    ``$AGENTCANVAS_URL``, sent with an Idempotency-Key (given here: sent twice, one run)."""
    env = {**os.environ, "AGENTCANVAS_URL": backend.url}
    args = ("retry", "mixed api", "--episodes", "1-2", "--submit", "--json")
    answers = []
    for _ in range(2):
        proc = run_cli(
            *args, "--idempotency-key", "retry-once",
            workspace=backend.workspace, timeout_s=CLI_TIMEOUT_S, env=env,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        assert "note:" not in proc.stderr  # the graph is the original's
        answers.append(json.loads(proc.stdout))
    assert answers[0]["run_id"] == answers[1]["run_id"] and answers[1]["replayed"] is True
    retry = backend.wait_status(answers[0]["run_id"], "completed")
    assert retry["config"]["retry_of"] == runs.mixed
    assert [(e["task"], e["episode_index"]) for e in retry["episodes"]] == [
        ("walk", 1),
        ("explode", 0),
    ]
