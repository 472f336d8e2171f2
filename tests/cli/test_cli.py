"""The ``agentcanvas`` console script, run as a real subprocess against a real workspace.

Every bad input must exit non-zero with a message naming what is wrong — never a traceback.
The workspace's user node set and graph are the worked example of ``docs/nodesets.md``.
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from agentcanvas.graph.model import parse_graph
from support.cli import run_cli
from support.doc_example import doc_example_files
from support.workspace import write_files

CLI_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Run:
    returncode: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        return json.loads(self.stdout)


def _graph(name: str, nodes: list[dict[str, Any]], edges: list[dict[str, Any]]) -> str:
    return json.dumps({"version": 1, "name": name, "nodes": nodes, "edges": edges})


ARITH_P = {"id": "p", "type": "core.arith"}
ARITH_Q = {"id": "q", "type": "core.arith"}
BAD_FILES = {
    "graph_nodes/broken/__init__.py": "raise RuntimeError('boom at import')\n",
    "graphs/malformed.json": '{"version": 1,\n  "name": "malformed",\n  "nodes": [,]\n}\n',
    "graphs/bad_schema.json": json.dumps(
        {
            "version": 1,
            "name": "bad_schema",
            "step_budget": 0,
            "nodes": [{"id": "my node", "type": "core.constant"}],
        }
    ),
    "graphs/no_nodes.json": json.dumps({"version": 1, "name": "no_nodes"}),
    "graphs/unknown_refs.json": _graph(
        "unknown_refs",
        [
            {"id": "c", "type": "core.constant"},
            ARITH_P,
            {"id": "x", "type": "nosuch.node"},
            {"id": "y", "type": "core.nope"},
        ],
        [{"source": "c.nope", "target": "p.a"}, {"source": "c.value", "target": "p.nope"}],
    ),
    "graphs/loop.json": _graph(
        "loop",
        [ARITH_P, ARITH_Q],
        [{"source": "p.out", "target": "q.a"}, {"source": "q.out", "target": "p.a"}],
    ),
    "graphs/uses_broken.json": _graph("uses_broken", [{"id": "b1", "type": "broken.thing"}], []),
}


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("cli") / "workspace"
    return write_files(root, {**doc_example_files(), **BAD_FILES})


@pytest.fixture(scope="module")
def overlay(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An active workspace whose line_walk plays the 'hard' track instead."""
    data = json.loads(doc_example_files()["graphs/line_walk.json"])
    data["env"] = {"nodeset": "line_world", "fields": {"track": "hard"}, "tasks": ["line-21"]}
    data["description"] = "overlay version"
    root = tmp_path_factory.mktemp("cli") / "overlay"
    return write_files(root, {"graphs/line_walk.json": json.dumps(data)})


def agentcanvas(workspace: Path, *args: str, overlay: Path | None = None) -> Run:
    env = {k: v for k, v in os.environ.items() if k != "ACTIVE_WORKSPACE_DIR"}
    if overlay is not None:
        env["ACTIVE_WORKSPACE_DIR"] = str(overlay)
    proc = run_cli(*args, workspace=workspace, timeout_s=CLI_TIMEOUT_S, env=env)
    for stream in (proc.stdout, proc.stderr):
        assert "Traceback" not in stream, stream
    return Run(proc.returncode, proc.stdout, proc.stderr)


def _user_error(run: Run) -> str:
    """A bad input: exit 1, an ``error:`` line on stderr, nothing on stdout."""
    assert run.returncode == 1, (run.stdout, run.stderr)
    assert run.stderr.startswith("error: ")
    assert run.stdout == ""
    return run.stderr


# -- the main job ------------------------------------------------------------------------


def test_play_babyai_oracle_prints_success_and_spl_and_repeats_exactly(workspace: Path) -> None:
    runs = [
        agentcanvas(workspace, "play", "babyai_oracle", "--episode", "0", "--json")
        for _ in range(2)
    ]
    records = []
    for run in runs:
        assert run.returncode == 0, run.stderr
        record = run.json()
        assert record["status"] == "completed"
        assert record["metrics"]["success"] == 1
        assert 0.0 < record["metrics"]["spl"] <= 1.0
        assert record["task"] == "BabyAI-GoToObj-v0" and record["episode_index"] == 0
        assert record["instruction"].startswith("go to the ")
        record.pop("duration_s")
        records.append(record)
    assert records[0] == records[1]


def test_schema_validate_and_show(workspace: Path) -> None:
    schema = agentcanvas(workspace, "schema")
    assert schema.returncode == 0
    assert schema.json()["title"] == "AgentCanvas graph"
    valid = agentcanvas(workspace, "validate", "babyai_oracle")
    assert (valid.returncode, valid.stdout) == (0, "babyai_oracle: ok (3 nodes, 6 edges)\n")
    shown = agentcanvas(workspace, "graphs", "show", "babyai_oracle")
    assert shown.returncode == 0
    graph = parse_graph(shown.json())
    assert graph.name == "babyai_oracle" and graph.env is not None


