"""Hardening, the API part: bad input is a 4xx naming the field, never a 500, nothing queued.

Against a real ``agentcanvas serve`` on loopback; bodies and paths are sent byte for byte
(``http.client``), so ``1e999``, a 300-digit index or an 8.5 MB body arrive as a client would
send them. The workspace holds finished runs written before the backend starts, with symlinks
in them that lead out of their run folder (to /etc, to a secret, to another run).
"""

from __future__ import annotations

import http.client
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentcanvas.eval.config import EpisodeResult, EvalConfig, EvalRun
from support.backend import Server, serve

RUN_ID = "20260101_000000"
OTHER_RUN = "20260101_000001"
SECRET = "TOP-SECRET-CONTENT"
START = "/api/eval/v2/start"
PLAY = "/api/canvas/play"
QUEUE = "/api/eval/v2/queue"
ORACLE = {"graph_name": "babyai_oracle", "episode_count": 1}
HUGE_INDEX = "9" * 300


def _write_run(runs: Path, run_id: str, episodes: int) -> Path:
    run = runs / run_id
    config = EvalConfig(graph_name="babyai_oracle", episode_count=episodes)
    records = [
        EpisodeResult(index=i, episode_index=i, seed=i, status="completed", task=run_id)
        for i in range(episodes)
    ]
    for record in records:
        folder = run / "episodes" / f"ep{record.index:04d}"
        (folder / "assets").mkdir(parents=True)
        (folder / "episode.json").write_text(record.model_dump_json())
        (folder / "log.jsonl").write_text('{"node": "env"}\n')
    summary = EvalRun(
        run_id=run_id,
        status="completed",
        graph_name="babyai_oracle",
        config=config,
        episodes_total=episodes,
        episodes_done=episodes,
        episodes=records,
    )
    (run / "summary.json").write_text(summary.model_dump_json())
    (run / "_DONE").write_text("")
    return run


def _link(path: Path, target: Path) -> None:
    """Replace ``path`` (a file or a folder tree) by a symlink to ``target``."""
    if path.is_dir():
        for child in sorted(path.rglob("*"), reverse=True):
            child.rmdir() if child.is_dir() else child.unlink()
        path.rmdir()
    elif path.exists():
        path.unlink()
    path.symlink_to(target)


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("hardening")
    secret = root / "secret.txt"
    secret.write_text(SECRET)
    workspace = root / "workspace"
    runs = workspace / "outputs" / "eval_runs"
    run = _write_run(runs, RUN_ID, 6)
    _write_run(runs, OTHER_RUN, 1)
    (run / "episodes" / "ep0000" / "assets" / "frame.png").write_bytes(b"\x89PNG control")
    episodes = run / "episodes"
    _link(episodes / "ep0001" / "assets", Path("/etc"))  # assets -> /etc
    _link(episodes / "ep0002", runs / OTHER_RUN / "episodes" / "ep0000")  # another run's
    _link(episodes / "ep0003" / "episode.json", secret)
    _link(episodes / "ep0004" / "log.jsonl", secret)
    (episodes / "ep0005" / "assets" / "secret.png").symlink_to(secret)
    (workspace / "overlay").mkdir()
    return workspace


@pytest.fixture(scope="module")
def server(workspace: Path) -> Iterator[Server]:
    yield from serve(workspace, log=workspace.parent / "serve.log", ready_path=QUEUE)


def refused(answer: tuple[int, Any], code: int, *words: str) -> dict[str, Any]:
    status, body = answer
    assert status == code, answer
    assert isinstance(body, dict) and isinstance(body.get("detail"), str), body
    assert SECRET not in json.dumps(body) and "root:" not in json.dumps(body)
    for word in words:
        assert word in body["detail"], (word, body["detail"])
    return body


def assert_nothing_queued(server: Server, workspace: Path) -> None:
    assert server.request("GET", QUEUE) == (200, {"queued": [], "running": []})
    runs = sorted(p.name for p in (workspace / "outputs" / "eval_runs").iterdir())
    assert runs == [RUN_ID, OTHER_RUN]


def raw_start(server: Server, text: str) -> tuple[int, Any]:
    return server.request("POST", START, text.encode())


# -- non-finite numbers ------------------------------------------------------------------------
@pytest.mark.parametrize("field", ["per_step_timeout_s", "marginal_vram_mb"])
@pytest.mark.parametrize("value", ["1e999", "-1e999", "NaN", "Infinity"])
def test_non_finite_numbers_are_refused(
    server: Server, workspace: Path, field: str, value: str
) -> None:
    answer = raw_start(server, f'{{"graph_name": "babyai_oracle", "{field}": {value}}}')

    body = refused(answer, 422, f"body.{field}: ")
    assert body["problems"][0]["field"] == field
    assert_nothing_queued(server, workspace)


