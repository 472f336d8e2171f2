"""Capabilities of node-set handles are declared types (`nodes.handles`), asked with
``isinstance``: each handle class has exactly the ones it declares, and an in-process node
set none of a server's. A node set's state is closed through `ClosableState`, plain or async.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from agentcanvas.cluster.model_actor import RayModelHandle
from agentcanvas.nodes import LocalNodeSet, NodeSet
from agentcanvas.nodes.handles import (
    AttachesClients,
    BatchAudited,
    HealthChecked,
    SaysIfItEvicts,
)
from agentcanvas.server.proxy import RemoteNodeSet

CAPABILITIES = (HealthChecked, AttachesClients, SaysIfItEvicts, BatchAudited)


def _local(state_factory: Callable[[], object] | None = None) -> LocalNodeSet:
    return LocalNodeSet(NodeSet(name="tcap", state_factory=state_factory))


def test_a_servers_proxy_has_every_capability_and_an_in_process_node_set_none() -> None:
    local = _local()
    remote = RemoteNodeSet("tcap", "http://127.0.0.1:9", local.manifest)
    assert [isinstance(remote, c) for c in CAPABILITIES] == [True] * 4
    assert [isinstance(local, c) for c in CAPABILITIES] == [False] * 4
    assert remote.evicts is True  # until its server says it keeps no episode state


def test_a_model_actors_handle_declares_what_it_can_do() -> None:
    assert issubclass(RayModelHandle, AttachesClients) and issubclass(RayModelHandle, BatchAudited)
    assert not hasattr(RayModelHandle, "health") and not hasattr(RayModelHandle, "evicts")


class _Plain:
    closed = 0

    def close(self) -> None:
        _Plain.closed += 1


class _Async:
    closed = 0

    async def close(self) -> None:
        _Async.closed += 1


class _NotClosable:
    close = None  # an attribute named close that is no method: never called


@pytest.mark.asyncio
async def test_a_states_close_runs_plain_or_async_and_a_state_without_one_is_left_alone() -> None:
    for factory in (_Plain, _Async, _NotClosable, None):
        await _local(factory).close()
    assert (_Plain.closed, _Async.closed) == (1, 1)
