"""Runs of 10,000+ episodes read through a real ``agentcanvas serve`` on loopback.

Two run folders are written before the backend starts, through the run-folder API
(``agentcanvas.eval.records`` and ``eval.store``) with real ``EpisodeResult`` records:

- ``LIVE``: a run stopped mid-way without its final summary (status ``running``, no
  ``_DONE``; the backend's recovery marks it ``aborted``, its summary rebuilt). When a writer
  resumes it, records appended to its index show up in the next answer.
- ``DONE``: a completed run of the same episodes whose final summary holds every record.

Status, the listing, paginated episode pages and compare must answer for both; each request
has the client's 60 s timeout as its deadline (timings belong in bench/runsize.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentcanvas.eval import metrics
from agentcanvas.eval.config import EpisodeResult, EvalConfig, EvalRun
from agentcanvas.eval.records import append_record, start_index
from agentcanvas.eval.store import RunDir
from agentcanvas.fileio import atomic_write_json, read_json
from support.backend import Backend

N = 10_000
N_TOTAL = N + 10  # LIVE gets 10 more records while the backend serves it
LIVE = "20260101_000001"
DONE = "20260101_000002"
TASKS = ("BabyAI-GoToObj-v0", "BabyAI-GoToLocal-v0")
API = "/api/eval/v2"


def record(index: int, *, flipped: bool = False) -> EpisodeResult:
    """Episode ``index``: two tasks of N_TOTAL / 2; success on 2 of 3; every 500th errs."""
    task = TASKS[index * 2 // N_TOTAL]
    success = (index % 3 != 0) != (flipped and index % 7 == 0)
    status = "exception" if index % 500 == 499 else "completed"
    return EpisodeResult(
        index=index,
        task=task,
        episode_index=index % (N_TOTAL // 2),
        seed=index * 31 + 7,
        status=status,
        steps=index % 40,
        duration_s=0.01,
        metrics={"success": success, "steps": index % 40},
        error="RuntimeError: boom" if status != "completed" else None,
    )


def write_run(runs: Path, run_id: str, results: list[EpisodeResult], final: bool) -> None:
    run_dir = RunDir(runs / run_id)
    run_dir.create()
    start_index(run_dir, results[: N // 2])
    for result in results[N // 2 :]:
        append_record(run_dir, result)
    config = EvalConfig(graph_name="babyai_oracle", episode_count=N_TOTAL // 2, worker_count=4)
    summary = EvalRun(
        run_id=run_id,
        graph_name="babyai_oracle",
        config=config,
        episodes_total=N_TOTAL,
        episodes_done=len(results),
        status_counts=metrics.status_counts(results),
        status="completed" if final else "running",
        episodes_complete=final,
        episodes=results if final else [],
        aggregate_metrics=metrics.aggregate_metrics(results),
        episodes_aggregated=len(results),
    )
    atomic_write_json(run_dir.summary_path, summary.model_dump(mode="json"))
    # episode.json is each record's durable copy (recovery rebuilds counts from them);
    # plain writes: 10,000 fsyncs would only slow the fixture down.
    for result in results:
        run_dir.create_episode(result.index)
        run_dir.episode_json_path(result.index).write_text(result.model_dump_json())
    if final:
        run_dir.touch_done()


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Backend]:
    workspace = tmp_path_factory.mktemp("large") / "workspace"
    runs = workspace / "outputs" / "eval_runs"
    write_run(runs, LIVE, [record(i) for i in range(N)], final=False)
    write_run(runs, DONE, [record(i, flipped=True) for i in range(N_TOTAL)], final=True)
    server = Backend(workspace)
    server.http.timeout = 60.0
    try:
        yield server
    finally:
        server.close()


def get(backend: Backend, path: str, **params: Any) -> Any:
    response = backend.http.get(f"{API}{path}", params=params)
    assert response.status_code == 200, response.text
    return response.json()


def test_status_listing_and_the_full_summary_of_a_stopped_10k_run(backend: Backend) -> None:
    compact = get(backend, f"/status/{LIVE}", compact=True)
    assert compact["status"] == "aborted"  # recovery: it was running, without _DONE
    assert compact["episodes_done"] == N and "episodes" not in compact
    full = get(backend, f"/status/{LIVE}")
    assert [e["index"] for e in full["episodes"]] == list(range(N))  # from the index
    assert full["episodes"][1234] == record(1234).model_dump(mode="json")
    done = get(backend, f"/status/{DONE}")
    assert done["episodes_complete"] and len(done["episodes"]) == N_TOTAL
    rows = {r["run_id"]: r for r in get(backend, "/runs")["runs"]}
    assert set(rows) >= {LIVE, DONE} and "episodes" not in rows[DONE]
    assert rows[DONE]["success_rate"] == done["aggregate_metrics"]["success"]["mean"]
    assert rows[LIVE]["status"] == "aborted"


def test_episode_pages_of_a_10k_run_filter_sort_and_page(backend: Backend) -> None:
    for run_id in (LIVE, DONE):
        last = get(backend, f"/runs/{run_id}/episodes", offset=N - 100, limit=100)
        assert last["total"] >= N
        assert [e["index"] for e in last["episodes"]] == list(range(N - 100, N))
        errors = get(backend, f"/runs/{run_id}/episodes", outcome="error", limit=1000)
        expected_errors = [i for i in range(last["total"]) if i % 500 == 499]
        assert [e["index"] for e in errors["episodes"]] == expected_errors
        longest = get(backend, f"/runs/{run_id}/episodes", sort="steps:desc", limit=5)
        assert {e["steps"] for e in longest["episodes"]} == {39}
    failures = get(backend, f"/runs/{LIVE}/episodes", outcome="failure", limit=1)
    assert failures["total"] == sum(1 for i in range(N) if i % 3 == 0 and i % 500 != 499)
    detail = get(backend, f"/runs/{LIVE}/episodes/{N - 1}")
    assert detail["index"] == N - 1 and detail["assets"] == []


def test_compare_pairs_10k_episodes(backend: Backend) -> None:
    result = get(backend, "/compare", a=LIVE, b=DONE)
    assert result["paired"] == N
    flips = [i for i in range(N) if i % 7 == 0 and i % 500 != 499]
    assert sorted(f["a_index"] for f in result["flips"]) == flips
    a_only = sum(1 for i in flips if i % 3 != 0)
    assert result["mcnemar"]["a_only"] == a_only
    assert result["mcnemar"]["b_only"] == len(flips) - a_only
    assert set(result["per_task"]) == set(TASKS)


def test_records_appended_to_a_live_index_show_up_in_the_next_answer(
    backend: Backend,
) -> None:
    before = get(backend, f"/runs/{LIVE}/episodes", offset=N - 1, limit=100)
    assert before["total"] == N
    run_dir = RunDir(backend.run_dir(LIVE))
    # A writer resumes it: its first save says the records are in the index again.
    summary = read_json(run_dir.summary_path)
    summary.update(status="running", episodes=[], episodes_complete=False)
    atomic_write_json(run_dir.summary_path, summary)
    for index in range(N, N_TOTAL):
        append_record(run_dir, record(index))
    after = get(backend, f"/runs/{LIVE}/episodes", offset=N - 1, limit=100)
    assert after["total"] == N_TOTAL
    assert [e["index"] for e in after["episodes"]] == list(range(N - 1, N_TOTAL))
    assert len(get(backend, f"/status/{LIVE}")["episodes"]) == N_TOTAL