def test_the_request_models_refuse_non_finite_floats_in_the_schema(server: Server) -> None:
    status, spec = server.request("GET", "/openapi.json")

    assert status == 200
    start = spec["components"]["schemas"]["StartRequest"]["properties"]
    assert start["per_step_timeout_s"]["maximum"] == 86_400.0
    assert start["marginal_vram_mb"]["maximum"] == 1e9


# -- strict types, bounds, sizes -------------------------------------------------------------
@pytest.mark.parametrize(
    ("extra", "words"),
    [
        ({"episode_count": "10"}, ("body.episode_count: Input should be a valid integer",)),
        ({"episode_count": True}, ("body.episode_count: Input should be a valid integer",)),
        ({"worker_count": 2.5}, ("body.worker_count",)),
        ({"worker_count": "2"}, ("body.worker_count",)),
        ({"save_frames": "yes"}, ("body.save_frames: Input should be a valid boolean",)),
        ({"via_subprocess": "no"}, ("body.via_subprocess: Input should be a valid boolean",)),
        ({"exclusive_gpu": 1}, ("body.exclusive_gpu",)),
        ({"per_step_timeout_s": "5"}, ("body.per_step_timeout_s",)),
        ({"seed": 10**30}, ("body.seed: Input should be less than or equal to",)),
        ({"start_index": 10**30}, ("body.start_index",)),
        ({"step_budget": 10**30}, ("body.step_budget",)),
        ({"episode_count": 10**30}, ("body.episode_count",)),
        ({"tasks": ["BabyAI-GoToObj-v0", 5]}, ("body.tasks.1: Input should be a valid string",)),
        ({"tasks": ["x" * 129]}, ("body.tasks.0",)),
        ({"tasks": ["a b"]}, ("body.tasks.0: 'a b' does not match the pattern",)),
        ({"tasks": [f"t{i}" for i in range(1001)]}, ("body.tasks: List should have at most 1000",)),
        ({"active_workspace_dir": "a" * 5000}, ("body.active_workspace_dir",)),
        ({"graph_name": "../etc"}, ("body.graph_name: '../etc' does not match the pattern",)),
    ],
)
def test_coerced_and_out_of_range_values_are_refused(
    server: Server, workspace: Path, extra: dict[str, Any], words: tuple[str, ...]
) -> None:
    refused(server.post_json(START, {**ORACLE, **extra}), 422, *words)
    assert_nothing_queued(server, workspace)


@pytest.mark.parametrize(
    ("body", "words"),
    [
        (
            {"graph_name": "babyai_oracle", "episode": "1"},
            ("body.episode: Input should be a valid",),
        ),
        ({"graph_name": "babyai_oracle", "seed": 10**30}, ("body.seed",)),
        ({"graph_name": "babyai_oracle", "step_budget": True}, ("body.step_budget",)),
        ({"graph_name": "babyai_oracle", "bogus": 1}, ("body.bogus: Extra inputs",)),
    ],
)
def test_canvas_play_bodies_are_strict_too(
    server: Server, body: dict[str, Any], words: tuple[str, ...]
) -> None:
    refused(server.post_json(PLAY, body), 422, *words)


def test_an_overlong_overlay_path_is_a_4xx(server: Server, workspace: Path) -> None:
    deep = "/".join(["a" * 250] * 4)  # within the field's limit; each part is a legal name
    refused(
        server.post_json(START, {**ORACLE, "active_workspace_dir": deep}),
        404,
        "active_workspace_dir",
    )
    assert_nothing_queued(server, workspace)


def test_empty_and_malformed_bodies_name_the_body(server: Server, workspace: Path) -> None:
    refused(server.request("POST", START, b""), 422, "body: a JSON object is required")
    refused(server.request("POST", START), 422, "body: a JSON object is required")
    refused(raw_start(server, "[]"), 422, "body: a JSON object is required")
    refused(
        raw_start(server, '{"graph_name": babyai_oracle}'),
        422,
        "body: invalid JSON at position 15: Expecting value",
    )
    assert_nothing_queued(server, workspace)


def test_a_body_over_the_limit_is_413_before_parsing(server: Server, workspace: Path) -> None:
    tasks = json.dumps({**ORACLE, "tasks": [f"task{i}" for i in range(650_000)]}).encode()
    assert len(tasks) > 8_000_000

    refused(server.request("POST", START, tasks), 413, "body: too large", "limit")
    assert_nothing_queued(server, workspace)


