"""NodeSetCatalogue: discovery, overlays, load errors, and load-time validation of graphs.

The user node set here is the worked example of ``docs/nodesets.md``, extracted from the page
itself (support.doc_example). How the registry runs that example through its handles is
tests/server/test_catalogue.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agentcanvas.catalogue import ACTIVE_WORKSPACE_ENV, NodeSetCatalogue
from agentcanvas.errors import (
    GraphValidationError,
    NodeSetError,
    UnknownGraphError,
    UnknownNodeSetError,
    UnsafeNameError,
    UserInputError,
)
from agentcanvas.graph.model import Graph, parse_graph
from support.doc_example import doc_example_files, write_doc_example
from support.workspace import write_files

BUILTINS = {"core", "env_minigrid", "env_gym", "planner"}


def _catalogue(workspace: Path, active: Path | None = None) -> NodeSetCatalogue:
    catalogue = NodeSetCatalogue(workspace=workspace, active_workspace=active)
    catalogue.scan_all()
    return catalogue


@pytest.fixture
def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv(ACTIVE_WORKSPACE_ENV, raising=False)
    return write_doc_example(tmp_path / "workspace")


def _graph(nodes: list[dict[str, Any]], edges: list[dict[str, Any]], **extra: Any) -> Graph:
    return parse_graph({"version": 1, "name": "g", "nodes": nodes, "edges": edges, **extra})


def _problems(catalogue: NodeSetCatalogue, graph: Graph) -> str:
    with pytest.raises(GraphValidationError) as info:
        catalogue.validate(graph)
    assert isinstance(info.value, UserInputError)
    message = str(info.value)
    assert message.startswith(f"graph '{graph.name}' is not runnable:")
    return message


# -- discovery ---------------------------------------------------------------------------


def test_scan_all_finds_builtins_and_the_workspace_node_set(workspace: Path) -> None:
    catalogue = _catalogue(workspace)
    assert catalogue.load_errors == {}
    assert set(catalogue.nodeset_names()) >= BUILTINS | {"line_world"}
    assert {catalogue.origin(n) for n in BUILTINS} == {"builtin"}
    assert catalogue.origin("line_world") == "workspace"
    graphs = {g.name: g.origin for g in catalogue.graph_entries()}
    assert graphs["babyai_oracle"] == "builtin" and graphs["line_walk"] == "workspace"


def test_the_doc_example_manifest(workspace: Path) -> None:
    manifest = _catalogue(workspace).manifest("line_world")
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


def test_node_config_is_validated_with_defaults(workspace: Path) -> None:
    nodeset = _catalogue(workspace).nodeset("line_world")
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
    catalogue = _catalogue(workspace, active=overlay)
    entry = {g.name: g for g in catalogue.graph_entries()}["line_walk"]
    assert (entry.origin, entry.path) == ("active", overlay / "graphs" / "line_walk.json")
    assert catalogue.load_graph("line_walk").description == "from the overlay"
    assert _catalogue(workspace).load_graph("line_walk").description != "from the overlay"


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
    catalogue = _catalogue(workspace)
    assert catalogue.origin("line_world") == "active"
    assert catalogue.manifest("line_world").version == "9.9.9"


def test_a_workspace_node_set_replaces_a_builtin_of_the_same_name(workspace: Path) -> None:
    write_files(
        workspace,
        {
            "graph_nodes/planner/__init__.py": "from agentcanvas.nodes.base import NodeSet\n"
            "NODESET = NodeSet(name='planner', version='7.0.0')\n"
        },
    )
    catalogue = _catalogue(workspace)
    assert catalogue.origin("planner") == "workspace"
    assert catalogue.manifest("planner").version == "7.0.0"


def test_a_node_set_known_from_a_borrowed_server_wins_over_a_rescan(workspace: Path) -> None:
    local = _catalogue(workspace).manifest("line_world")
    catalogue = NodeSetCatalogue(workspace=workspace)
    catalogue.add_remote(local.model_copy(update={"version": "2.0.0"}))
    catalogue.scan_all()  # the workspace declares line_world too: the borrowed one stays
    assert catalogue.manifest("line_world").version == "2.0.0"
    assert catalogue.origin("line_world") == "remote"
    with pytest.raises(NodeSetError, match="only known remotely"):
        catalogue.nodeset("line_world")


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
    catalogue = _catalogue(write_files(workspace, BROKEN))
    errors = catalogue.load_errors
    assert set(errors) == {"raises", "syntax", "empty", "misnamed"}
    assert "failed to import: RuntimeError: boom at import" in errors["raises"]
    assert "failed to import: SyntaxError" in errors["syntax"]
    assert "no NODESET = NodeSet(...)" in errors["empty"]
    assert "declares NodeSet name 'other'" in errors["misnamed"]
    assert "line_world" in catalogue.nodeset_names()  # the others still load
    with pytest.raises(UnknownNodeSetError, match="boom at import"):
        catalogue.manifest("raises")


def test_a_graph_using_a_broken_node_set_is_refused_naming_the_node(workspace: Path) -> None:
    catalogue = _catalogue(write_files(workspace, BROKEN))
    graph = _graph([{"id": "b1", "type": "raises.thing"}], [])
    assert "node 'b1' has type 'raises.thing': unknown node set 'raises'" in _problems(
        catalogue, graph
    )


# -- graph loading and validation --------------------------------------------------------


def test_unknown_graph_lists_the_known_ones(workspace: Path) -> None:
    catalogue = _catalogue(workspace)
    with pytest.raises(UnknownGraphError) as info:
        catalogue.load_graph("nope")
    assert str(info.value).startswith("unknown graph 'nope' (known graphs: ")
    assert "babyai_oracle" in str(info.value) and "line_walk" in str(info.value)


@pytest.mark.parametrize("name", ["../etc/passwd", "a b", ""])
def test_unsafe_graph_names_are_refused(workspace: Path, name: str) -> None:
    with pytest.raises(UnsafeNameError, match="graph_name"):
        _catalogue(workspace).load_graph(name)


def test_a_malformed_workspace_graph_is_refused_on_load(workspace: Path) -> None:
    write_files(workspace, {"graphs/torn.json": '{"version": 1, "name": '})
    with pytest.raises(UserInputError, match=r"torn\.json: not valid JSON at line 1"):
        _catalogue(workspace).load_graph("torn")


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
    assert expected in _problems(_catalogue(workspace), _graph(nodes, edges))


def test_same_iteration_cycle_names_the_nodes_and_suggests_next_iteration(
    workspace: Path,
) -> None:
    nodes = [{"id": "p", "type": "core.arith"}, {"id": "q", "type": "core.arith"}, CONST]
    edges = [{"source": "p.out", "target": "q.a"}, {"source": "q.out", "target": "p.a"}]
    edges += [{"source": f"{CONST['id']}.value", "target": f"{n}.b"} for n in "pq"]
    catalogue = _catalogue(workspace)
    message = _problems(catalogue, _graph(nodes, edges))
    assert "cycle without a next_iteration edge: p -> q -> p" in message
    assert '"next_iteration": true' in message
    edges[1]["next_iteration"] = True
    catalogue.validate(_graph(nodes, edges))  # the same loop, marked, is fine


def test_scope_with_an_unknown_parent(workspace: Path) -> None:
    graph = _graph([CONST], [], scopes=[{"id": "s", "parent": "missing"}])
    assert "scope 's' has unknown parent 'missing'" in _problems(_catalogue(workspace), graph)


def test_env_binding_is_checked_against_the_panel(workspace: Path) -> None:
    catalogue = _catalogue(workspace)
    not_env = _graph([CONST], [], env={"nodeset": "core"})
    assert "env.nodeset 'core' is not an environment node set" in _problems(catalogue, not_env)
    bad_field = _graph([CONST], [], env={"nodeset": "line_world", "fields": {"colour": 1}})
    assert "env.fields: 'colour' is not a panel field (fields: track, task_id" in _problems(
        catalogue, bad_field
    )


def test_every_problem_is_reported_at_once(workspace: Path) -> None:
    graph = _graph([{"id": "x", "type": "nosuch.node"}, {"id": "y", "type": "core.nope"}], [])
    message = _problems(_catalogue(workspace), graph)
    assert "node 'x'" in message and "node 'y'" in message


def test_node_spec_of_an_unknown_type(workspace: Path) -> None:
    catalogue = _catalogue(workspace)
    assert catalogue.node_spec("core.counter").name == "counter"
    with pytest.raises(UserInputError, match=r"'core\.nope'"):
        catalogue.node_spec("core.nope")
    with pytest.raises(UnknownNodeSetError, match="nosuch"):
        catalogue.node_spec("nosuch.x")


# -- one node set, alone (a node-set server's own) ---------------------------------------

LOAD_ONE = """
import json, sys
from agentcanvas.catalogue import NodeSetCatalogue
catalogue = NodeSetCatalogue()
nodeset = catalogue.load_one(sys.argv[1])
prefixes = ("agentcanvas.nodesets.", "agentcanvas_user_nodes_")
print(json.dumps({
    "version": nodeset.version,
    "origin": catalogue.origin(sys.argv[1]),
    "inline": catalogue.trusted_inline(sys.argv[1]),
    "modules": sorted(m for m in sys.modules if m.startswith(prefixes)),
}))
"""


def _load_one(workspace: Path, name: str, active: Path | None = None) -> dict[str, Any]:
    """``load_one(name)`` in a fresh interpreter: what it loaded and what it imported."""
    env = {**os.environ, "AGENTCANVAS_HOME": str(workspace)}
    env.pop(ACTIVE_WORKSPACE_ENV, None)
    if active is not None:
        env[ACTIVE_WORKSPACE_ENV] = str(active)
    done = subprocess.run(
        [sys.executable, "-c", LOAD_ONE, name], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    loaded: dict[str, Any] = json.loads(done.stdout)
    return loaded


def test_load_one_imports_that_node_set_alone_with_the_precedence_of_scan_all(
    workspace: Path, tmp_path: Path
) -> None:
    write_files(workspace, {**BROKEN, **_planner("7.0.0")})
    builtin = _load_one(workspace, "core")
    assert builtin["modules"] == ["agentcanvas.nodesets.core"]
    assert (builtin["origin"], builtin["inline"]) == ("builtin", True)
    shadowing = _load_one(workspace, "planner")  # the workspace's replaces the built-in
    assert (shadowing["version"], shadowing["origin"], shadowing["inline"]) == (
        "7.0.0",
        "workspace",
        False,
    )
    assert shadowing["modules"] == ["agentcanvas_user_nodes_workspace.planner"]
    overlay = write_files(tmp_path / "overlay", _planner("8.0.0"))
    active = _load_one(workspace, "planner", active=overlay)  # the overlay's comes first
    assert (active["version"], active["origin"]) == ("8.0.0", "active")
    assert active["modules"] == ["agentcanvas_user_nodes_active.planner"]


def test_load_one_names_what_is_wrong_with_the_one_it_was_asked_for(workspace: Path) -> None:
    catalogue = NodeSetCatalogue(workspace=write_files(workspace, BROKEN))
    with pytest.raises(NodeSetError, match="failed to import: RuntimeError: boom at import"):
        catalogue.load_one("raises")
    with pytest.raises(UnknownNodeSetError, match=r"unknown node set 'nope' \(known: .*line_world"):
        catalogue.load_one("nope")
    assert catalogue.load_one("line_world").name == "line_world"  # the broken ones aside
    assert catalogue.nodeset_names() == ["line_world"]


def test_a_node_set_that_exits_at_import_is_a_load_error_not_the_end_of_the_scan(
    workspace: Path,
) -> None:
    exits = {"graph_nodes/exits/__init__.py": "raise SystemExit('exits at import')\n"}
    catalogue = _catalogue(write_files(workspace, exits))
    assert "failed to import: SystemExit: exits at import" in catalogue.load_errors["exits"]
    assert "line_world" in catalogue.nodeset_names()


def _planner(version: str) -> dict[str, str]:
    return {
        "graph_nodes/planner/__init__.py": "from agentcanvas.nodes.base import NodeSet\n"
        f"NODESET = NodeSet(name='planner', version='{version}')\n"
    }
