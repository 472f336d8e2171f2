"""``GET /api/eval/v2/compare`` guards, through a real backend over run folders written with
the run-folder models: two runs without a paired episode are a 400; different seeds are a
caveat; what differs between the frozen graphs is listed node by node; a spec.json that no
longer reads is said, not a failure."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentcanvas.eval import metrics
from agentcanvas.eval.config import EpisodeResult, EvalConfig, EvalRun
from agentcanvas.eval.run_spec import RunSpec
from agentcanvas.eval.store import RunDir
from agentcanvas.fileio import atomic_write_json
from agentcanvas.server.registry import WorkspaceComponentRegistry
from support.backend import Backend

COMPARE = "/api/eval/v2/compare"
A, B, OTHER_TASK, NO_SPEC = (f"20260102_00000{i}" for i in range(1, 5))
TASK = "BabyAI-GoToObj-v0"


def oracle_graph() -> dict[str, Any]:
    registry = WorkspaceComponentRegistry()
    registry.scan_all()
    return registry.load_graph("babyai_oracle").model_dump(mode="json")


def write_run(runs: Path, run_id: str, seed: int, task: str, graph: dict[str, Any]) -> RunDir:
    run_dir = RunDir(runs / run_id)
    run_dir.create()
    config = EvalConfig(graph_name="babyai_oracle", episode_count=4, seed=seed, tasks=[task])
    results = [
        EpisodeResult(
            index=i,
            task=task,
            episode_index=i,
            seed=seed + i,
            status="completed",
            metrics={"success": (i + seed) % 2 == 0},
        )
        for i in range(4)
    ]
    for result in results:
        run_dir.create_episode(result.index)
        atomic_write_json(run_dir.episode_json_path(result.index), result.model_dump(mode="json"))
    summary = EvalRun(
        run_id=run_id,
        graph_name="babyai_oracle",
        config=config,
        episodes_total=4,
        episodes_done=4,
        status="completed",
        episodes=results,
        status_counts=metrics.status_counts(results),
    )
    atomic_write_json(run_dir.summary_path, summary.model_dump(mode="json"))
    RunSpec(config=config, graph=graph, run_id=run_id).write(run_dir)
    run_dir.touch_done()
    return run_dir


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Backend]:
    workspace = tmp_path_factory.mktemp("compare") / "workspace"
    runs = workspace / "outputs" / "eval_runs"
    graph = oracle_graph()
    edited = copy.deepcopy(graph)
    edited["env"]["fields"]["step_latency_ms"] = 5
    edited["nodes"][1]["config"] = {"noise": 0.1}
    write_run(runs, A, 0, TASK, graph)
    write_run(runs, B, 7, TASK, edited)
    write_run(runs, OTHER_TASK, 0, "BabyAI-GoToLocal-v0", graph)
    write_run(runs, NO_SPEC, 0, TASK, graph).spec_path.write_text("{not json")
    with Backend(workspace) as server:
        yield server


def test_runs_without_a_paired_episode_are_a_400_saying_so(backend: Backend) -> None:
    answer = backend.http.get(COMPARE, params={"a": A, "b": OTHER_TASK})

    assert answer.status_code == 400, answer.text
    assert f"runs {A} and {OTHER_TASK} have no paired episode" in answer.json()["detail"]


def test_different_seeds_and_an_edited_graph_are_said(backend: Backend) -> None:
    result = backend.api("GET", COMPARE, params={"a": A, "b": B})

    assert result["paired"] == 4 and result["seeds_differ"] is True
    (caveat,) = result["caveats"]
    assert "different seeds (A: 0, B: 7)" in caveat
    diff = result["graph_differences"]
    assert diff["same"] is False
    assert diff["nodes_changed"] == [{"node": "nav", "field": "config.noise", "a": None, "b": 0.1}]
    assert diff["graph_changed"] == [{"field": "env.fields.step_latency_ms", "a": None, "b": 5}]
    assert diff["nodes_added"] == diff["nodes_removed"] == diff["edges_added"] == []


def test_a_run_whose_spec_no_longer_reads_is_still_compared(backend: Backend) -> None:
    result = backend.api("GET", COMPARE, params={"a": A, "b": NO_SPEC})

    assert result["paired"] == 4 and result["graph_differences"] is None
    assert any(f"run B ({NO_SPEC}) could not be read" in c for c in result["caveats"])
