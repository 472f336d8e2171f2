"""`auto_host.serve` owns its two tasks (HTTP and the call socket): cancelled, it ends both,
closes the node set, removes its record and re-raises the cancellation.

The server runs in this test's event loop (a ``loaded`` node set, as a forked server gets
it), so the test sees what `serve` leaves behind when it returns.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from agentcanvas.fileio import read_json
from agentcanvas.nodes import NodeSet, PortSpec
from agentcanvas.server import auto_host, rpc_framing

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(60)]


class _State:
    def __init__(self) -> None:
        self.closed = False

    def close(self) -> None:
        self.closed = True


def _nodeset(states: list[_State]) -> NodeSet:
    def make() -> _State:
        states.append(_State())
        return states[-1]

    nodeset = NodeSet(name="tserve", parallelism="replicated", state_factory=make)

    @nodeset.node("echo", inputs=[PortSpec(name="x")], outputs=[PortSpec(name="x")])
    def echo(inputs: dict[str, object], config: object, state: object, ctx: object) -> object:
        return {"x": inputs["x"]}

    return nodeset


async def test_a_cancelled_server_ends_its_tasks_closes_its_node_set_and_reraises(
    tmp_path: Path,
) -> None:
    states: list[_State] = []
    record = auto_host.record_path(tmp_path, "tserve", 3)
    task = asyncio.create_task(
        auto_host.serve("tserve", 3, record_dir=tmp_path, loaded=_nodeset(states))
    )
    async with asyncio.timeout(20.0):  # until the server has recorded itself
        while not record.exists():
            await asyncio.sleep(0.02)
    url = str(read_json(record)["url"])
    async with httpx.AsyncClient(base_url=url, trust_env=False) as http:
        health = (await http.get("/health", timeout=5.0)).json()
        assert (health["nodeset"], health["tag"]) == ("tserve", 3)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        with pytest.raises(httpx.ConnectError):  # the HTTP task ended with it
            await http.get("/health", timeout=5.0)
    with pytest.raises(OSError):  # so did the call socket's
        rpc_framing.blocking_connection(health["call"], 5.0).close()
    assert [s.closed for s in states] == [True] and not record.exists()
