"""Hostile and malformed requests against a real ``agentcanvas serve`` on loopback.

Every refusal is a 4xx whose ``detail`` names the field and the rule; nothing outside a run
folder is ever served. Raw paths go through ``http.client``, which (unlike httpx) sends
``..`` segments as they are. The workspace holds one finished run, written to disk before the
backend starts, with a secret next to it and symlinks that lead out of its assets folder.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from agentcanvas.eval.config import EpisodeResult, EvalConfig, EvalRun
from support.backend import Server, serve
from support.cli import COMMAND

RUN_ID = "20260101_000000"
SECRET = "TOP-SECRET-CONTENT"
TOKEN = "s3cret-token"


def _serve(workspace: Path, *args: str) -> Iterator[Server]:
    log = workspace / f"serve-{time.time_ns()}.log"
    yield from serve(workspace, *args, log=log, ready_path="/openapi.json")


def _write_finished_run(workspace: Path, outside: Path) -> None:
    run = workspace / "outputs" / "eval_runs" / RUN_ID
    assets = run / "episodes" / "ep0000" / "assets"
    assets.mkdir(parents=True)
    config = EvalConfig(graph_name="babyai_oracle", episode_count=1)
    episode = EpisodeResult(
        index=0, episode_index=0, seed=1, status="completed", task="BabyAI-GoToObj-v0"
    )
    summary = EvalRun(
        run_id=RUN_ID,
        status="completed",
        graph_name="babyai_oracle",
        config=config,
        episodes_total=1,
        episodes_done=1,
        episodes=[episode],
    )
    (run / "summary.json").write_text(summary.model_dump_json())
    (run / "spec.json").write_text(json.dumps({"note": SECRET}))
    (run / "_DONE").write_text("")
    (run / "episodes" / "ep0000" / "episode.json").write_text(episode.model_dump_json())
    (assets / "frame.png").write_bytes(b"\x89PNG not really")
    (assets / "escape.json").symlink_to(run / "spec.json")  # inside the workspace, not assets
    (assets / "outside.txt").symlink_to(outside)


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("api")
    outside = root / "secret.txt"
    outside.write_text(SECRET)
    workspace = root / "workspace"
    workspace.mkdir()
    _write_finished_run(workspace, outside)
    return workspace


@pytest.fixture(scope="module")
def server(workspace: Path) -> Iterator[Server]:
    yield from _serve(workspace)


NO_ROUTE = 404  # no route takes a slash in a name: never resolved as a path


def _assert_refused(status: int, body: Any, code: int, *words: str) -> None:
    # The web page's static files answer a method other than GET with 405.
    assert status == code or (code == NO_ROUTE and status == 405), (status, body)
    assert isinstance(body, dict) and body.get("detail"), body
    assert SECRET not in json.dumps(body)
    for word in words:
        assert word in str(body["detail"]), (word, body)


# -- OpenAPI ---------------------------------------------------------------------------------
def test_openapi_lists_the_endpoints(server: Server) -> None:
    status, spec = server.request("GET", "/openapi.json")

    assert status == 200
    paths = spec["paths"]
    for path, method in [
        ("/api/eval/v2/start", "post"),
        ("/api/eval/v2/status/{run_id}", "get"),
        ("/api/eval/v2/queue", "get"),
        ("/api/eval/v2/cancel/{run_id}", "post"),
        ("/api/eval/v2/resume/{run_id}", "post"),
        ("/api/eval/v2/runs", "get"),
        ("/api/eval/v2/runs/{run_id}/episodes", "get"),
        ("/api/eval/v2/runs/{run_id}/episodes/{index}", "get"),
        ("/api/eval/v2/runs/{run_id}/episodes/{index}/log", "get"),
        ("/api/eval/v2/runs/{run_id}/episodes/{index}/assets/{name}", "get"),
        ("/api/nodesets", "get"),
        ("/api/nodesets/{name}/load", "post"),
        ("/api/nodesets/{name}/unload", "post"),
        ("/api/canvas/play", "post"),
        ("/api/graphs", "get"),
    ]:
        assert method in paths.get(path, {}), f"{method.upper()} {path} missing from OpenAPI"
    start = spec["components"]["schemas"]["StartRequest"]
    assert start["required"] == ["graph_name"]
    assert start["additionalProperties"] is False


# -- run ids ---------------------------------------------------------------------------------
RUN_ENDPOINTS = [
    ("GET", "/api/eval/v2/status/{}"),
    ("POST", "/api/eval/v2/cancel/{}"),
    ("POST", "/api/eval/v2/resume/{}"),
    ("GET", "/api/eval/v2/runs/{}/episodes"),
    ("GET", "/api/eval/v2/runs/{}/graph"),
    ("GET", "/api/eval/v2/runs/{}/logs/stdout"),
]


@pytest.mark.parametrize(
    ("raw_id", "code", "words"),
    [
        ("..", 422, ("path.run_id", "does not match the pattern")),
        ("%2e%2e", 422, ("path.run_id", "'..'")),
        ("%2E%2E", 422, ("run_id",)),
        (f"{RUN_ID}%00", 422, ("run_id",)),
        ("run-1", 422, ("run_id", "[0-9]{8}_[0-9]{6}")),
        ("20261129_000000", 404, ("no run",)),
        (f"{RUN_ID}/../{RUN_ID}", NO_ROUTE, ()),
        (f"{RUN_ID}%2F..%2F{RUN_ID}", NO_ROUTE, ()),
        ("..%2F..%2F..%2Fsecret.txt", NO_ROUTE, ()),
    ],
)
def test_hostile_run_ids_are_refused(
    server: Server, raw_id: str, code: int, words: tuple[str, ...]
) -> None:
    for method, template in RUN_ENDPOINTS:
        status, body = server.request(method, template.format(raw_id))
        _assert_refused(status, body, code, *words)


def test_static_files_do_not_escape_their_folder(server: Server) -> None:
    for raw in (
        "/../../secret.txt",
        "/%2e%2e/%2e%2e/secret.txt",
        "/..%2F..%2Fsecret.txt",
        "/../workspace/outputs/eval_runs/20260101_000000/spec.json",
    ):
        status, body = server.request("GET", raw)
        assert status == 404, (raw, status)
        assert SECRET not in str(body)


def test_episode_indexes_and_asset_names_stay_inside_the_run(server: Server) -> None:
    base = f"/api/eval/v2/runs/{RUN_ID}/episodes"
    assert server.request("GET", f"{base}/0")[0] == 200  # the control
    assert server.request("GET", f"{base}/0/assets/frame.png")[0] == 200

    _assert_refused(*server.request("GET", f"{base}/-1"), 422, "path.index")
    _assert_refused(*server.request("GET", f"{base}/zero"), 422, "index")
    _assert_refused(*server.request("GET", f"{base}/7"), 404, "episode 7")
    _assert_refused(*server.request("GET", f"{base}/0/assets/.."), 422, "path.name")
    _assert_refused(*server.request("GET", f"{base}/0/assets/..frame.png"), 422, "'..frame")
    _assert_refused(*server.request("GET", f"{base}/0/assets/escape.json"), 400, "not inside")
    _assert_refused(*server.request("GET", f"{base}/0/assets/outside.txt"), 400, "not inside")
    for raw in ("..%2F..%2F..%2Fspec.json", "%2e%2e%2f%2e%2e%2fspec.json"):
        status, body = server.request("GET", f"{base}/0/assets/{raw}")
        assert status == 404 and SECRET not in str(body), (raw, status, body)


# -- request bodies --------------------------------------------------------------------------
ORACLE = {"graph_name": "babyai_oracle"}


@pytest.mark.parametrize(
    ("body", "code", "words"),
    [
        ({"graph_name": "../secrets"}, 422, ("body.graph_name", "'../secrets'")),
        ({"graph_name": "a/b"}, 422, ("graph_name", "does not match the pattern")),
        ({"graph_name": "no_such_graph"}, 404, ("unknown graph", "babyai_oracle")),
        ({**ORACLE, "bogus": 1}, 422, ("bogus", "Extra inputs")),
        ({**ORACLE, "episode_count": -1}, 422, ("episode_count", "greater than or equal to 1")),
        ({**ORACLE, "episode_count": 0}, 422, ("episode_count",)),
        ({**ORACLE, "worker_count": 0}, 422, ("worker_count",)),
        ({**ORACLE, "worker_count": 65}, 422, ("worker_count", "less than or equal to 64")),
        ({**ORACLE, "seed": -5}, 422, ("seed",)),
        ({**ORACLE, "episode_count": "ten"}, 422, ("episode_count", "integer")),
        ({**ORACLE, "episode_count": 2.5}, 422, ("episode_count",)),
        ({**ORACLE, "tasks": []}, 422, ("tasks", "at least 1 item")),
        ({**ORACLE, "tasks": [" "]}, 422, ("tasks",)),
        ({**ORACLE, "priority": 1000}, 422, ("priority",)),
        ({"graph_name": 5}, 422, ("graph_name", "string")),
        ({"graph_name": ""}, 422, ("graph_name",)),
        ({}, 422, ("graph_name", "required")),
        ([], 422, ()),
    ],
)
def test_malformed_start_requests_are_refused(
    server: Server, body: Any, code: int, words: tuple[str, ...]
) -> None:
    _assert_refused(*server.post_json("/api/eval/v2/start", body), code, *words)


def test_a_body_that_is_not_json_is_refused(server: Server) -> None:
    _assert_refused(*server.request("POST", "/api/eval/v2/start", b"graph_name=x"), 422, "JSON")


def test_refused_requests_queue_nothing(server: Server, workspace: Path) -> None:
    for body in ({"graph_name": "../x"}, {**ORACLE, "worker_count": -1}):
        server.post_json("/api/eval/v2/start", body)

    assert server.request("GET", "/api/eval/v2/queue") == (200, {"queued": [], "running": []})
    assert sorted(p.name for p in (workspace / "outputs" / "eval_runs").iterdir()) == [RUN_ID]


def test_query_parameters_are_validated(server: Server) -> None:
    _assert_refused(*server.request("GET", "/api/eval/v2/runs?limit=0"), 422, "limit")
    _assert_refused(*server.request("GET", "/api/eval/v2/runs?offset=-1"), 422, "offset")
    _assert_refused(
        *server.request("GET", f"/api/eval/v2/runs/{RUN_ID}/episodes?sort=secret"), 422, "sort"
    )
    _assert_refused(
        *server.request("GET", f"/api/eval/v2/runs/{RUN_ID}/logs/passwd"), 422, "path.which"
    )


def test_node_set_names_are_checked(server: Server) -> None:
    _assert_refused(*server.request("POST", "/api/nodesets/Bad-Name/load"), 422, "path.name")
    _assert_refused(*server.request("POST", "/api/nodesets/%2e%2e/unload"), 422, "path.name")
    _assert_refused(
        *server.request("POST", "/api/nodesets/no_such_set/load"), 404, "unknown node set"
    )
    _assert_refused(*server.request("POST", "/api/nodesets/env_minigrid/load"), 409, "not shared")
    _assert_refused(*server.request("POST", "/api/nodesets/..%2F..%2Fx/load"), NO_ROUTE)


# -- Host, Origin and token ------------------------------------------------------------------
def test_foreign_host_and_origin_are_refused(server: Server) -> None:
    path = "/api/eval/v2/queue"
    for host in ("evil.example", f"evil.example:{server.port}", "127.0.0.1.evil.example"):
        _assert_refused(*server.request("GET", path, headers={"Host": host}), 403, "DNS rebinding")
    for origin in ("http://evil.example", f"http://localhost.evil.example:{server.port}"):
        _assert_refused(*server.request("GET", path, headers={"Origin": origin}), 403, "Origin")
    # The controls: our own names pass.
    for headers in (
        {"Host": f"localhost:{server.port}"},
        {"Origin": f"http://127.0.0.1:{server.port}"},
        {"Origin": f"http://localhost:{server.port}"},
    ):
        assert server.request("GET", path, headers=headers)[0] == 200, headers


def test_serve_off_loopback_without_a_token_is_refused(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "AGENTCANVAS_TOKEN"}
    done = subprocess.run(
        [*COMMAND, "serve", "--host", "0.0.0.0", "--port", "0"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert done.returncode == 1, done
    assert "--token" in done.stderr and "Traceback" not in done.stderr, done.stderr


def _non_loopback_address() -> str | None:
    for addresses in psutil.net_if_addrs().values():
        for address in addresses:
            if address.family == socket.AF_INET and not address.address.startswith("127."):
                return str(address.address)
    return None


def test_serve_off_loopback_with_a_token(tmp_path: Path) -> None:
    for off_loopback in _serve(tmp_path, "--host", "0.0.0.0", "--token", TOKEN):
        path = "/api/eval/v2/queue"
        bearer = {"Authorization": f"Bearer {TOKEN}"}
        _assert_refused(*off_loopback.request("GET", path), 403, "token")
        _assert_refused(
            *off_loopback.request("GET", path, headers={"Authorization": "Bearer wrong"}),
            403,
            "token",
        )
        assert off_loopback.request("GET", path, headers=bearer)[0] == 200
        assert off_loopback.request("GET", f"{path}?token={TOKEN}")[0] == 200
        _assert_refused(
            *off_loopback.request("GET", path, headers={**bearer, "Host": "evil.example"}),
            403,
            "DNS rebinding",
        )
        address = _non_loopback_address()
        if address is not None:  # how a client elsewhere reaches it
            status, body = off_loopback.request(
                "GET", path, headers={**bearer, "Host": f"{address}:{off_loopback.port}"}
            )
            assert status == 200, body


@pytest.mark.parametrize(
    ("flags", "env_token", "why"),
    [
        (["--token", "   "], None, "it has 3 characters"),
        (["--token", "short"], None, "it has 5 characters"),
        (["--token", "twelve chars long"], None, "' '"),
        ([], "            ", "AGENTCANVAS_TOKEN"),
    ],
)
def test_a_blank_short_or_spaced_token_is_refused(
    tmp_path: Path, flags: list[str], env_token: str | None, why: str
) -> None:
    """A token of spaces would make ``?token=+++`` (spaces, once decoded) a valid key."""
    env = {k: v for k, v in os.environ.items() if k != "AGENTCANVAS_TOKEN"}
    if env_token is not None:
        env["AGENTCANVAS_TOKEN"] = env_token
    done = subprocess.run(
        [*COMMAND, "serve", "--host", "0.0.0.0", "--port", "0", *flags],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1, done
    assert why in done.stderr and "at least 12 characters" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


async def test_the_backend_socket_gives_accepted_connections_tcp_nodelay() -> None:
    """asyncio sets TCP_NODELAY on accepted connections only when the listener's protocol
    says TCP; without it small keep-alive responses wait for a delayed ACK (bench/listing.py
    measures the latency)."""
    import asyncio

    from agentcanvas.cli.commands.serve import listening_socket

    sock = listening_socket("127.0.0.1", 0)
    seen: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted = writer.get_extra_info("socket")
        seen.set_result(accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
        writer.close()

    server = await asyncio.start_server(handle, sock=sock)
    async with server:
        _, writer = await asyncio.open_connection(*sock.getsockname()[:2])
        assert await asyncio.wait_for(seen, 10) != 0
        writer.close()
    plain = socket.socket(socket.AF_INET)  # the old listener: protocol 0
    assert plain.proto == 0 and sock.proto == socket.IPPROTO_TCP
    plain.close()
