"""Semantic checks of a graph against the node sets it names, done at load time.

Every problem is reported with the node id and type it concerns, and how to fix it, before
any process is spawned — never a silent no-op at run time (the design note's § 7 seam):
unknown node sets, types and ports, a port written twice, a same-iteration cycle, a bad
config or env field, a required input no edge feeds (its node would never fire), and an env
panel that cannot be given an episode (no ``task_id``, ``episode_index`` or ``seed`` field).
Which tasks an env accepts needs its panel running: :mod:`agentcanvas.eval.tasks`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

from agentcanvas.errors import GraphValidationError, UserInputError
from agentcanvas.graph.model import GRAPH_SCOPE_ID, Edge, Graph, Node
from agentcanvas.graph.ready import find_cycle
from agentcanvas.nodes.manifest import FieldSpec, NodeSetManifest, NodeTypeSpec

__all__ = [
    "EPISODE_FIELDS",
    "ConfigCheck",
    "ManifestLookup",
    "field_value_problem",
    "validate_graph",
]

ManifestLookup = Callable[[str], NodeSetManifest | None]
ConfigCheck = Callable[[Node], None]


def validate_graph(
    graph: Graph, manifests: ManifestLookup, check_config: ConfigCheck | None = None
) -> None:
    """Raise GraphValidationError listing every problem found; return None if runnable."""
    problems: list[str] = []
    specs = _node_specs(graph, manifests, problems)
    _check_scopes(graph, problems)
    for edge in graph.edges:
        _check_edge(edge, specs, problems)
    _check_single_writers(graph, problems)
    _check_required_inputs(graph, specs, problems)
    cycle = find_cycle(graph)
    if cycle:
        problems.append(
            "cycle without a next_iteration edge: "
            + " -> ".join(cycle)
            + ' (mark one edge of the cycle "next_iteration": true)'
        )
    if check_config is not None:
        for node in graph.nodes:
            if node.id in specs:
                try:
                    check_config(node)
                except UserInputError as exc:
                    problems.append(f"node '{node.id}' ({node.type}): {exc}")
    _check_env(graph, manifests, problems)
    if problems:
        raise GraphValidationError(
            f"graph '{graph.name}' is not runnable:\n" + "\n".join(f"  - {p}" for p in problems)
        )


def _node_specs(
    graph: Graph, manifests: ManifestLookup, problems: list[str]
) -> dict[str, NodeTypeSpec]:
    specs: dict[str, NodeTypeSpec] = {}
    seen: set[str] = set()
    for node in graph.nodes:
        if node.id in seen:
            problems.append(f"node id '{node.id}' is used twice")
        seen.add(node.id)
        manifest = manifests(node.nodeset)
        if manifest is None:
            problems.append(
                f"node '{node.id}' has type '{node.type}': unknown node set '{node.nodeset}' "
                "(see `agentcanvas nodesets`)"
            )
            continue
        spec = manifest.node_type(node.node_name)
        if spec is None:
            known = ", ".join(n.name for n in manifest.nodes)
            problems.append(
                f"node '{node.id}' has type '{node.type}': node set '{node.nodeset}' has no "
                f"node '{node.node_name}' (it has: {known})"
            )
            continue
        specs[node.id] = spec
    return specs


def _check_scopes(graph: Graph, problems: list[str]) -> None:
    scope_ids = {GRAPH_SCOPE_ID} | {s.id for s in graph.scopes}
    seen: set[str] = set()
    for scope in graph.scopes:
        if scope.id == GRAPH_SCOPE_ID:
            problems.append(f"scope id '{GRAPH_SCOPE_ID}' is reserved for the top level")
        elif scope.id in seen:
            problems.append(f"scope id '{scope.id}' is used twice")
        seen.add(scope.id)
        if scope.parent not in scope_ids:
            problems.append(f"scope '{scope.id}' has unknown parent '{scope.parent}'")
    parents = {s.id: s.parent for s in graph.scopes}
    for scope in graph.scopes:
        chain, current = [scope.id], scope.parent
        while current in parents and current not in chain:
            chain.append(current)
            current = parents[current]
        if current in chain:
            problems.append("scope parents form a cycle: " + " -> ".join([*chain, current]))
            break
    for node in graph.nodes:
        if node.scope not in scope_ids:
            problems.append(f"node '{node.id}' ({node.type}) is in unknown scope '{node.scope}'")


def _check_edge(edge: Edge, specs: dict[str, NodeTypeSpec], problems: list[str]) -> None:
    src, dst = edge.source, edge.target
    known = set(specs)
    for end, role in ((src, "source"), (dst, "target")):
        if end.node not in known and not any(p.startswith(f"node '{end.node}'") for p in problems):
            problems.append(f"edge {src} -> {dst}: {role} node '{end.node}' does not exist")
    if src.node in specs and specs[src.node].output(src.port) is None:
        outs = ", ".join(p.name for p in specs[src.node].outputs) or "none"
        problems.append(
            f"edge {src} -> {dst}: node '{src.node}' has no output port '{src.port}' "
            f"(outputs: {outs})"
        )
    if dst.node in specs:
        spec = specs[dst.node]
        if not spec.dynamic_inputs and spec.input(dst.port) is None:
            ins = ", ".join(p.name for p in spec.inputs) or "none"
            problems.append(
                f"edge {src} -> {dst}: node '{dst.node}' has no input port '{dst.port}' "
                f"(inputs: {ins})"
            )


def _check_single_writers(graph: Graph, problems: list[str]) -> None:
    writers: dict[str, int] = {}
    for edge in graph.edges:
        key = str(edge.target)
        writers[key] = writers.get(key, 0) + 1
    for port, count in writers.items():
        if count > 1:
            problems.append(f"input port {port} has {count} incoming edges (at most one)")


def _check_required_inputs(
    graph: Graph, specs: dict[str, NodeTypeSpec], problems: list[str]
) -> None:
    """A node skips a firing whose required input is absent: with no edge into that port,
    it never fires at all."""
    fed = {(edge.target.node, edge.target.port) for edge in graph.edges}
    for node in graph.nodes:
        spec = specs.get(node.id)
        if spec is None or spec.dynamic_inputs:
            continue
        for port in spec.inputs:
            if port.required and (node.id, port.name) not in fed:
                problems.append(
                    f"node '{node.id}' ({node.type}): required input '{port.name}' has no "
                    f"edge, so the node would never fire (connect an output to "
                    f"{node.id}.{port.name}, or remove the node)"
                )


EPISODE_FIELDS = ("task_id", "episode_index", "seed")
"""The panel fields every episode sets (``eval.episode.set_episode``)."""


def _check_env(graph: Graph, manifests: ManifestLookup, problems: list[str]) -> None:
    if graph.env is None:
        return
    manifest = manifests(graph.env.nodeset)
    if manifest is None or manifest.panel is None:
        problems.append(f"env.nodeset '{graph.env.nodeset}' is not an environment node set")
        return
    missing = [name for name in EPISODE_FIELDS if manifest.panel.field(name) is None]
    if missing:
        problems.append(
            f"env.nodeset '{graph.env.nodeset}': its panel has no {', '.join(missing)} "
            f"field{'s' if len(missing) > 1 else ''}, which every episode sets, so no "
            "episode could start (add them to the node set's PanelSpec, e.g. "
            f'FieldSpec(name="{missing[0]}", ...))'
        )
    for name, value in graph.env.fields.items():
        spec = manifest.panel.field(name)
        if spec is None:
            fields = ", ".join(f.name for f in manifest.panel.fields)
            problems.append(f"env.fields: '{name}' is not a panel field (fields: {fields})")
            continue
        problem = field_value_problem(spec, value)
        if problem is not None:
            problems.append(f"env.fields: '{name}' {problem}")


def field_value_problem(spec: FieldSpec, value: Any) -> str | None:
    """Why ``value`` does not fit a panel field of ``spec.kind``; None when it does.

    ``int``: a whole number; ``float``: a finite number; ``bool``: true/false; ``str``: a
    string; ``choice``: one of the declared choices (a cascading field, whose choices depend
    on another field, takes a string or a number and is checked by the panel).
    """
    got = f"got {json.dumps(value, default=str)} (a {_json_type(value)})"
    if spec.kind == "int" and (isinstance(value, bool) or not isinstance(value, int)):
        return f"is an int field; {got}"
    if spec.kind == "float" and (
        isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value)
    ):
        return f"is a float field (a finite number); {got}"
    if spec.kind == "bool" and not isinstance(value, bool):
        return f"is a bool field (true or false); {got}"
    if spec.kind == "str" and not isinstance(value, str):
        return f"is a str field; {got}"
    if spec.kind == "choice":
        if spec.choices is not None and value not in spec.choices:
            return f"is a choice field: {json.dumps(value)} is not one of {spec.choices}"
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            return f"is a choice field (a string or a number); {got}"
    return None


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "list" if isinstance(value, list) else "object"
