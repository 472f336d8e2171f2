"""What differs between two frozen graphs (Graph JSON, as a run's spec.json holds it).

Nodes are matched by id and edges by their two ports (``source → target``): a node or edge of
one graph only is added or removed; one in both is changed when a field differs, each
difference named by its path (``config.temperature``, ``env.fields.split``) with the value in
A and in B. Fields of the graph itself (env, step budget, metrics, scopes, name...) are
compared the same way. Lists are compared whole. Pure: JSON in, JSON out, in a stable order.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Final

__all__ = ["MAX_CHANGES", "graph_differences"]

MAX_CHANGES: Final = 500
"""Changes listed per kind at most (``omitted`` counts the rest): bounds an answer's size."""
_OWN_KEYS: Final = ("nodes", "edges")


def graph_differences(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, Any]:
    """Nodes (id and type) and edges (``source → target``) added (in B only) and removed
    (in A only), fields changed on nodes, edges and the graph (``{field, a, b}``), and
    ``same`` when nothing differs."""
    nodes_a, nodes_b = _by_id(a.get("nodes")), _by_id(b.get("nodes"))
    edges_a, edges_b = _by_ports(a.get("edges")), _by_ports(b.get("edges"))
    nodes_changed = [
        {"node": node_id, "field": field, "a": old, "b": new}
        for node_id in sorted(set(nodes_a) & set(nodes_b))
        for field, old, new in _changes(nodes_a[node_id], nodes_b[node_id])
    ]
    edges_changed = [
        {"edge": edge, "field": field, "a": old, "b": new}
        for edge in sorted(set(edges_a) & set(edges_b))
        for field, old, new in _changes(edges_a[edge], edges_b[edge], skip=("source", "target"))
    ]
    graph_changed = [
        {"field": field, "a": old, "b": new} for field, old, new in _changes(a, b, _OWN_KEYS)
    ]
    found: dict[str, list[Any]] = {
        "nodes_added": _nodes(nodes_b, set(nodes_b) - set(nodes_a)),
        "nodes_removed": _nodes(nodes_a, set(nodes_a) - set(nodes_b)),
        "nodes_changed": nodes_changed,
        "edges_added": sorted(set(edges_b) - set(edges_a)),
        "edges_removed": sorted(set(edges_a) - set(edges_b)),
        "edges_changed": edges_changed,
        "graph_changed": graph_changed,
    }
    omitted = sum(max(0, len(items) - MAX_CHANGES) for items in found.values())
    result: dict[str, Any] = {key: items[:MAX_CHANGES] for key, items in found.items()}
    result["same"] = not any(found.values())
    result["omitted"] = omitted
    return result


def _by_id(nodes: Any) -> dict[str, Mapping[str, Any]]:
    if not isinstance(nodes, list):
        return {}
    return {str(n.get("id")): n for n in nodes if isinstance(n, Mapping)}


def _nodes(nodes: Mapping[str, Mapping[str, Any]], ids: set[str]) -> list[dict[str, Any]]:
    return [{"node": node_id, "type": nodes[node_id].get("type")} for node_id in sorted(ids)]


def _by_ports(edges: Any) -> dict[str, Mapping[str, Any]]:
    if not isinstance(edges, list):
        return {}
    return {f"{e.get('source')} → {e.get('target')}": e for e in edges if isinstance(e, Mapping)}


def _changes(
    a: Mapping[str, Any], b: Mapping[str, Any], skip: tuple[str, ...] = (), prefix: str = ""
) -> Iterator[tuple[str, Any, Any]]:
    """``(path, value in a, value in b)`` for each field that differs (None where absent)."""
    for key in sorted((set(a) | set(b)) - set(skip), key=str):
        old, new = a.get(key), b.get(key)
        path = f"{prefix}{key}"
        if isinstance(old, Mapping) and isinstance(new, Mapping):
            yield from _changes(old, new, prefix=f"{path}.")
        elif old != new:
            yield path, old, new
