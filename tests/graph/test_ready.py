"""The pure ready set: dependency order within an iteration, and cycle detection."""

from __future__ import annotations

from typing import Any

import pytest

from agentcanvas.errors import StateError
from agentcanvas.graph.model import Graph, parse_graph
from agentcanvas.graph.ready import ReadySet, find_cycle, same_iteration_deps


def _graph(edges: list[dict[str, Any]], node_ids: str = "a b c d") -> Graph:
    nodes = [{"id": n, "type": "core.arith"} for n in node_ids.split()]
    return parse_graph({"version": 1, "name": "g", "nodes": nodes, "edges": edges})


def _edge(source: str, target: str, *, loop: bool = False) -> dict[str, Any]:
    return {"source": f"{source}.out", "target": f"{target}.a", "next_iteration": loop}


DIAMOND = [_edge("a", "b"), _edge("a", "c"), _edge("b", "d"), {"source": "c.out", "target": "d.b"}]


def test_deps_follow_same_iteration_edges_only() -> None:
    graph = _graph([_edge("a", "b"), _edge("c", "a", loop=True)])
    assert same_iteration_deps(graph) == {"a": set(), "b": {"a"}, "c": set(), "d": set()}


def test_diamond_releases_nodes_as_their_dependencies_finish() -> None:
    ready = ReadySet(same_iteration_deps(_graph(DIAMOND)))
    ready.start_iteration()
    assert ready.take_ready() == ["a"]
    assert ready.take_ready() == []  # each ready node is handed out once
    ready.finish("a")
    assert ready.take_ready() == ["b", "c"]  # independent: released together, sorted
    ready.finish("c")
    assert ready.take_ready() == []  # d still waits for b
    assert not ready.complete
    ready.finish("b")
    assert ready.take_ready() == ["d"]
    ready.finish("d")
    assert ready.complete


def test_independent_nodes_are_all_ready_at_once_in_id_order() -> None:
    ready = ReadySet(same_iteration_deps(_graph([], node_ids="z m a")))
    ready.start_iteration()
    assert ready.take_ready() == ["a", "m", "z"]


def test_start_iteration_resets_for_the_next_iteration() -> None:
    ready = ReadySet(same_iteration_deps(_graph([_edge("a", "b")], node_ids="a b")))
    for _ in range(2):
        ready.start_iteration()
        assert ready.take_ready() == ["a"]
        ready.finish_all(["a"])
        assert ready.take_ready() == ["b"]
        ready.finish("b")
        assert ready.complete


def test_finishing_a_node_twice_is_a_state_error() -> None:
    ready = ReadySet(same_iteration_deps(_graph([], node_ids="a")))
    ready.start_iteration()
    ready.finish("a")
    with pytest.raises(StateError, match="'a' finished twice"):
        ready.finish("a")


def test_find_cycle_reports_the_nodes_of_a_same_iteration_cycle() -> None:
    graph = _graph([_edge("a", "b"), _edge("b", "c"), _edge("c", "a")])
    assert find_cycle(graph) == ["a", "c", "b", "a"]


def test_self_loop_is_a_cycle() -> None:
    assert find_cycle(_graph([_edge("a", "a")], node_ids="a")) == ["a", "a"]


def test_a_next_iteration_edge_breaks_the_cycle() -> None:
    graph = _graph([_edge("a", "b"), _edge("b", "c"), _edge("c", "a", loop=True)])
    assert find_cycle(graph) is None
    assert find_cycle(_graph(DIAMOND)) is None
