"""Review fixes that need no server: stalled WebSocket clients, asset names, node errors.

- ``ProcessServices.broadcast`` drops a client whose outbox is full; it never raises into the
  scheduler or a runner that called it.
- ``save_frame`` checks the node id that becomes part of an asset's file name.
- After a node error the executor still finishes that iteration: an independent branch's
  ``core.graphOut`` snapshots in it. The node set ``branch`` (a real workspace node set) makes
  the order certain: ``late`` waits until ``bad`` has failed.
"""

from __future__ import annotations

import asyncio
import json
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from agentcanvas.api.app import build_services
from agentcanvas.errors import UnsafeNameError
from agentcanvas.graph.executor import GraphExecutor
from agentcanvas.graph.model import parse_graph
from agentcanvas.nodes.assets import save_frame
from agentcanvas.nodes.base import CallContext
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


class StalledSocket:
    """A WebSocket client as broadcast sees it: only its outbox (full when it stops reading)."""

    def __init__(self, maxsize: int) -> None:
        self.outbox: asyncio.Queue[str] = asyncio.Queue(maxsize=maxsize)


# -- broadcast --------------------------------------------------------------------------------
def test_broadcast_drops_a_client_whose_outbox_is_full(tmp_path: Path) -> None:
    svc = build_services(tmp_path, "http://127.0.0.1:8765", None)
    stalled, reading = StalledSocket(maxsize=1), StalledSocket(maxsize=10)
    stalled.outbox.put_nowait("an event it never read")
    svc.ws_connections.update({stalled, reading})

    svc.broadcast({"type": "eval_progress", "run_id": "r1"})  # must not raise QueueFull
    svc.relay_progress("r1", {"status": "running"})  # nor a later broadcast
    svc.progress.finish("r1", "completed")

    assert svc.ws_connections == {reading}
    assert stalled.outbox.qsize() == 1  # nothing more was pushed into it
    received = [json.loads(reading.outbox.get_nowait()) for _ in range(reading.outbox.qsize())]
    assert [e["type"] for e in received] == ["eval_progress", "eval_progress", "eval_complete"]


# -- asset names ------------------------------------------------------------------------------
@pytest.mark.parametrize("node_id", ["../evil", "x/../../evil", "..", "a/b"])
def test_save_frame_refuses_a_node_id_that_is_a_path(tmp_path: Path, node_id: str) -> None:
    assets = tmp_path / "run" / "episodes" / "ep0000" / "assets"
    (assets / "step0000_x").mkdir(parents=True)  # where "x/../../evil" would climb out from
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    ctx = CallContext(node_id=node_id, step=0, asset_dir=str(assets))

    with pytest.raises(UnsafeNameError, match="node_id"):
        save_frame(np.zeros((4, 4, 3), dtype=np.uint8), ctx)

    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before


def test_save_frame_writes_a_checked_name_inside_the_asset_dir(tmp_path: Path) -> None:
    ctx = CallContext(node_id="env", step=3, asset_dir=str(tmp_path / "assets"))
    name = save_frame(np.zeros((4, 4, 3), dtype=np.uint8), ctx)
    assert name == "step0003_env.png"
    assert [p.name for p in (tmp_path / "assets").iterdir()] == [name]


# -- the iteration finishes after a node error -----------------------------------------------
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