# -- a user node set in workspace/graph_nodes/, used by a workspace graph ----------------


def test_user_node_set_is_listed_and_a_broken_one_reported(workspace: Path) -> None:
    run = agentcanvas(workspace, "nodesets")
    assert run.returncode == 0
    assert "line_world 0.1.0 [replicated, workspace]" in run.stdout
    assert "line_world.step(move) -> (position, goal, done, metrics)" in run.stdout
    assert "core 0.1.0 [local, builtin]" in run.stdout
    assert "broken: FAILED TO LOAD:" in run.stderr
    assert "RuntimeError: boom at import" in run.stderr


def test_play_a_workspace_graph_with_a_user_node_set(workspace: Path) -> None:
    run = agentcanvas(workspace, "play", "line_walk", "--episode", "2", "--json")
    assert run.returncode == 0, run.stderr
    record = run.json()
    goal = int(record["instruction"].rsplit(" ", 1)[1])
    assert record["status"] == "completed"
    assert (record["task"], record["episode_id"], record["step_budget"]) == (
        "line-5",
        "line-5/2",
        10,
    )
    assert record["metrics"] == {
        "success": 1,
        "moves": math.ceil(goal / 2),
        "cells_visited": math.ceil(goal / 2) + 1,
    }


def test_graph_listing_shows_origins_and_format_errors(workspace: Path) -> None:
    rows = {row["name"]: row for row in agentcanvas(workspace, "graphs", "--json").json()["graphs"]}
    assert rows["babyai_oracle"]["origin"] == "builtin"
    assert rows["line_walk"]["origin"] == "workspace"
    assert rows["line_walk"]["nodesets"] == ["line_world", "core"]
    assert "not valid JSON" in rows["malformed"]["error"]
    assert "field 'nodes'" in rows["no_nodes"]["error"]


def test_active_workspace_graph_overrides_the_workspace_graph(
    workspace: Path, overlay: Path
) -> None:
    listing = agentcanvas(workspace, "graphs", "--json", overlay=overlay).json()["graphs"]
    row = next(r for r in listing if r["name"] == "line_walk")
    assert (row["origin"], row["description"]) == ("active", "overlay version")
    run = agentcanvas(workspace, "play", "line_walk", "--json", overlay=overlay)
    assert run.returncode == 0, run.stderr
    record = run.json()
    assert (record["task"], record["episode_id"], record["step_budget"]) == (
        "line-21",
        "line-21/0",
        42,
    )
    assert record["metrics"]["success"] == 1


# -- bad input: a clear message naming the field, a non-zero exit, no traceback ----------


def test_malformed_json_names_the_file_and_position(workspace: Path) -> None:
    path = workspace / "graphs" / "malformed.json"
    message = _user_error(agentcanvas(workspace, "validate", str(path)))
    assert f"{path}: not valid JSON at line 3, column 13" in message


def test_schema_violations_name_each_field(workspace: Path) -> None:
    message = _user_error(agentcanvas(workspace, "validate", "bad_schema"))
    assert "the graph does not match the format" in message
    assert "field 'step_budget'" in message and "must be >= 1" in message
    assert "field 'nodes.0.id'" in message
    assert "field 'nodes': Field required" in _user_error(
        agentcanvas(workspace, "play", "no_nodes")
    )


def test_unknown_graph(workspace: Path) -> None:
    message = _user_error(agentcanvas(workspace, "play", "no_such_graph"))
    assert "unknown graph 'no_such_graph' (known graphs: " in message
    assert "line_walk" in message


def test_unknown_node_set_type_and_ports_are_all_named(workspace: Path) -> None:
    message = _user_error(agentcanvas(workspace, "validate", "unknown_refs"))
    assert "graph 'unknown_refs' is not runnable" in message
    assert "node 'x' has type 'nosuch.node': unknown node set 'nosuch'" in message
    assert "node 'y' has type 'core.nope': node set 'core' has no node 'nope'" in message
    assert "edge c.nope -> p.a: node 'c' has no output port 'nope'" in message
    assert "edge c.value -> p.nope: node 'p' has no input port 'nope'" in message


def test_same_iteration_cycle_names_the_nodes_and_the_fix(workspace: Path) -> None:
    message = _user_error(agentcanvas(workspace, "validate", "loop"))
    assert "cycle without a next_iteration edge: p -> q -> p" in message
    assert '"next_iteration": true' in message


def test_a_graph_using_a_node_set_that_failed_to_import_is_refused(workspace: Path) -> None:
    message = _user_error(agentcanvas(workspace, "play", "uses_broken"))
    assert "node 'b1' has type 'broken.thing'" in message
    assert "unknown node set 'broken'" in message


def test_play_with_a_step_budget_below_one_fails(workspace: Path) -> None:
    run = agentcanvas(workspace, "play", "babyai_oracle", "--step-budget", "0")
    assert run.returncode != 0
    assert re.search(r"step.budget", run.stdout + run.stderr, re.IGNORECASE)
    assert "0" in run.stdout + run.stderr
