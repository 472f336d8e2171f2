"""WorkspaceComponentRegistry: discovery, overlays, load errors, and load-time validation.

The user node set here is the worked example of ``docs/nodesets.md``, extracted from the page
itself, so the documentation's example is known to run.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
from pathlib import Path
from typing import Any

import pytest

from agentcanvas.catalogue import ACTIVE_WORKSPACE_ENV
from agentcanvas.errors import (
    GraphValidationError,
    UnknownGraphError,
    UnknownNodeSetError,
    UnsafeNameError,
    UserInputError,
)
from agentcanvas.eval.episode import EpisodeOptions, EpisodeSpec, EpisodeWiring, run_episode
from agentcanvas.eval.seeding import episode_seed
from agentcanvas.graph.model import Graph, parse_graph
from agentcanvas.nodes.base import CallContext, LocalNodeSet
from agentcanvas.server.registry import WorkspaceComponentRegistry
from support.workspace import write_files

DOC = Path(__file__).resolve().parents[2] / "docs" / "nodesets.md"
DOC_FILE = re.compile(r"<!-- file: (?P<path>[^ ]+) -->\n```[a-z]*\n(?P<body>.*?)\n```", re.S)
BUILTINS = {"core", "env_minigrid", "env_gym", "planner"}


def doc_example_files() -> dict[str, str]:
    """The files of the worked example in docs/nodesets.md, by workspace-relative path."""
    files = {m["path"]: m["body"] + "\n" for m in DOC_FILE.finditer(DOC.read_text("utf-8"))}
    assert set(files) == {"graph_nodes/line_world/__init__.py", "graphs/line_walk.json"}
    return files


def _registry(workspace: Path, active: Path | None = None) -> WorkspaceComponentRegistry:
    registry = WorkspaceComponentRegistry(workspace=workspace, active_workspace=active)
    registry.scan_all()
    return registry


@pytest.fixture
def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv(ACTIVE_WORKSPACE_ENV, raising=False)
    return write_files(tmp_path / "workspace", doc_example_files())


def _graph(nodes: list[dict[str, Any]], edges: list[dict[str, Any]], **extra: Any) -> Graph:
    return parse_graph({"version": 1, "name": "g", "nodes": nodes, "edges": edges, **extra})


def _problems(registry: WorkspaceComponentRegistry, graph: Graph) -> str:
    with pytest.raises(GraphValidationError) as info:
        registry.validate(graph)
    assert isinstance(info.value, UserInputError)
    message = str(info.value)
    assert message.startswith(f"graph '{graph.name}' is not runnable:")
    return message


# -- discovery ---------------------------------------------------------------------------


def test_scan_all_finds_builtins_and_the_workspace_node_set(workspace: Path) -> None:
    registry = _registry(workspace)
    assert registry.load_errors == {}
    assert set(registry.nodeset_names()) >= BUILTINS | {"line_world"}
    assert {registry.origin(n) for n in BUILTINS} == {"builtin"}
    assert registry.origin("line_world") == "workspace"
    graphs = {g.name: g.origin for g in registry.graph_entries()}
    assert graphs["babyai_oracle"] == "builtin" and graphs["line_walk"] == "workspace"


def test_the_doc_example_manifest(workspace: Path) -> None:
    manifest = _registry(workspace).manifest("line_world")
    assert (manifest.name, manifest.version, manifest.parallelism) == (
        "line_world",
        "0.1.0",
        "replicated",
    )
    step = manifest.node_type("step")
    toward = manifest.node_type("toward")
    assert step is not None and toward is not None
    assert step.done_port == "done"
    assert [p.name for p in step.outputs] == ["position", "goal", "done", "metrics"]
    move = step.input("move")
    assert move is not None and (move.type, move.required) == ("int", False)
    assert toward.config_schema["properties"]["max_stride"]["default"] == 1
    assert toward.description == "Move toward the goal, at most max_stride cells per step."
    assert manifest.panel is not None
    assert [f.name for f in manifest.panel.fields] == ["track", "task_id", "episode_index", "seed"]
    assert manifest.panel.actions == ["play"]


async def test_the_doc_example_graph_runs_episodes(workspace: Path) -> None:
    registry = _registry(workspace)
    graph = registry.load_graph("line_walk")
    env = registry.local_instance("line_world")
    wiring = EpisodeWiring(resolver=registry, env=env)
    for task in ("line-5", "line-9"):
        for index in range(3):
            seed = episode_seed(0, task, index)
            spec = EpisodeSpec(index, task, index, seed, key=f"{task}:{index}")
            result = await asyncio.wait_for(
                run_episode(graph, spec, wiring, EpisodeOptions()), 20.0
            )
            goal = int(result.instruction.rsplit(" ", 1)[1])
            assert result.status == "completed", result.error
            assert result.episode_id == f"{task}/{index}"
            assert result.step_budget == 2 * int(task.split("-")[1])  # from on_load
            assert result.metrics == {
                "success": 1,
                "moves": math.ceil(goal / 2),
                "cells_visited": math.ceil(goal / 2) + 1,
            }
            assert result.steps == math.ceil(goal / 2) + 1  # iteration 0 only observes
    assert env.state.visited == {}  # every episode's keyed entries were evicted
    await registry.close_locals()


async def test_the_doc_example_panel_cascade(workspace: Path) -> None:
    env = LocalNodeSet(_registry(workspace).nodeset("line_world"))
    assert (await env.panel_change("task_id", "line-9"))["task_id"] == "line-9"
    values = await env.panel_change("track", "hard")
    assert values["task_id"] == "line-21"  # reset to the first allowed value
    with pytest.raises(UserInputError, match="'task_id'"):
        await env.panel_change("task_id", "line-5")
    with pytest.raises(UserInputError, match="no action 'rewind'"):
        await env.panel_action("rewind")
    defaults = await env.panel_action("reset")  # every panel can return to its defaults
    assert defaults["track"] != "hard" and defaults["task_id"] != "line-21"


def test_the_doc_example_evicts_keyed_state(workspace: Path) -> None:
    env = LocalNodeSet(_registry(workspace).nodeset("line_world"))
    env.state.start("line-9", seed=3)
    for key in ("a", "b"):
        env.call_sync("step", {}, {}, CallContext(node_id="env", step=0, episode_key=key))
    assert set(env.state.visited) == {"a", "b"}
    asyncio.run(env.evict("a"))
    assert set(env.state.visited) == {"b"}


def test_node_config_is_validated_with_defaults(workspace: Path) -> None:
    nodeset = _registry(workspace).nodeset("line_world")
    assert nodeset.validate_config("toward", {}) == {"max_stride": 1}
    with pytest.raises(UserInputError, match="config field 'max_stride'"):
        nodeset.validate_config("toward", {"max_stride": 0})


# -- overlays and overrides --------------------------------------------------------------


def _renamed_graph(description: str) -> dict[str, str]:
    data = json.loads(doc_example_files()["graphs/line_walk.json"])
    data["description"] = description
    return {"graphs/line_walk.json": json.dumps(data)}


def test_active_workspace_overlay_comes_first(workspace: Path, tmp_path: Path) -> None:
    overlay = write_files(tmp_path / "overlay", _renamed_graph("from the overlay"))
    registry = _registry(workspace, active=overlay)
    entry = {g.name: g for g in registry.graph_entries()}["line_walk"]
    assert (entry.origin, entry.path) == ("active", overlay / "graphs" / "line_walk.json")
    assert registry.load_graph("line_walk").description == "from the overlay"
    assert _registry(workspace).load_graph("line_walk").description != "from the overlay"


def test_active_workspace_overlay_from_the_environment(
    workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = {
        "graph_nodes/line_world/__init__.py": doc_example_files()[
            "graph_nodes/line_world/__init__.py"
        ].replace('version="0.1.0"', 'version="9.9.9"')
    }
    overlay = write_files(tmp_path / "overlay", files)
    monkeypatch.setenv(ACTIVE_WORKSPACE_ENV, str(overlay))
    registry = _registry(workspace)
    assert registry.origin("line_world") == "active"
    assert registry.manifest("line_world").version == "9.9.9"


def test_a_workspace_node_set_replaces_a_builtin_of_the_same_name(workspace: Path) -> None:
    write_files(
        workspace,
        {
            "graph_nodes/planner/__init__.py": "from agentcanvas.nodes.base import NodeSet\n"
            "NODESET = NodeSet(name='planner', version='7.0.0')\n"
        },
    )
    registry = _registry(workspace)
    assert registry.origin("planner") == "workspace"
    assert registry.manifest("planner").version == "7.0.0"


# -- node sets that fail to load ---------------------------------------------------------

BROKEN = {
    "graph_nodes/raises/__init__.py": "raise RuntimeError('boom at import')\n",
    "graph_nodes/syntax/__init__.py": "def broken(:\n",
    "graph_nodes/empty/__init__.py": "VALUE = 1\n",
    "graph_nodes/misnamed/__init__.py": (
        "from agentcanvas.nodes.base import NodeSet\nNODESET = NodeSet(name='other')\n"
    ),
}


def test_broken_node_sets_are_load_errors_not_crashes(workspace: Path) -> None:
    registry = _registry(write_files(workspace, BROKEN))
    errors = registry.load_errors
    assert set(errors) == {"raises", "syntax", "empty", "misnamed"}
    assert "failed to import: RuntimeError: boom at import" in errors["raises"]
    assert "failed to import: SyntaxError" in errors["syntax"]
    assert "no NODESET = NodeSet(...)" in errors["empty"]
    assert "declares NodeSet name 'other'" in errors["misnamed"]
    assert "line_world" in registry.nodeset_names()  # the others still load
    with pytest.raises(UnknownNodeSetError, match="boom at import"):
        registry.manifest("raises")


def test_a_graph_using_a_broken_node_set_is_refused_naming_the_node(workspace: Path) -> None:
    registry = _registry(write_files(workspace, BROKEN))
    graph = _graph([{"id": "b1", "type": "raises.thing"}], [])
    assert "node 'b1' has type 'raises.thing': unknown node set 'raises'" in _problems(
        registry, graph
    )


# -- graph loading and validation --------------------------------------------------------


def test_unknown_graph_lists_the_known_ones(workspace: Path) -> None:
    registry = _registry(workspace)
    with pytest.raises(UnknownGraphError) as info:
        registry.load_graph("nope")
    assert str(info.value).startswith("unknown graph 'nope' (known graphs: ")
    assert "babyai_oracle" in str(info.value) and "line_walk" in str(info.value)


@pytest.mark.parametrize("name", ["../etc/passwd", "a b", ""])
def test_unsafe_graph_names_are_refused(workspace: Path, name: str) -> None:
    with pytest.raises(UnsafeNameError, match="graph_name"):
        _registry(workspace).load_graph(name)


def test_a_malformed_workspace_graph_is_refused_on_load(workspace: Path) -> None:
    write_files(workspace, {"graphs/torn.json": '{"version": 1, "name": '})
    with pytest.raises(UserInputError, match=r"torn\.json: not valid JSON at line 1"):
        _registry(workspace).load_graph("torn")


CONST = {"id": "c", "type": "core.constant"}
ARITH = {"id": "a", "type": "core.arith"}


@pytest.mark.parametrize(
    ("nodes", "edges", "expected"),
    [
        (
            [{"id": "x", "type": "nosuch.node"}],
            [],
            "node 'x' has type 'nosuch.node': unknown node set 'nosuch'",
        ),
        (
            [{"id": "x", "type": "core.nope"}],
            [],
            "node 'x' has type 'core.nope': node set 'core' has no node 'nope' (it has: graphIn",
        ),
        (
            [CONST, ARITH],
            [{"source": "c.nope", "target": "a.a"}],
            "edge c.nope -> a.a: node 'c' has no output port 'nope' (outputs: value)",
        ),
        (
            [CONST, ARITH],
            [{"source": "c.value", "target": "a.nope"}],
            "edge c.value -> a.nope: node 'a' has no input port 'nope' (inputs: a, b)",
        ),
        (
            [CONST],
            [{"source": "c.value", "target": "ghost.x"}],
            "edge c.value -> ghost.x: target node 'ghost' does not exist",
        ),
        ([CONST, ARITH, {"id": "a", "type": "core.counter"}], [], "node id 'a' is used twice"),
        (
            [CONST, ARITH],
            [{"source": "c.value", "target": "a.a"}, {"source": "c.value", "target": "a.a"}],
            "input port a.a has 2 incoming edges (at most one)",
        ),
        (
            [{**CONST, "scope": "nowhere"}],
            [],
            "node 'c' (core.constant) is in unknown scope 'nowhere'",
        ),
        ([{**ARITH, "config": {"op": "pow"}}], [], "node 'a' (core.arith): config field 'op'"),
    ],
)
def test_semantic_errors_name_the_node_and_type(
    workspace: Path, nodes: list[dict[str, Any]], edges: list[dict[str, Any]], expected: str
) -> None:
    assert expected in _problems(_registry(workspace), _graph(nodes, edges))


def test_same_iteration_cycle_names_the_nodes_and_suggests_next_iteration(
    workspace: Path,
) -> None:
    nodes = [{"id": "p", "type": "core.arith"}, {"id": "q", "type": "core.arith"}]
    edges = [{"source": "p.out", "target": "q.a"}, {"source": "q.out", "target": "p.a"}]
    registry = _registry(workspace)
    message = _problems(registry, _graph(nodes, edges))
    assert "cycle without a next_iteration edge: p -> q -> p" in message
    assert '"next_iteration": true' in message
    edges[1]["next_iteration"] = True
    registry.validate(_graph(nodes, edges))  # the same loop, marked, is fine


def test_scope_with_an_unknown_parent(workspace: Path) -> None:
    graph = _graph([CONST], [], scopes=[{"id": "s", "parent": "missing"}])
    assert "scope 's' has unknown parent 'missing'" in _problems(_registry(workspace), graph)


def test_env_binding_is_checked_against_the_panel(workspace: Path) -> None:
    registry = _registry(workspace)
    not_env = _graph([CONST], [], env={"nodeset": "core"})
    assert "env.nodeset 'core' is not an environment node set" in _problems(registry, not_env)
    bad_field = _graph([CONST], [], env={"nodeset": "line_world", "fields": {"colour": 1}})
    assert "env.fields: 'colour' is not a panel field (fields: track, task_id" in _problems(
        registry, bad_field
    )


def test_every_problem_is_reported_at_once(workspace: Path) -> None:
    graph = _graph([{"id": "x", "type": "nosuch.node"}, {"id": "y", "type": "core.nope"}], [])
    message = _problems(_registry(workspace), graph)
    assert "node 'x'" in message and "node 'y'" in message


def test_node_spec_of_an_unknown_type(workspace: Path) -> None:
    registry = _registry(workspace)
    assert registry.node_spec("core.counter").name == "counter"
    with pytest.raises(UserInputError, match=r"'core\.nope'"):
        registry.node_spec("core.nope")
    with pytest.raises(UnknownNodeSetError, match="nosuch"):
        registry.node_spec("nosuch.x")
