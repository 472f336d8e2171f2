"""The registry's server operations: shared, replicated (tagged) and borrowed node-set servers.

- ``ensure_shared_nodesets_for_graph``: each shared node set the graph uses is started once
  (untagged) and refcounted per run.
- ``register_remote_nodeset(name, url)``: borrow a server somebody else owns; the shim's
  ``stop()`` is a no-op, so a borrower never kills the owner's server.
- ``ensure_nodesets_for_graph(graph, worker_count=N)``: N tagged servers ``name#0 … #N-1`` for
  each replicated node set (N = 1 is the same path with one server).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field

from agentcanvas.errors import NodeSetError
from agentcanvas.graph.model import Graph
from agentcanvas.nodes.manifest import NodeSetManifest
from agentcanvas.server.launcher import LaunchedServer, LocalProcessLauncher, ServerLauncher
from agentcanvas.server.proxy import RemoteNodeSet, fetch_manifest


def server_key(nodeset: str, tag: int | None) -> str:
    return nodeset if tag is None else f"{nodeset}#{tag}"


@dataclass
class ServerRecord:
    """One known server: owned (we launched it) or borrowed (a no-op stop shim)."""

    nodeset: str
    tag: int | None
    url: str
    handle: RemoteNodeSet
    server: LaunchedServer | None
    refcount: int = 0
    restarts: int = 0

    @property
    def owned(self) -> bool:
        return self.server is not None

    def is_alive(self) -> bool:
        return self.server.is_alive() if self.server is not None else True

    async def stop(self) -> None:
        await self.handle.close()
        if self.server is not None:  # borrowed: the shim's stop is a no-op
            await self.server.stop()


@dataclass
class NodeSetServers:
    """Servers known to this process, keyed ``name`` (shared/borrowed) or ``name#k``."""

    manifests: dict[str, NodeSetManifest]
    launcher: ServerLauncher = field(default_factory=LocalProcessLauncher)
    records: dict[str, ServerRecord] = field(default_factory=dict)
    launching: dict[str, asyncio.Future[ServerRecord]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if isinstance(self.launcher, LocalProcessLauncher) and self.launcher.forkable is None:
            self.launcher.forkable = lambda nodeset: self.manifests[nodeset].forkable

    async def start(self, nodeset: str, tag: int | None = None) -> ServerRecord:
        """The server of ``key``, launched once: concurrent callers share one launch. An
        owned server found dead is launched again (its record, refcount included, kept)."""
        key = server_key(nodeset, tag)
        record = self.records.get(key)
        if record is not None and (record.is_alive() or not record.owned):
            return record
        pending = self.launching.get(key)
        if pending is None:
            pending = asyncio.ensure_future(self._launch(key, nodeset, tag))
            self.launching[key] = pending
            pending.add_done_callback(lambda _: self.launching.pop(key, None))
        return await asyncio.shield(pending)  # one caller cancelled: the launch goes on

    async def _launch(self, key: str, nodeset: str, tag: int | None) -> ServerRecord:
        if key in self.records:  # owned and dead
            return await self.restart(key)
        server = await self.launcher.launch(nodeset, tag)
        handle = RemoteNodeSet(key, server.url, self.manifests[nodeset])
        record = ServerRecord(nodeset, tag, server.url, handle, server)
        self.records[key] = record
        return record

    async def start_many(self, wanted: Sequence[tuple[str, int | None]]) -> list[ServerRecord]:
        """Start several servers concurrently; on any failure stop the ones just started."""
        missing = [w for w in wanted if server_key(*w) not in self.records]
        results = await asyncio.gather(
            *(self.start(n, t) for n, t in missing), return_exceptions=True
        )
        failures = [r for r in results if isinstance(r, BaseException)]
        if failures:
            for nodeset, tag in missing:
                record = self.records.pop(server_key(nodeset, tag), None)
                if record is not None:
                    await record.stop()
            raise failures[0]
        return [self.records[server_key(n, t)] for n, t in wanted]

    async def borrow(self, nodeset: str, url: str) -> ServerRecord:
        manifest = await fetch_manifest(url)
        if manifest.name != nodeset:
            raise NodeSetError(f"server at {url} serves {manifest.name!r}, not {nodeset!r}")
        handle = RemoteNodeSet(nodeset, url, manifest)
        record = ServerRecord(nodeset, None, url, handle, server=None)
        self.records[nodeset] = record
        self.manifests[nodeset] = manifest
        return record

    async def restart(self, key: str) -> ServerRecord:
        """Stop (if needed) and relaunch an owned server; the record keeps its key."""
        old = self.records[key]
        if not old.owned:
            raise NodeSetError(f"{key} is borrowed; only its owner can restart it")
        await old.stop()
        server = await self.launcher.launch(old.nodeset, old.tag)
        old.server, old.url = server, server.url
        old.handle = RemoteNodeSet(key, server.url, self.manifests[old.nodeset])
        old.restarts += 1
        return old

    async def stop(self, key: str) -> None:
        record = self.records.pop(key, None)
        if record is not None:
            await record.stop()

    async def stop_all(self) -> None:
        records, self.records = list(self.records.values()), {}
        await asyncio.gather(*(r.stop() for r in records), return_exceptions=True)
        closer = getattr(self.launcher, "close", None)  # templates of forked servers
        if closer is not None:
            await closer()

    def replicated_in(self, graph: Graph) -> list[str]:
        return [n for n in graph.nodesets() if self.manifests[n].parallelism == "replicated"]

    def shared_in(self, graph: Graph) -> list[str]:
        return [n for n in graph.nodesets() if self.manifests[n].parallelism == "shared"]
