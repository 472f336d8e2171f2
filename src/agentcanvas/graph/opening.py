"""The opening firing: the call to the env every episode of a graph starts with, when it is
known before the episode starts (the batch eval sends it with the episode's panel request)."""

from __future__ import annotations

from typing import Any

from agentcanvas.graph.executor import NodeResolver
from agentcanvas.graph.model import Graph, Node
from agentcanvas.graph.ready import same_iteration_deps

__all__ = ["opening_firing"]


def opening_firing(
    graph: Graph, nodeset: str, resolver: NodeResolver
) -> tuple[Node, dict[str, Any]] | None:
    """The firing on ``nodeset`` that every episode of ``graph`` starts with, with its
    inputs, when it is known before the episode starts; else None.

    Known when exactly one node of ``nodeset`` waits for nothing within an iteration (so it
    is in the first wave of iteration 0, and any other node of ``nodeset`` fires after it),
    and its inputs there, the ``initial`` values of its next-iteration edges, hold every
    required input (else it is skipped, not fired) — e.g. an env's step node whose action
    comes from the previous iteration: its first firing is an observation. The batch eval
    sends that firing with the episode's panel request (one round trip for both); the
    executor still makes the call, and gets its answer (`RemoteNodeSet.call`)."""
    deps = same_iteration_deps(graph)
    first = [n for n in graph.nodes if n.nodeset == nodeset and not deps.get(n.id)]
    if len(first) != 1:
        return None
    node = first[0]
    inputs = {
        e.target.port: e.initial
        for e in graph.edges
        if e.target.node == node.id and e.next_iteration and e.initial is not None
    }
    spec = resolver.node_spec(node.type)
    if any(p.required and p.name not in inputs for p in spec.inputs):
        return None
    return node, inputs
