"""The ready set: which nodes may fire now, within one iteration. Pure, synchronous code.

Only ordinary (same-iteration) edges order nodes; ``next_iteration`` edges do not, they carry
values across the iteration boundary instead.
"""

from __future__ import annotations

from collections.abc import Iterable

from agentcanvas.errors import StateError
from agentcanvas.graph.model import Graph

__all__ = ["ReadySet", "find_cycle", "same_iteration_deps"]


def same_iteration_deps(graph: Graph) -> dict[str, set[str]]:
    """For each node id, the node ids it waits for within an iteration."""
    deps: dict[str, set[str]] = {node.id: set() for node in graph.nodes}
    for edge in graph.edges:
        if not edge.next_iteration and edge.target.node in deps and edge.source.node in deps:
            deps[edge.target.node].add(edge.source.node)
    return deps


def find_cycle(graph: Graph) -> list[str] | None:
    """A cycle along same-iteration edges as a list of node ids (first repeated), or None."""
    deps = same_iteration_deps(graph)
    colour: dict[str, int] = dict.fromkeys(deps, 0)  # 0 new, 1 on stack, 2 done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        colour[node] = 1
        stack.append(node)
        for dep in sorted(deps[node]):
            if colour[dep] == 1:
                return [*stack[stack.index(dep) :], dep]
            if colour[dep] == 0 and (found := visit(dep)):
                return found
        stack.pop()
        colour[node] = 2
        return None

    for node in sorted(deps):
        if colour[node] == 0 and (found := visit(node)):
            return found
    return None


class ReadySet:
    """Tracks one iteration: nodes become ready once every same-iteration dependency finished.

    ``take_ready`` hands out each ready node exactly once (sorted by id, so the launch order
    is deterministic); ``finish`` marks a node done, which may release its dependants.
    """

    def __init__(self, deps: dict[str, set[str]]) -> None:
        self._deps = {node: frozenset(d) for node, d in deps.items()}
        self._dependants: dict[str, set[str]] = {node: set() for node in deps}
        for node, node_deps in self._deps.items():
            for dep in node_deps:
                self._dependants[dep].add(node)
        self._waiting: dict[str, int] = {}
        self._ready: set[str] = set()
        self._done: set[str] = set()

    def start_iteration(self) -> None:
        self._waiting = {node: len(d) for node, d in self._deps.items()}
        self._ready = {node for node, n in self._waiting.items() if n == 0}
        self._done = set()

    def take_ready(self) -> list[str]:
        ready = sorted(self._ready)
        self._ready.clear()
        return ready

    def finish(self, node: str) -> None:
        if node in self._done:
            raise StateError(f"node {node!r} finished twice in one iteration")
        self._done.add(node)
        for dependant in self._dependants[node]:
            self._waiting[dependant] -= 1
            if self._waiting[dependant] == 0:
                self._ready.add(dependant)

    def finish_all(self, nodes: Iterable[str]) -> None:
        for node in nodes:
            self.finish(node)

    @property
    def complete(self) -> bool:
        return len(self._done) == len(self._deps)
