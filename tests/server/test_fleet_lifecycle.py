"""The fleet's lifecycle (`FleetState`), with real server processes: once ``stop_all`` has
begun nothing new starts, and a launch still in flight is ended at once (its child stopped,
not waited for until ready), its caller told why (FleetClosedError) — no server outlives the
fleet.

``tslowstart`` takes two seconds to import, so its launch is surely in flight when
``stop_all`` begins: the test sees its process before it can be ready.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import psutil
import pytest

from agentcanvas.errors import FleetClosedError, StateError
from agentcanvas.nodes.manifest import NodeSetManifest
from agentcanvas.server.fleet import FleetState, ServerFleet
from agentcanvas.server.launcher import LocalProcessLauncher
from support.workspace import write_nodeset

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(120)]

SLOW_START = """
import time
from agentcanvas.nodes import NodeSet

time.sleep(2.0)  # at import: the server is not ready before this ends
NODESET = NodeSet(name="tslowstart", parallelism="replicated", forkable=False)


@NODESET.node("noop")
def noop(inputs, config, state, ctx):
    return {}
"""
MANIFEST = NodeSetManifest(name="tslowstart", parallelism="replicated", forkable=False)


def _servers() -> list[psutil.Process]:
    """This process's server children of ``tslowstart`` that have not exited."""
    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            if "tslowstart" in child.cmdline() and child.status() != psutil.STATUS_ZOMBIE:
                found.append(child)
        except psutil.NoSuchProcess:
            continue
    return found


def _fleet(tmp_path: Path) -> ServerFleet:
    write_nodeset(tmp_path, "tslowstart", SLOW_START)
    launcher = LocalProcessLauncher(env={"AGENTCANVAS_HOME": str(tmp_path)})
    return ServerFleet(launcher, lambda name: MANIFEST)


async def test_a_launch_in_flight_when_stop_all_begins_is_stopped_and_its_caller_told(
    tmp_path: Path,
) -> None:
    fleet = _fleet(tmp_path)
    starting = asyncio.create_task(fleet.start("tslowstart", 0))
    async with asyncio.timeout(30.0):  # until its process runs (importing, not ready)
        while not _servers():
            await asyncio.sleep(0.01)
    assert not starting.done()
    await asyncio.gather(fleet.stop_all(), fleet.stop_all())  # the second waits for the first
    assert starting.done() and fleet.state is FleetState.CLOSED and fleet.records == {}
    # Ended while it started (its import takes 2 s): stop_all does not wait for it to be ready.
    with pytest.raises(FleetClosedError, match=r"tslowstart#0 was stopped while it started"):
        await starting
    assert _servers() == []  # stopped at once, before stop_all returned


async def test_a_closed_fleet_starts_nothing_and_says_so(tmp_path: Path) -> None:
    fleet = _fleet(tmp_path)
    await fleet.stop_all()
    with pytest.raises(FleetClosedError, match="fleet is closed: starting tslowstart#1 refused"):
        await fleet.start("tslowstart", 1)
    with pytest.raises(FleetClosedError, match="borrowing"):
        await fleet.borrow("tslowstart", "http://127.0.0.1:9")
    assert _servers() == [] and fleet.records == {}
    assert issubclass(FleetClosedError, StateError)
    await fleet.stop_all()  # closing a closed fleet again is a no-op
    assert fleet.state is FleetState.CLOSED
