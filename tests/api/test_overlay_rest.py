"""An active-workspace overlay on a REST start, against a real backend: as on the CLI.

The workspace has a graph ``mini`` (GoToObj); the overlay has its own ``mini`` (GoToLocal), a
graph only it knows (``tagged``), and a node set only it has (``tagger``, which ``tagged``
uses). A start with ``active_workspace_dir`` resolves, validates and freezes the overlay's
graphs, and the run's subprocess loads the overlay's node set.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from support.backend import Backend
from support.workspace import write_files

ORACLE: dict[str, Any] = json.loads(
    (Path(__file__).resolve().parents[2] / "src/agentcanvas/graphs/babyai_oracle.json").read_text()
)
TAGGER = """
from agentcanvas.nodes.base import NodeSet
from agentcanvas.nodes.manifest import PortSpec

NODESET = NodeSet(name="tagger", version="0.1.0", parallelism="local",
                  description="Emits the overlay's tag.")


@NODESET.node("tag", outputs=[PortSpec(name="value", type="int")])
def tag(inputs, config, state, ctx):
    return {"value": 7}
"""


def _graph(name: str, task: str, **extra: Any) -> str:
    env = {**ORACLE["env"], "tasks": [task], "fields": {**ORACLE["env"]["fields"], "task_id": task}}
    return json.dumps({**ORACLE, "name": name, "env": env, **extra})


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Backend]:
    root = tmp_path_factory.mktemp("overlay")
    tagged = json.loads(_graph("tagged", "BabyAI-GoToObj-v0"))
    tagged["nodes"].append({"id": "tag", "type": "tagger.tag"})
    tagged["edges"].append({"source": "tag.value", "target": "out.tag"})
    write_files(
        root,
        {
            "graphs/mini.json": _graph("mini", "BabyAI-GoToObj-v0"),
            "overlay/graphs/mini.json": _graph("mini", "BabyAI-GoToLocal-v0"),
            "overlay/graphs/tagged.json": json.dumps(tagged),
            "overlay/graph_nodes/tagger/__init__.py": TAGGER,
        },
    )
    with Backend(root) as server:
        yield server


def _start(backend: Backend, graph: str, **extra: Any) -> tuple[int, Any]:
    body = {"graph_name": graph, "episode_count": 1, **extra}
    response = backend.http.post("/api/eval/v2/start", json=body)
    return response.status_code, response.json()


def test_without_the_overlay_its_graph_is_unknown(backend: Backend) -> None:
    status, body = _start(backend, "tagged")

    assert status == 404 and "unknown graph 'tagged'" in body["detail"], body


def test_the_overlays_copy_of_a_graph_runs(backend: Backend) -> None:
    status, started = _start(backend, "mini", active_workspace_dir="overlay")
    assert status == 200, started
    run_id = started["run_id"]

    summary = backend.wait_status(run_id, "completed")

    assert [e["task"] for e in summary["episodes"]] == ["BabyAI-GoToLocal-v0"]
    frozen = json.loads((backend.run_dir(run_id) / "graph.json").read_text())
    assert frozen["env"]["tasks"] == ["BabyAI-GoToLocal-v0"]
    spec = json.loads((backend.run_dir(run_id) / "spec.json").read_text())
    assert spec["active_workspace_dir"] == str((backend.workspace / "overlay").resolve())
    # The control: the same graph without the overlay is the workspace's.
    status, plain = _start(backend, "mini")
    assert status == 200, plain
    summary = backend.wait_status(plain["run_id"], "completed")
    assert [e["task"] for e in summary["episodes"]] == ["BabyAI-GoToObj-v0"]


def test_a_graph_and_node_set_only_in_the_overlay_run(backend: Backend) -> None:
    status, started = _start(backend, "tagged", active_workspace_dir="overlay")
    assert status == 200, started

    summary = backend.wait_status(started["run_id"], "completed")

    (episode,) = summary["episodes"]
    assert episode["status"] == "completed" and episode["metrics"]["tag"] == 7, episode


def test_an_overlay_inside_the_outputs_folder_is_refused(backend: Backend) -> None:
    """Run folders are written by runs: an overlay there would import whatever a run wrote."""
    runs = backend.workspace / "outputs" / "eval_runs"
    runs.mkdir(parents=True, exist_ok=True)
    for folder in ("outputs", "outputs/eval_runs"):
        status, body = _start(backend, "mini", active_workspace_dir=folder)
        assert status == 400, body
        assert "active_workspace_dir" in body["detail"] and "outputs/" in body["detail"]
