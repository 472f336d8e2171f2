"""Review fixes at the HTTP boundary, against a real ``agentcanvas serve`` on loopback.

Only this backend's own page may call it: an ``Origin`` must name one of our hosts *and* the
port the request came to; ``null`` (sandboxed frames, ``file://`` pages) is never ours. A start
request that repeats a task id, or points its overlay outside the workspace, is refused with
the field named, and nothing is queued.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

SCRIPT = Path(sys.executable).parent / "agentcanvas"
COMMAND = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "agentcanvas.cli"]
START_DEADLINE_S = 60.0
STOP_DEADLINE_S = 30.0
ANNOUNCE = re.compile(r"agentcanvas backend on http://[^:]+:(\d+)")
QUEUE = "/api/eval/v2/queue"
START = "/api/eval/v2/start"
ORACLE = {"graph_name": "babyai_oracle", "episode_count": 1}


@dataclass
class Server:
    proc: subprocess.Popen[bytes]
    port: int

    def request(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, Any]:
        """One request with exactly these headers (Host defaults to ours); status and JSON."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
            sent = {"Host": f"127.0.0.1:{self.port}", **(headers or {})}
            if body is not None:
                sent["Content-Type"] = "application/json"
                sent["Content-Length"] = str(len(body))
            for name, value in sent.items():
                conn.putheader(name, value)
            conn.endheaders(body)
            response = conn.getresponse()
            text = response.read().decode(errors="replace")
        finally:
            conn.close()
        try:
            return response.status, json.loads(text)
        except ValueError:
            return response.status, text

    def post_json(
        self, path: str, payload: Any, headers: dict[str, str] | None = None
    ) -> tuple[int, Any]:
        return self.request("POST", path, json.dumps(payload).encode(), headers)


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("review_security")
    (root / "workspace" / "overlay").mkdir(parents=True)
    (root / "elsewhere").mkdir()
    return root / "workspace"


@pytest.fixture(scope="module")
def server(workspace: Path) -> Iterator[Server]:
    log = workspace.parent / "serve.log"
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("AGENTCANVAS_EVAL_SUBPROCESS", "AGENTCANVAS_TOKEN")
    }
    env.update(AGENTCANVAS_HOME=str(workspace), HF_HUB_OFFLINE="1")
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [*COMMAND, "serve", "--port", "0"],
            cwd=workspace,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
        )
    try:
        deadline = time.monotonic() + START_DEADLINE_S
        while (found := ANNOUNCE.search(log.read_text())) is None:
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, f"no announcement: {log.read_text()}"
            time.sleep(0.05)
        server = Server(proc, int(found.group(1)))
        while True:
            try:
                server.request("GET", QUEUE)
                break
            except OSError:
                assert time.monotonic() < deadline, f"backend does not answer: {log.read_text()}"
                time.sleep(0.05)
        yield server
    finally:
        proc.terminate()
        try:
            proc.wait(STOP_DEADLINE_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(STOP_DEADLINE_S)


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
    assert body["detail"].startswith("tasks: ")
    assert_nothing_queued(server, workspace)


@pytest.mark.parametrize("where", ["elsewhere", "abs", "overlay/../..", "/"])
def test_an_overlay_outside_the_workspace_is_refused(
    server: Server, workspace: Path, where: str
) -> None:
    folder = {"elsewhere": "../elsewhere", "abs": str(workspace.parent / "elsewhere")}.get(
        where, where
    )
    answer = server.post_json(START, {**ORACLE, "active_workspace_dir": folder})

    assert_refused(answer, 400, "active_workspace_dir", "must be a folder inside the workspace")
    assert_nothing_queued(server, workspace)
