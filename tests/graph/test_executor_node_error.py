"""After a node error the executor still finishes that iteration: an independent branch's
``core.graphOut`` snapshots in it. The node set ``branch`` (a real workspace node set) makes
the order certain: ``late`` waits until ``bad`` has failed.
"""

from __future__ import annotations

import asyncio
import textwrap
from pathlib import Path
from typing import Any

import pytest

from agentcanvas.graph.executor import GraphExecutor
from agentcanvas.graph.model import parse_graph
from agentcanvas.server.registry import WorkspaceComponentRegistry
from support.registry import scanned
from support.workspace import write_nodeset

RUN_DEADLINE_S = 20.0  # a broken executor fails the test instead of hanging it

BRANCH = textwrap.dedent(
    '''
    """branch: one node fails; an independent one answers only after that failure."""

    import asyncio

    from agentcanvas.nodes.base import NodeSet
    from agentcanvas.nodes.manifest import PortSpec


    class State:
        def __init__(self):
            self.failed = asyncio.Event()


    NODESET = NodeSet(name="branch", parallelism="local", state_factory=State)


    @NODESET.node("bad", outputs=[PortSpec(name="y")])
    async def bad(inputs, config, state, ctx):
        state.failed.set()
        return {"error": "bad failed on purpose"}


    @NODESET.node("late", outputs=[PortSpec(name="value", type="int")])
    async def late(inputs, config, state, ctx):
        await asyncio.wait_for(state.failed.wait(), 10.0)
        return {"value": 7}
    '''
)


@pytest.fixture
def registry(tmp_path: Path) -> WorkspaceComponentRegistry:
    write_nodeset(tmp_path / "workspace", "branch", BRANCH)
    return scanned(tmp_path / "workspace")


class ListLog:
    """A FiringLog that keeps the records in memory."""

    def __init__(self) -> None:
        self.entries: list[dict[str, Any]] = []

    def record(self, entry: dict[str, Any]) -> None:
        self.entries.append(entry)


async def test_an_independent_branch_still_reports_in_the_errored_iteration(
    registry: WorkspaceComponentRegistry,
) -> None:
    graph = parse_graph(
        {
            "version": 1,
            "name": "branches",
            "step_budget": 5,
            "nodes": [
                {"id": "bad", "type": "branch.bad"},
                {"id": "late", "type": "branch.late"},
                {"id": "out", "type": "core.graphOut"},
            ],
            "edges": [{"source": "late.value", "target": "out.value"}],
        }
    )
    registry.validate(graph)
    log = ListLog()
    result = await asyncio.wait_for(GraphExecutor(graph, registry, log=log).run(), RUN_DEADLINE_S)

    assert result.status == "error"
    assert result.node_errors == {"bad": "branch.bad: bad failed on purpose"}
    assert result.steps == 1  # the run still stops after the iteration of the error
    assert result.metrics == {"value": 7}  # graphOut fired after the error, in that iteration
    assert [(e["node"], e["status"]) for e in log.entries] == [
        ("bad", "error"),
        ("late", "ok"),
        ("out", "ok"),
    ]
