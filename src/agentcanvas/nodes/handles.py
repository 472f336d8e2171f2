"""How a node set is reached (`NodeSetHandle`), and what some handles can do besides.

Every handle — in-process (`LocalNodeSet`), a server's proxy (`server.proxy.RemoteNodeSet`),
a Ray model actor's (`cluster.model_actor.RayModelHandle`) — is a `NodeSetHandle`. A
capability only some have is a Protocol of its own, declared by the classes that have it
(they subclass it, so mypy checks their signatures) and asked with ``isinstance``::

    HealthChecked        health()                     a server's proxy
    AttachesClients      attach(client), detach(...)  a shared server's proxy, a model actor
    SaysIfItEvicts       evicts                       a server's proxy (False: skip evictions)
    BatchAudited         batch_audit, batch_certify   a shared server's proxy, a model actor

A handle that lacks one simply has nothing to do there (an in-process node set has no
server to ask, no batch to audit).
"""

from __future__ import annotations

import weakref
from typing import Any, Protocol, runtime_checkable

from agentcanvas.nodes.definitions import CallContext
from agentcanvas.nodes.manifest import LoadInfo, NodeSetManifest

__all__ = [
    "AttachesClients",
    "BatchAudited",
    "HealthChecked",
    "NodeSetHandle",
    "SaysIfItEvicts",
    "says_if_it_evicts",
]


class NodeSetHandle(Protocol):
    """How the executor reaches a node set: in-process or over HTTP (a proxy)."""

    name: str
    manifest: NodeSetManifest

    async def call(
        self, node_name: str, config: dict[str, Any], inputs: dict[str, Any], ctx: CallContext
    ) -> dict[str, Any]: ...

    async def panel_change(self, field_name: str, value: Any) -> dict[str, Any]: ...

    async def panel_action(self, action: str) -> dict[str, Any]: ...

    async def panel_load(self) -> LoadInfo: ...

    async def panel_episode(self, fields: list[tuple[str, Any]]) -> LoadInfo: ...

    async def evict(self, episode_key: str) -> None: ...

    async def determinism(self) -> dict[str, str]: ...

    async def close(self) -> None: ...


@runtime_checkable
class HealthChecked(Protocol):
    """A handle whose server can be asked whether it lives (ServerDiedError when gone)."""

    async def health(self) -> object: ...


@runtime_checkable
class AttachesClients(Protocol):
    """A shared server that batches across its clients: told which workers may send
    requests (its batching rendezvous); each answers how many are attached."""

    async def attach(self, client: str, /) -> int: ...

    async def detach(self, client: str, /) -> int: ...


@runtime_checkable
class SaysIfItEvicts(Protocol):
    """A handle that learns whether its node set keeps per-episode state: False once it
    said not, so that a worker skips the eviction's round trip."""

    @property
    def evicts(self) -> bool: ...


_SAYS_IF_IT_EVICTS: weakref.WeakKeyDictionary[type, bool] = weakref.WeakKeyDictionary()


def says_if_it_evicts(handle: object) -> bool:
    """``isinstance(handle, SaysIfItEvicts)``, answered once per class: a Protocol's
    isinstance looks up each of its members (about 7 µs), and a worker asks it of every
    node set after every episode. The handles are our classes, which declare it."""
    kind = type(handle)
    known = _SAYS_IF_IT_EVICTS.get(kind)
    if known is None:
        known = _SAYS_IF_IT_EVICTS[kind] = isinstance(handle, SaysIfItEvicts)
    return known


@runtime_checkable
class BatchAudited(Protocol):
    """A shared server whose batched functions are audited (`server.batch_audit`): its
    report for a run, and certifying a run (every batched row recomputed alone)."""

    async def batch_audit(self, run_id: str, /) -> dict[str, Any]: ...

    async def batch_certify(self, run_id: str, on: bool, /) -> bool: ...
