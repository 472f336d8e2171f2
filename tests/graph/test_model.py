"""The graph format: parsing, defaults, field-naming errors, file loading and the JSON Schema."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agentcanvas.errors import GraphFormatError, UserInputError
from agentcanvas.graph.model import (
    DEFAULT_STEP_BUDGET,
    GRAPH_SCOPE_ID,
    Graph,
    PortRef,
    graph_json_schema,
    load_graph_file,
    parse_graph,
)


def _graph(**overrides: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "version": 1,
        "name": "tiny",
        "nodes": [
            {"id": "one", "type": "core.constant", "config": {"value": 1}},
            {"id": "acc", "type": "core.arith", "scope": "body"},
            {"id": "out", "type": "core.graphOut"},
        ],
        "scopes": [{"id": "body", "label": "Loop body"}],
        "edges": [
            {"source": "one.value", "target": "acc.a"},
            {"source": "acc.out", "target": "acc.b", "next_iteration": True, "initial": 0},
            {"source": "acc.out", "target": "out.total"},
        ],
    }
    data.update(overrides)
    return data


def _format_error(data: Any) -> str:
    with pytest.raises(GraphFormatError) as info:
        parse_graph(data, source="test.json")
    assert isinstance(info.value, UserInputError)  # exit 1, never a traceback
    return str(info.value)


def test_parse_splits_port_refs_and_fills_defaults() -> None:
    graph = parse_graph(_graph())
    first, loop, _ = graph.edges
    assert first.source == PortRef(node="one", port="value")
    assert str(first.target) == "acc.a"
    assert (first.next_iteration, first.initial) == (False, None)
    assert (loop.next_iteration, loop.initial) == (True, 0)
    assert graph.step_budget is None and graph.env is None and graph.description == ""
    assert graph.node("one").scope == GRAPH_SCOPE_ID
    assert graph.node("acc").scope == "body"
    assert graph.scopes[0].parent == GRAPH_SCOPE_ID
    assert DEFAULT_STEP_BUDGET == 64


def test_node_type_splits_into_nodeset_and_node_name() -> None:
    graph = parse_graph(_graph())
    acc = graph.node("acc")
    assert (acc.nodeset, acc.node_name) == ("core", "arith")
    assert graph.nodesets() == ["core"]
    with pytest.raises(KeyError):
        graph.node("missing")


def test_object_form_port_refs_are_accepted_too() -> None:
    data = _graph(edges=[{"source": {"node": "one", "port": "value"}, "target": "acc.a"}])
    assert str(parse_graph(data).edges[0].source) == "one.value"


def test_to_json_round_trips() -> None:
    graph = parse_graph(_graph(step_budget=7, description="d"))
    again = parse_graph(json.loads(graph.to_json()))
    assert again == graph
    assert graph.to_json().endswith("\n")


def test_env_binding_parses_fields_and_tasks() -> None:
    env = {"nodeset": "env_minigrid", "fields": {"dataset": "babyai"}, "tasks": ["a", "b"]}
    graph = parse_graph(_graph(env=env))
    assert graph.env is not None
    assert graph.env.nodeset == "env_minigrid"
    assert graph.env.fields == {"dataset": "babyai"}
    assert graph.env.tasks == ["a", "b"]


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        ({"nodes": [{"id": "my node", "type": "core.constant"}]}, "nodes.0.id", "pattern"),
        ({"nodes": [{"id": "n", "type": "constant"}]}, "nodes.0.type", "pattern"),
        ({"nodes": [{"id": "n", "type": "core.constant", "colour": 1}]}, "nodes.0.colour", ""),
        ({"step_budget": 0}, "step_budget", "step_budget must be >= 1"),
        ({"step_budget": -5}, "step_budget", "step_budget must be >= 1"),
        ({"version": 2}, "version", ""),
        ({"name": "has space"}, "name", "pattern"),
        ({"edges": [{"source": "onevalue", "target": "acc.a"}]}, "edges.0.source", "node.port"),
        (
            {"edges": [{"source": "one.value", "target": "acc.a", "initial": 3}]},
            "edges.0",
            "next_iteration",
        ),
        ({"edges": [{"source": "one.value"}]}, "edges.0.target", "required"),
        ({"env": {"fields": {}}}, "env.nodeset", "required"),
    ],
)
def test_schema_violations_name_the_field(change: dict[str, Any], field: str, words: str) -> None:
    message = _format_error(_graph(**change))
    assert message.startswith("test.json: the graph does not match the format")
    assert f"field '{field}'" in message
    assert words.lower() in message.lower()


def test_missing_nodes_is_named() -> None:
    message = _format_error({"version": 1, "name": "empty"})
    assert "field 'nodes'" in message and "required" in message.lower()


def test_every_problem_is_listed_at_once() -> None:
    data = _graph(step_budget=0, nodes=[{"id": "a b", "type": "core.constant"}])
    message = _format_error(data)
    assert "field 'step_budget'" in message and "field 'nodes.0.id'" in message


def test_top_level_that_is_not_an_object_is_refused() -> None:
    assert "(top level)" in _format_error([1, 2, 3])


def test_load_graph_file_reports_malformed_json_with_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "broken.json"
    path.write_text('{\n  "version": 1,\n  "name": \n}\n', encoding="utf-8")
    with pytest.raises(GraphFormatError) as info:
        load_graph_file(path)
    message = str(info.value)
    assert str(path) in message and "not valid JSON at line 4, column 1" in message


def test_load_graph_file_reports_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(GraphFormatError, match="cannot read the graph file"):
        load_graph_file(tmp_path / "absent.json")


def test_load_graph_file_names_the_file_in_schema_errors(tmp_path: Path) -> None:
    path = tmp_path / "g.json"
    path.write_text(json.dumps(_graph(step_budget=0)), encoding="utf-8")
    with pytest.raises(GraphFormatError) as info:
        load_graph_file(path)
    assert str(info.value).startswith(f"{path}: the graph does not match the format")


def test_load_graph_file_reads_a_valid_file(tmp_path: Path) -> None:
    path = tmp_path / "g.json"
    path.write_text(json.dumps(_graph(step_budget=3)), encoding="utf-8")
    assert load_graph_file(path).step_budget == 3


def test_json_schema_describes_the_format() -> None:
    schema = graph_json_schema()
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["title"] == "AgentCanvas graph"
    assert set(schema["required"]) == {"name", "nodes"}
    assert {"version", "nodes", "edges", "scopes", "step_budget", "env"} <= set(
        schema["properties"]
    )
    assert schema["additionalProperties"] is False
    edge = schema["$defs"]["Edge"]["properties"]
    assert {"source", "target", "next_iteration", "initial"} <= set(edge)
    json.dumps(schema)  # serialisable as printed by `agentcanvas schema`


def test_graph_model_is_frozen() -> None:
    graph = parse_graph(_graph())
    with pytest.raises(Exception, match="frozen"):
        graph.name = "other"  # type: ignore[misc]
    assert isinstance(graph, Graph)
