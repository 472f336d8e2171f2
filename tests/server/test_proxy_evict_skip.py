"""Evictions over the call path: a server says whether its node set keeps per-episode state,
and a proxy stops sending evictions to one that keeps none (one round trip less per episode).

``core`` has an evict hook (keyed per-episode containers); ``env_minigrid`` has none. Whether
a request still goes out is observed for real: after the server is SIGKILLed, an eviction
that is sent fails naming the server, one that is skipped cannot.
"""

from __future__ import annotations

import os
import signal

import pytest

from agentcanvas.errors import ServerDiedError
from agentcanvas.server.launcher import LocalProcessLauncher
from agentcanvas.server.proxy import RemoteNodeSet, fetch_manifest
from support.polling import poll_until

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(60)]

DEADLINE_S = 10.0


async def _evict_then_kill(nodeset: str) -> RemoteNodeSet:
    """A proxy that has evicted one episode on a live server, which is then SIGKILLed."""
    server = await LocalProcessLauncher().launch(nodeset, None)
    try:
        remote = RemoteNodeSet(nodeset, server.url, await fetch_manifest(server.url))
        remote.timeout_s = DEADLINE_S
        await remote.evict("run:0")
        os.kill((await remote.health()).pid, signal.SIGKILL)
        poll_until(lambda: not server.is_alive(), f"{nodeset} server to die", DEADLINE_S)
    finally:
        await server.stop()
    return remote


async def test_evictions_keep_going_to_a_node_set_with_an_evict_hook() -> None:
    remote = await _evict_then_kill("core")
    try:
        with pytest.raises(ServerDiedError, match="core"):
            await remote.evict("run:1")
    finally:
        await remote.close()


async def test_evictions_stop_for_a_node_set_without_an_evict_hook() -> None:
    remote = await _evict_then_kill("env_minigrid")
    try:
        await remote.evict("run:1")  # nothing is sent: no server needed
        with pytest.raises(ServerDiedError, match="env_minigrid"):
            await remote.health()  # while a request that is sent fails
    finally:
        await remote.close()
