"""A shared server runs a user's plain synchronous node off its event loop.

Every worker calling a shared node set shares its server's event loop. A workspace node set
``sharedglue`` (shared, a plain ``def`` node that sleeps for as long as its config says)
is served by a real auto_host child, spawned (it loads the catalogue) or forked from a
template (it is handed the loaded node set): while one caller's call sleeps, another
caller's call is answered at once, as it would not be if the node held the loop.
"""

from __future__ import annotations

import asyncio
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentcanvas.nodes.base import CallContext
from agentcanvas.server.launcher import LocalProcessLauncher
from agentcanvas.server.proxy import RemoteNodeSet, fetch_manifest
from support.workspace import home_workspace

pytestmark = pytest.mark.timeout(60)

SLOW_S = 1.5
FAST_ENOUGH_S = 0.5  # well under SLOW_S: the quick call did not wait for the slow one

SHAREDGLUE = textwrap.dedent(
    '''
    """sharedglue: a shared node set with a plain function that may take its time."""

    import threading
    import time

    from agentcanvas.nodes import NodeSet, PortSpec

    NODESET = NodeSet(name="sharedglue", parallelism="shared")


    @NODESET.node("nap", outputs=[PortSpec(name="thread", type="str")])
    def nap(inputs, config, state, ctx):
        time.sleep(float(config.get("seconds", 0.0)))
        return {"thread": threading.current_thread().name}
    '''
)


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    # AGENTCANVAS_HOME: the auto_host child finds sharedglue here
    yield from home_workspace(tmp_path_factory, "shared_slow_ws", {"sharedglue": SHAREDGLUE})


@pytest.mark.parametrize("forked", [False, True], ids=["spawned", "forked"])
async def test_one_callers_slow_call_never_holds_up_anothers(workspace: Path, forked: bool) -> None:
    launcher = LocalProcessLauncher(forkable=lambda name: forked)
    server = await launcher.launch("sharedglue", None)
    manifest = await fetch_manifest(server.url)
    workers = [RemoteNodeSet("sharedglue", server.url, manifest) for _ in range(2)]
    try:
        slow = asyncio.ensure_future(
            workers[0].call(
                "nap", {"seconds": SLOW_S}, {}, CallContext("a", 0, episode_key="slow", client="w0")
            )
        )
        await asyncio.sleep(0.2)  # the slow call is running in the server
        started = time.monotonic()
        quick = await workers[1].call(
            "nap", {"seconds": 0.0}, {}, CallContext("b", 0, episode_key="quick", client="w1")
        )
        waited = time.monotonic() - started
        assert not slow.done()
        slept = await slow
    finally:
        for remote in workers:
            await remote.close()
        await server.stop()
    assert waited < FAST_ENOUGH_S, f"the quick call waited {waited:.2f} s for the slow one"
    # Both ran off the server's loop (its main thread), on its daemon threads.
    assert slept["thread"].startswith("agentcanvas-blocking")
    assert quick["thread"].startswith("agentcanvas-blocking")
