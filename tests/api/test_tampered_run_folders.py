"""Run folders a user tampered with, read through a real ``agentcanvas serve`` on loopback.

Valid runs (with episodes, written from the typed models) are fabricated before the backend
starts, then copies of one are damaged in every shape a hand or a tool leaves behind: a
summary.json of garbage bytes, a JSON list, an object with a list where a string belongs, a
missing summary; an episode.json of megabytes of junk or a list; meta.json or spec.json of
garbage; JSON nested deeper than a parser recurses; episodes.jsonl with junk lines and
records of the wrong types. Every read route of
such a run answers 200 or a 4xx whose ``detail`` names the damaged file, never a 5xx; the
listing still lists every run (a damaged one marked ``damaged``) and a search, a tag or a
status filter answers 200 for the whole workspace; the healthy runs read as before.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from agentcanvas.eval.config import EpisodeResult, EvalConfig, EvalRun
from agentcanvas.eval.run_spec import RunSpec
from support.backend import Server, serve

pytestmark = pytest.mark.slow

API = "/api/eval/v2"
GOOD = "20260101_000000"
GOOD_TOO = "20260101_000001"
EPISODES = 3
JUNK_MB = 5


def _write_run(runs: Path, run_id: str, *, complete: bool = True) -> Path:
    run = runs / run_id
    config = EvalConfig(graph_name="babyai_oracle", episode_count=EPISODES)
    records = [
        EpisodeResult(
            index=i,
            episode_index=i,
            seed=i,
            status="completed",
            task="BabyAI-GoToObj-v0",
            steps=3 + i,
            metrics={"success": float(i % 2), "return": 0.5 * i},
        )
        for i in range(EPISODES)
    ]
    for record in records:
        folder = run / "episodes" / f"ep{record.index:04d}"
        (folder / "assets").mkdir(parents=True)
        (folder / "episode.json").write_text(record.model_dump_json())
        (folder / "log.jsonl").write_text('{"node": "env"}\n')
        (folder / "assets" / "frame.png").write_bytes(b"\x89PNG control")
    (run / "episodes.jsonl").write_text("".join(r.model_dump_json() + "\n" for r in records))
    summary = EvalRun(
        run_id=run_id,
        status="completed" if complete else "running",
        graph_name="babyai_oracle",
        config=config,
        episodes_total=EPISODES,
        episodes_done=EPISODES,
        episodes=records if complete else [],
        episodes_complete=complete,
    )
    (run / "summary.json").write_text(summary.model_dump_json())
    (run / "meta.json").write_text('{"name": "fine run", "tags": ["t"], "note": null}')
    (run / "_DONE").write_text("")
    return run


def _write(path: Path, data: bytes | str) -> None:
    path.write_bytes(data if isinstance(data, bytes) else data.encode())


def _summary_fields(run: Path, **fields: Any) -> None:
    import json

    data = json.loads((run / "summary.json").read_text())
    data.update(fields)
    _write(run / "summary.json", json.dumps(data))


def _summary_missing(run: Path) -> None:
    (run / "summary.json").unlink()
    config = EvalConfig(graph_name="babyai_oracle", episode_count=EPISODES)
    spec = RunSpec(run_id=run.name, config=config, graph={"name": "babyai_oracle", "nodes": []})
    _write(run / "spec.json", spec.model_dump_json(by_alias=True))


def _live_with_junk_index(run: Path) -> None:
    lines = [
        "not json at all",
        '{"index": 1, "status": [], "metrics": "x", "task": {}}',
        '{"index": 2, "steps": "many", "episode_index": [1], "seed": null}',
        "[1, 2, 3]",
        '{"index": "zero"}',
        "\x00\xff\xfe garbage",
    ]
    with (run / "episodes.jsonl").open("a") as handle:
        handle.write("\n".join(lines) + "\n")


# shape -> (run id, how to damage a copy of a valid run, the file a 4xx must name, live run)
Tamper = Callable[[Path], None]
SHAPES: dict[str, tuple[str, Tamper, str, bool]] = {
    "summary_garbage": (
        "20260102_000000",
        lambda run: _write(run / "summary.json", b"\x00\xff{garbage"),
        "summary.json",
        False,
    ),
    "summary_list": (
        "20260102_000001",
        lambda run: _write(run / "summary.json", "[1, 2, 3]"),
        "summary.json",
        False,
    ),
    "summary_wrong_types": (
        "20260102_000002",
        lambda run: _summary_fields(run, status=[], graph_name=[1], run_id={}),
        "summary.json",
        False,
    ),
    "summary_bad_episodes": (
        "20260102_000003",
        lambda run: _summary_fields(run, episodes=[{"index": []}, 7], config=[1]),
        "summary.json",
        False,
    ),
    "summary_sparse_episodes": (  # records with only what readers need, none of the rest
        "20260102_000015",
        lambda run: _summary_fields(
            run, episodes=[{"index": 0}, {"index": 1, "task": "BabyAI-GoToObj-v0"}]
        ),
        "summary.json",
        False,
    ),
    "summary_missing": ("20260102_000004", _summary_missing, "summary.json", False),
    "episode_junk": (
        "20260102_000005",
        lambda run: _write(
            run / "episodes" / "ep0000" / "episode.json", b"\x01junk" * (JUNK_MB * 200_000)
        ),
        "episode.json",
        False,
    ),
    "episode_list": (
        "20260102_000006",
        lambda run: _write(run / "episodes" / "ep0000" / "episode.json", "[1, 2]"),
        "episode.json",
        False,
    ),
    "meta_garbage": (
        "20260102_000007",
        lambda run: _write(run / "meta.json", b"\xff\x00 not meta ["),
        "meta.json",
        False,
    ),
    "summary_deep": (
        "20260102_000011",
        lambda run: _write(run / "summary.json", '{"run_id": ' + "[" * 200_000),
        "summary.json",
        False,
    ),
    "episode_deep": (
        "20260102_000012",
        lambda run: _write(run / "episodes" / "ep0000" / "episode.json", "[" * 200_000),
        "episode.json",
        False,
    ),
    "meta_deep": (
        "20260102_000013",
        lambda run: _write(run / "meta.json", "[" * 200_000),
        "meta.json",
        False,
    ),
    "meta_wrong_types": (
        "20260102_000014",
        lambda run: _write(run / "meta.json", '{"name": [1], "tags": "t", "note": {}}'),
        "meta.json",
        False,
    ),
    "spec_garbage": (
        "20260102_000008",
        lambda run: _write(run / "spec.json", b"\xff\x00 not a spec {"),
        "spec.json",
        False,
    ),
    "spec_list": (
        "20260102_000009",
        lambda run: _write(run / "spec.json", "[]"),
        "spec.json",
        False,
    ),
    "jsonl_junk": ("20260102_000010", _live_with_junk_index, "episodes.jsonl", True),
}


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    workspace = tmp_path_factory.mktemp("tampered") / "workspace"
    runs = workspace / "outputs" / "eval_runs"
    _write_run(runs, GOOD)
    _write_run(runs, GOOD_TOO)
    for run_id, tamper, _, live in SHAPES.values():
        if live:
            run = _write_run(runs, run_id, complete=False)
        else:
            run = runs / run_id
            shutil.copytree(runs / GOOD, run)
            _summary_fields(run, run_id=run_id)
        tamper(run)
    (workspace / "overlay").mkdir()
    return workspace


@pytest.fixture(scope="module")
def server(workspace: Path) -> Iterator[Server]:
    yield from serve(workspace, log=workspace.parent / "serve.log", ready_path=f"{API}/queue")


def read_routes(run_id: str) -> list[str]:
    """Every GET route that reads the run folder of ``run_id``."""
    run, ep = f"{API}/runs/{run_id}", f"{API}/runs/{run_id}/episodes/0"
    return [
        f"{API}/status/{run_id}",
        f"{API}/status/{run_id}?compact=true",
        f"{run}/episodes",
        f"{run}/episodes?outcome=failure&sort=steps:desc",
        f"{run}/episodes?task=BabyAI-GoToObj-v0&status=completed",
        ep,
        f"{ep}/log",
        f"{ep}/assets/frame.png",
        f"{ep}/video.mp4",
        f"{run}/graph",
        f"{run}/logs/stdout",
        f"{run}/meta",
        f"{run}/distributions",
        f"{run}/summary.json",
        f"{run}/episodes.csv",
        f"{run}/failure_videos",
        f"{API}/compare?a={GOOD}&b={run_id}",
        f"{API}/compare?a={run_id}&b={GOOD}",
        f"{API}/leaderboard?runs={GOOD},{run_id}",
        f"{API}/leaderboard?runs={run_id},{GOOD},{GOOD_TOO}",
    ]


LISTINGS = [
    f"{API}/runs?limit=500",
    f"{API}/runs?q=x",
    f"{API}/runs?q=fine",
    f"{API}/runs?tag=t",
    f"{API}/runs?status=completed",
    f"{API}/runs?status=running&q=run",
]


def _problem(status: int, body: Any, file: str) -> str | None:
    """Why an answer breaks the rule (None when it keeps it)."""
    if status >= 500:
        return f"{status}: {str(body)[:300]}"
    if status >= 400:
        if not isinstance(body, dict) or not isinstance(body.get("detail"), str):
            return f"{status} without a detail: {str(body)[:300]}"
        if status != 404 and file not in body["detail"]:
            return f"{status} does not name {file}: {body['detail'][:300]}"
    return None


def test_every_read_of_a_tampered_run_answers_200_or_a_4xx_naming_the_file(
    server: Server,
) -> None:
    problems: dict[str, list[str]] = {}
    for shape, (run_id, _, file, _) in SHAPES.items():
        for path in read_routes(run_id):
            status, body = server.request("GET", path)
            problem = _problem(status, body, file)
            if problem is not None:
                problems.setdefault(shape, []).append(f"{path}: {problem}")
    counts = {shape: len(found) for shape, found in problems.items()}
    assert not problems, (counts, problems)


@pytest.mark.parametrize("path", LISTINGS)
def test_the_listing_answers_for_the_whole_workspace(server: Server, path: str) -> None:
    status, body = server.request("GET", path)

    assert status == 200, body
    assert isinstance(body["runs"], list) and body["total"] >= len(body["runs"])


def test_the_listing_lists_every_run_and_marks_the_damaged_ones(server: Server) -> None:
    status, body = server.request("GET", f"{API}/runs?limit=500")

    assert status == 200, body
    rows = {row["run_id"]: row for row in body["runs"]}
    expected = {GOOD, GOOD_TOO, *(run_id for run_id, *_ in SHAPES.values())}
    assert set(rows) == expected, sorted(expected - set(rows))
    for shape, (run_id, _, file, _) in SHAPES.items():
        damaged = rows[run_id].get("damaged")
        if file in ("summary.json", "meta.json") and shape != "summary_sparse_episodes":
            assert isinstance(damaged, str) and damaged.startswith(file), (shape, damaged)
    wrong = rows[SHAPES["summary_wrong_types"][0]]["damaged"]
    assert "status" in wrong, wrong
    assert rows[GOOD].get("damaged") is None
    assert rows[GOOD]["name"] == "fine run" and rows[GOOD]["status"] == "completed"


def test_a_search_finds_a_damaged_run_by_its_id(server: Server) -> None:
    run_id = SHAPES["summary_wrong_types"][0]
    status, body = server.request("GET", f"{API}/runs?q={run_id}")

    assert status == 200, body
    assert [row["run_id"] for row in body["runs"]] == [run_id]


def test_the_healthy_runs_still_read_as_before(server: Server) -> None:
    for path in [*read_routes(GOOD)[:8], *read_routes(GOOD)[9:16]]:
        status, body = server.request("GET", path)
        assert status == 200 or (path.endswith("/graph") and status == 404), (path, body)
    status, body = server.request("GET", f"{API}/compare?a={GOOD}&b={GOOD_TOO}")
    assert status == 200, body
    status, body = server.request("GET", f"{API}/runs/{GOOD}/episodes/0")
    assert status == 200 and body["index"] == 0 and body["assets"] == ["frame.png"], body


def test_a_junk_index_line_is_skipped_not_served(server: Server) -> None:
    run_id = SHAPES["jsonl_junk"][0]
    status, body = server.request("GET", f"{API}/runs/{run_id}/episodes")

    assert status == 200, body
    assert [e["index"] for e in body["episodes"]] == list(range(EPISODES))
    assert all(isinstance(e["status"], str) for e in body["episodes"])


def test_the_backend_logged_no_traceback(server: Server) -> None:
    for run_id, *_ in SHAPES.values():
        for path in read_routes(run_id):
            server.request("GET", path)
    assert "Traceback" not in server.log.read_text()
