"""The graph format: nodes, edges between named ports, scopes, and a step budget.

A graph is a loop body. Each iteration is one environment step: every node fires at most
once, in dependency order along the graph's ordinary edges. An edge marked
``next_iteration`` carries a value from iteration *t* into iteration *t + 1* (its ``initial``
value, when given, is delivered at iteration 0), which is how env → model → env cycles are
written. The loop ends after an iteration in which a node signals done, or at the budget.

See ``docs/graph-format.md`` for the prose version with examples.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    WithJsonSchema,
    field_serializer,
    field_validator,
    model_validator,
)

from agentcanvas import jsontext
from agentcanvas.errors import GraphFormatError
from agentcanvas.nodes.manifest import MetricSpec

__all__ = [
    "DEFAULT_STEP_BUDGET",
    "GRAPH_FORMAT_VERSION",
    "GRAPH_SCOPE_ID",
    "IDENT_PATTERN",
    "PORT_REF_SCHEMA",
    "TYPE_PATTERN",
    "Edge",
    "EnvBinding",
    "Graph",
    "Node",
    "PortRef",
    "PortRefField",
    "Scope",
    "graph_json_schema",
    "load_graph_file",
    "parse_graph",
]

GRAPH_FORMAT_VERSION: Literal[1] = 1
GRAPH_SCOPE_ID = "graph"
DEFAULT_STEP_BUDGET = 64
IDENT_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"
TYPE_PATTERN = r"^[a-z][a-z0-9_]*\.[A-Za-z_][A-Za-z0-9_]*$"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PortRef(_Strict):
    """One end of an edge: ``node`` id and ``port`` name. Written ``"node.port"`` in JSON."""

    node: str = Field(pattern=IDENT_PATTERN)
    port: str = Field(pattern=IDENT_PATTERN)

    def __str__(self) -> str:
        return f"{self.node}.{self.port}"


def _parse_port_ref(value: Any) -> Any:
    if isinstance(value, str):
        node, sep, port = value.partition(".")
        if not sep:
            raise ValueError(f"expected 'node.port', got {value!r}")
        return {"node": node, "port": port}
    return value


PORT_REF_SCHEMA = {
    "type": "string",
    "pattern": r"^[A-Za-z_][A-Za-z0-9_]*\.[A-Za-z_][A-Za-z0-9_]*$",
    "description": "A port, written 'node.port'.",
}
PortRefField = Annotated[PortRef, WithJsonSchema(PORT_REF_SCHEMA)]


class Edge(_Strict):
    """A value flowing from an output port to an input port."""

    source: PortRefField = Field(description="Output port, written 'node.port'.")
    target: PortRefField = Field(description="Input port, written 'node.port'.")
    next_iteration: bool = Field(
        default=False,
        description="Deliver the value in the next iteration instead of this one (loop edge).",
    )
    initial: Any = Field(
        default=None,
        description="For a next_iteration edge: the value delivered at iteration 0 (null: none).",
    )

    _split_source = field_validator("source", mode="before")(_parse_port_ref)
    _split_target = field_validator("target", mode="before")(_parse_port_ref)

    @field_serializer("source", "target")
    def _as_string(self, ref: PortRef) -> str:
        return str(ref)

    @model_validator(mode="after")
    def _initial_needs_loop(self) -> Edge:
        if self.initial is not None and not self.next_iteration:
            raise ValueError("'initial' is only meaningful on a next_iteration edge")
        return self


class Scope(_Strict):
    """A named group of nodes (a canvas group). The top level is the graph scope."""

    id: str = Field(pattern=IDENT_PATTERN)
    label: str = ""
    parent: str = GRAPH_SCOPE_ID


class Node(_Strict):
    """One node: an id, a type ``nodeset.node`` and its config."""

    id: str = Field(pattern=IDENT_PATTERN, description="Unique id inside the graph.")
    type: str = Field(pattern=TYPE_PATTERN, description="Node type as 'nodeset.node'.")
    config: dict[str, Any] = Field(default_factory=dict)
    scope: str = Field(default=GRAPH_SCOPE_ID, description="Scope (group) the node belongs to.")

    @property
    def nodeset(self) -> str:
        return self.type.split(".", 1)[0]

    @property
    def node_name(self) -> str:
        return self.type.split(".", 1)[1]


class EnvBinding(_Strict):
    """Which node set is the environment, and the panel values an episode starts from."""

    nodeset: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    fields: dict[str, Any] = Field(
        default_factory=dict, description="Panel field values (e.g. dataset, split, task_id)."
    )
    tasks: list[str] = Field(
        default_factory=list, description="Default task ids for batch eval (panel 'task_id')."
    )


class Graph(_Strict):
    """A saved agent graph (format version 1)."""

    version: Literal[1] = GRAPH_FORMAT_VERSION
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
    description: str = ""
    step_budget: int | None = Field(
        default=None,
        description="Iterations per episode (null: the env's or the default).",
        json_schema_extra={"minimum": 1},
    )
    env: EnvBinding | None = None
    scopes: list[Scope] = Field(default_factory=list)
    nodes: list[Node]
    edges: list[Edge] = Field(default_factory=list)
    metrics: dict[str, MetricSpec] = Field(
        default_factory=dict,
        description="The kind of each metric (by name): binary, bounded (with lo and hi), "
        "count or continuous. Overrides the node sets' declarations; the interval follows it.",
    )

    @field_validator("step_budget")
    @classmethod
    def _budget_positive(cls, value: int | None) -> int | None:
        if value is not None and value < 1:
            raise ValueError(f"step_budget must be >= 1 (got {value}); use null for the default")
        return value

    def node(self, node_id: str) -> Node:
        for node in self.nodes:
            if node.id == node_id:
                return node
        raise KeyError(node_id)

    def nodesets(self) -> list[str]:
        """Node-set names used by this graph, in first-use order."""
        return list(dict.fromkeys(node.nodeset for node in self.nodes))

    def default_tasks(self) -> list[str]:
        """The graph's env tasks, else its panel's ``task_id``, else one unnamed task."""
        if self.env is None:
            return [""]
        return list(self.env.tasks) or [str(self.env.fields.get("task_id", ""))]

    def to_json(self) -> str:
        return jsontext.dumps(self.model_dump(mode="json", exclude_defaults=False), indent=2) + "\n"


def graph_json_schema() -> dict[str, Any]:
    """The JSON Schema of the graph format."""
    schema = Graph.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "AgentCanvas graph"
    return schema


def _describe(err: ValidationError, source: str) -> str:
    lines = [f"{source}: the graph does not match the format:"]
    for item in err.errors():
        where = ".".join(str(p) for p in item["loc"]) or "(top level)"
        lines.append(f"  - field '{where}': {item['msg']}")
    return "\n".join(lines)


def parse_graph(data: Any, source: str = "graph") -> Graph:
    """Validate already-decoded JSON as a Graph; errors name each bad field."""
    try:
        return Graph.model_validate(data)
    except ValidationError as exc:
        raise GraphFormatError(_describe(exc, source)) from exc


def _not_json(path: Path) -> Callable[[str], Any]:
    """``json.loads`` takes NaN and Infinity; a graph file must be strict JSON."""

    def refuse(name: str) -> Any:
        raise GraphFormatError(
            f"{path}: not valid JSON: {name} is not a JSON number (use a finite number or null)"
        )

    return refuse


def load_graph_file(path: Path) -> Graph:
    """Read and validate a graph JSON file."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise GraphFormatError(f"{path}: cannot read the graph file ({exc.strerror})") from exc
    try:
        data = json.loads(text, parse_constant=_not_json(path))
    except json.JSONDecodeError as exc:
        raise GraphFormatError(
            f"{path}: not valid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}"
        ) from exc
    return parse_graph(data, source=str(path))