def test_a_chunked_body_over_the_limit_is_413(server: Server, workspace: Path) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        conn.putrequest("POST", START, skip_host=True)
        conn.putheader("Host", f"127.0.0.1:{server.port}")
        conn.putheader("Content-Type", "application/json")
        conn.putheader("Transfer-Encoding", "chunked")
        conn.endheaders()
        chunk = b" " * 65536
        for _ in range(20):  # 1.25 MiB of whitespace, no Content-Length
            conn.send(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        conn.send(b"0\r\n\r\n")
        response = conn.getresponse()
        status, body = response.status, json.loads(response.read())
    finally:
        conn.close()

    refused((status, body), 413, "body: too large")
    assert_nothing_queued(server, workspace)


# -- paths -----------------------------------------------------------------------------------
@pytest.mark.parametrize("suffix", ["", "/log", "/assets/x.png"])
def test_a_300_digit_episode_index_is_422(server: Server, suffix: str) -> None:
    path = f"/api/eval/v2/runs/{RUN_ID}/episodes/{HUGE_INDEX}{suffix}"
    body = refused(server.request("GET", path), 422, "path.index: Input should be less than")
    assert body["problems"][0]["field"] == "index"


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/api/eval/v2/status/{long}"),
        ("POST", "/api/eval/v2/cancel/{long}"),
        ("GET", "/api/eval/v2/runs/{long}/episodes"),
        ("GET", "/api/graphs/{long}"),
        ("POST", "/api/nodesets/{long}/load"),
        ("GET", f"/api/eval/v2/runs/{RUN_ID}/episodes/0/assets/{{long}}"),
    ],
)
def test_overlong_names_are_refused_by_their_pattern(
    server: Server, method: str, path: str
) -> None:
    refused(server.request(method, path.format(long="a" * 5000)), 422, "path.")


def test_compare_checks_its_run_ids(server: Server) -> None:
    refused(server.request("GET", "/api/eval/v2/compare?a=..&b=x"), 422, "query.a", "query.b")
    assert server.request("GET", f"/api/eval/v2/compare?a={RUN_ID}&b={RUN_ID}")[0] == 200
    # Valid ids of two runs with no episode in common: refused, saying why.
    refused(server.request("GET", f"/api/eval/v2/compare?a={RUN_ID}&b={OTHER_RUN}"), 400,
            "no paired episode")  # fmt: skip


def test_a_malformed_origin_is_403(server: Server) -> None:
    for origin in ("http://[bad", "http://[::1", "http://127.0.0.1:99999", "http://["):
        refused(server.request("GET", QUEUE, headers={"Origin": origin}), 403, "Origin")
    refused(server.post_json(START, ORACLE, headers={"Origin": "http://[bad"}), 403, "Origin")


def test_wrong_methods_are_405_and_unknown_api_paths_404(server: Server) -> None:
    for method in ("GET", "OPTIONS", "PUT", "DELETE"):
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
        try:
            conn.request(method, START, headers={"Host": f"127.0.0.1:{server.port}"})
            response = conn.getresponse()
            body = json.loads(response.read())
        finally:
            conn.close()
        assert response.status == 405, (method, body)
        assert response.getheader("allow") == "POST"
        assert body == {"detail": "Method Not Allowed"}
    refused(server.request("POST", QUEUE), 405)
    refused(server.request("GET", "/api/nope"), 404)
    refused(server.request("POST", "/api/eval/v2/nope"), 404)
    # The web page is still served.
    status, page = server.request("GET", "/")
    assert status == 200 and "<html" in page.lower()


# -- symlinks leading out of the run folder ----------------------------------------------------
EPISODES = f"/api/eval/v2/runs/{RUN_ID}/episodes"


def test_the_controls_are_served(server: Server) -> None:
    status, record = server.request("GET", f"{EPISODES}/0")
    assert status == 200 and record["assets"] == ["frame.png"], record
    assert server.request("GET", f"{EPISODES}/0/assets/frame.png")[0] == 200
    assert server.request("GET", f"{EPISODES}/0/log")[0] == 200


def test_an_assets_folder_linked_to_etc_serves_nothing(server: Server) -> None:
    assert os.path.exists("/etc/passwd")
    refused(server.request("GET", f"{EPISODES}/1/assets/passwd"), 400, "not inside")
    refused(server.request("GET", f"{EPISODES}/1"), 400, "not inside")


def test_an_episode_folder_linked_to_another_run_is_refused(server: Server) -> None:
    body = refused(server.request("GET", f"{EPISODES}/2"), 400, "not inside")
    assert OTHER_RUN not in json.dumps(body)
    refused(server.request("GET", f"{EPISODES}/2/log"), 400, "not inside")


def test_linked_files_in_an_episode_are_refused(server: Server) -> None:
    refused(server.request("GET", f"{EPISODES}/3"), 400, "not inside")
    refused(server.request("GET", f"{EPISODES}/4/log"), 400, "not inside")
    refused(server.request("GET", f"{EPISODES}/5/assets/secret.png"), 400, "not inside")
    status, record = server.request("GET", f"{EPISODES}/5")
    assert status == 200 and record["assets"] == [], record  # not even listed
