"""Security at the HTTP boundary, against a real ``agentcanvas serve`` on loopback.

Only this backend's own page may call it: an ``Origin`` must name one of our hosts *and* the
port the request came to; ``null`` (sandboxed frames, ``file://`` pages) is never ours. A start
request that repeats a task id, or points its overlay outside the workspace, is refused with
the field named, and nothing is queued.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from support.backend import Server, serve

QUEUE = "/api/eval/v2/queue"
START = "/api/eval/v2/start"
ORACLE = {"graph_name": "babyai_oracle", "episode_count": 1}


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("review_security")
    (root / "workspace" / "overlay").mkdir(parents=True)
    (root / "elsewhere").mkdir()
    return root / "workspace"


@pytest.fixture(scope="module")
def server(workspace: Path) -> Iterator[Server]:
    yield from serve(workspace, log=workspace.parent / "serve.log", ready_path=QUEUE)


def assert_refused(answer: tuple[int, Any], code: int, *words: str) -> None:
    status, body = answer
    assert status == code, answer
    assert isinstance(body, dict) and body.get("detail"), body
    for word in words:
        assert word in json.dumps(body["detail"]), (word, body)


def assert_nothing_queued(server: Server, workspace: Path) -> None:
    assert server.request("GET", QUEUE) == (200, {"queued": [], "running": []})
    runs = workspace / "outputs" / "eval_runs"
    assert not runs.exists() or not any(runs.iterdir())


# -- Origin: only our own page ----------------------------------------------------------------
def test_our_own_origin_is_allowed(server: Server) -> None:
    for origin in (f"http://127.0.0.1:{server.port}", f"http://localhost:{server.port}"):
        assert server.request("GET", QUEUE, headers={"Origin": origin})[0] == 200, origin


@pytest.mark.parametrize("origin", ["null", "NULL"])
def test_a_null_origin_is_refused(server: Server, workspace: Path, origin: str) -> None:
    assert_refused(server.request("GET", QUEUE, headers={"Origin": origin}), 403, "Origin", origin)
    # The attack it stops: a sandboxed page posting a run.
    assert_refused(server.post_json(START, ORACLE, headers={"Origin": origin}), 403, "Origin")
    assert_nothing_queued(server, workspace)


def test_our_host_on_another_port_is_refused(server: Server, workspace: Path) -> None:
    other = server.port + 1 if server.port < 65535 else server.port - 1
    for origin in (
        f"http://127.0.0.1:{other}",
        f"http://localhost:{other}",
        "http://127.0.0.1",
        f"https://127.0.0.1:{other}",
    ):
        assert_refused(
            server.request("GET", QUEUE, headers={"Origin": origin}), 403, "Origin", origin
        )
    assert_refused(
        server.post_json(START, ORACLE, headers={"Origin": f"http://localhost:{other}"}),
        403,
        "Origin",
    )
    assert_nothing_queued(server, workspace)


# -- start requests ---------------------------------------------------------------------------
def test_a_repeated_task_id_is_refused(server: Server, workspace: Path) -> None:
    status, body = server.post_json(
        START, {**ORACLE, "tasks": ["BabyAI-GoToObj-v0", "BabyAI-GoToObj-v0"]}
    )

    assert status == 422, body
    (problem,) = body["problems"]
    assert problem["field"] == "tasks"
    assert "must not repeat a task id" in problem["message"]
    assert body["detail"].startswith("body.tasks: ")
    assert_nothing_queued(server, workspace)


@pytest.mark.parametrize("where", ["elsewhere", "abs", "overlay/../..", "/"])
def test_an_overlay_outside_the_workspace_is_refused(
    server: Server, workspace: Path, where: str
) -> None:
    folder = {"elsewhere": "../elsewhere", "abs": str(workspace.parent / "elsewhere")}.get(
        where, where
    )
    answer = server.post_json(START, {**ORACLE, "active_workspace_dir": folder})

    # The schema's pattern says it: a path relative to the workspace, no name starting "."
    assert_refused(answer, 422, "body.active_workspace_dir", "does not match the pattern")
    assert_nothing_queued(server, workspace)


def test_an_overlay_that_leads_out_of_the_workspace_is_refused(
    server: Server, workspace: Path
) -> None:
    outside = workspace.parent / "elsewhere-folder"
    outside.mkdir(exist_ok=True)
    link = workspace / "leads-out"
    if not link.exists():
        link.symlink_to(outside, target_is_directory=True)
    answer = server.post_json(START, {**ORACLE, "active_workspace_dir": "leads-out"})

    assert_refused(answer, 400, "active_workspace_dir", "must be a folder inside the workspace")
    missing = server.post_json(START, {**ORACLE, "active_workspace_dir": "no-such-folder"})
    assert_refused(missing, 404, "active_workspace_dir", "no folder")
    assert_nothing_queued(server, workspace)
