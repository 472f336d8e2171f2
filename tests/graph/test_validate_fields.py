"""Panel field values are checked against their declared kind when a graph is validated."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agentcanvas.errors import GraphFormatError, GraphValidationError
from agentcanvas.graph.model import load_graph_file, parse_graph
from agentcanvas.graph.validate import field_value_problem, validate_graph
from agentcanvas.nodes.manifest import FieldSpec, NodeSetManifest, PanelSpec

PANEL = PanelSpec(
    fields=[
        FieldSpec(name="task_id", kind="choice", default="a", depends_on="split"),
        FieldSpec(name="level", kind="choice", default="easy", choices=["easy", "hard"]),
        FieldSpec(name="slip", kind="float", default=0.0),
        FieldSpec(name="size", kind="int", default=5),
        FieldSpec(name="render", kind="bool", default=False),
        FieldSpec(name="name", kind="str", default=""),
        FieldSpec(name="episode_index", kind="int", default=0),
        FieldSpec(name="seed", kind="int", default=0),
    ]
)
ENV = NodeSetManifest(name="fenv", parallelism="replicated", panel=PANEL)


def manifests(name: str) -> NodeSetManifest | None:
    return ENV if name == "fenv" else None


def env_graph(fields: dict[str, Any]) -> Any:
    return parse_graph(
        {
            "version": 1,
            "name": "g",
            "nodes": [],
            "edges": [],
            "env": {"nodeset": "fenv", "fields": fields, "tasks": ["a"]},
        }
    )


def test_fields_of_the_right_kinds_pass() -> None:
    validate_graph(
        env_graph(
            {"task_id": "a", "level": "hard", "slip": 0.25, "size": 7, "render": True, "name": "x"}
        ),
        manifests,
    )
    validate_graph(env_graph({"slip": 1}), manifests)  # an int is a fine float


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"slip": "lots"}, """'slip' is a float field (a finite number); got "lots" (a string)"""),
        ({"slip": True}, "'slip' is a float field (a finite number); got true (a boolean)"),
        ({"size": 1.5}, "'size' is an int field; got 1.5 (a number)"),
        ({"size": "5"}, """'size' is an int field; got "5" (a string)"""),
        ({"render": "yes"}, """'render' is a bool field (true or false); got "yes" (a string)"""),
        ({"name": 3}, "'name' is a str field; got 3 (a number)"),
        (
            {"level": "medium"},
            """'level' is a choice field: "medium" is not one of ['easy', 'hard']""",
        ),
        (
            {"task_id": ["a"]},
            """'task_id' is a choice field (a string or a number); got ["a"] (a list)""",
        ),
    ],
)
def test_a_wrong_kind_is_refused_naming_the_field(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(GraphValidationError) as caught:
        validate_graph(env_graph(fields), manifests)
    assert f"env.fields: {message}" in str(caught.value)


def test_every_wrong_field_is_listed_at_once() -> None:
    with pytest.raises(GraphValidationError) as caught:
        validate_graph(env_graph({"slip": "lots", "size": "big", "colour": 1}), manifests)
    text = str(caught.value)
    assert "'slip' is a float field" in text and "'size' is an int field" in text
    assert "'colour' is not a panel field" in text


def test_non_finite_floats_are_refused() -> None:
    spec = FieldSpec(name="slip", kind="float")
    assert field_value_problem(spec, float("nan")) is not None
    assert field_value_problem(spec, float("inf")) is not None
    assert field_value_problem(spec, 0.5) is None


def test_a_graph_file_must_be_strict_json(tmp_path: Path) -> None:
    path = tmp_path / "g.json"
    path.write_text(
        '{"version": 1, "name": "g", "nodes": [{"id": "c", "type": "core.constant",'
        ' "config": {"value": NaN}}], "edges": []}',
        encoding="utf-8",
    )
    with pytest.raises(GraphFormatError) as caught:
        load_graph_file(path)
    assert f"{path}: not valid JSON: NaN is not a JSON number" in str(caught.value)
