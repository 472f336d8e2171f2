"""WorkspaceComponentRegistry: the seed's registry, a thin facade over the catalogue and fleet.

It puts together, for one process:

- ``catalogue`` (:class:`~agentcanvas.catalogue.NodeSetCatalogue`): what node sets and
  graphs exist — discovery, manifests, validation;
- ``fleet`` (:class:`~agentcanvas.server.fleet.ServerFleet`): which servers run where,
  launched by the launcher the registry is built with;
- the handles the graph executor calls through (it is the executor's ``NodeResolver``):
  a bound server, a proxy for a URL override, or the in-process instance.

The seed's operations (``ensure_shared_nodesets_for_graph``, ``register_remote_nodeset``,
``ensure_nodesets_for_graph``, ``get_server_url``, ``get_env_panel``, ``shutdown_all``) keep
their names here, so the design note maps onto the code.
"""

from __future__ import annotations

from pathlib import Path

from agentcanvas.catalogue import NodeSetCatalogue
from agentcanvas.catalogue.discovery import Found
from agentcanvas.errors import ConfigError, NodeSetError, describe
from agentcanvas.graph.model import Graph
from agentcanvas.nodes.base import LocalNodeSet, NodeSet, NodeSetHandle
from agentcanvas.nodes.manifest import NodeSetManifest, NodeTypeSpec
from agentcanvas.server.fleet import ServerFleet, ServerStatus, server_key
from agentcanvas.server.launcher import LocalProcessLauncher, ServerLauncher
from agentcanvas.server.proxy import RemoteNodeSet

__all__ = ["WorkspaceComponentRegistry"]


class WorkspaceComponentRegistry:
    """A process's node sets and graphs (the catalogue), its servers (the fleet), and the
    handles that reach them. ``launcher`` decides where this registry's servers run (default:
    local child processes, forked when the node set allows it)."""

    def __init__(
        self,
        workspace: Path | None = None,
        active_workspace: Path | None = None,
        *,
        launcher: ServerLauncher | None = None,
        catalogue: NodeSetCatalogue | None = None,
    ) -> None:
        self.catalogue = catalogue or NodeSetCatalogue(workspace, active_workspace)
        launcher = launcher or LocalProcessLauncher(forkable=self.catalogue.is_forkable)
        self.fleet = ServerFleet(launcher, self.catalogue.manifest)
        self._bindings: dict[str, NodeSetHandle] = {}
        self._locals: dict[str, LocalNodeSet] = {}
        self._remotes: dict[str, RemoteNodeSet] = {}

    # -- the catalogue ---------------------------------------------------------------------
    @property
    def workspace(self) -> Path:
        return self.catalogue.workspace

    @property
    def active_workspace(self) -> Path | None:
        return self.catalogue.active_workspace

    @property
    def load_errors(self) -> dict[str, str]:
        return self.catalogue.load_errors

    def scan_all(self) -> None:
        self.catalogue.scan_all()

    def nodeset_names(self) -> list[str]:
        return self.catalogue.nodeset_names()

    def origin(self, name: str) -> str:
        return self.catalogue.origin(name)

    def manifest(self, name: str) -> NodeSetManifest:
        return self.catalogue.manifest(name)

    def find_manifest(self, name: str) -> NodeSetManifest | None:
        return self.catalogue.find_manifest(name)

    def nodeset(self, name: str) -> NodeSet:
        return self.catalogue.nodeset(name)

    def node_spec(self, node_type: str) -> NodeTypeSpec:
        return self.catalogue.node_spec(node_type)

    def shared_in(self, graph: Graph) -> list[str]:
        return self.catalogue.shared_in(graph)

    def replicated_in(self, graph: Graph) -> list[str]:
        return self.catalogue.replicated_in(graph)

    def graph_entries(self) -> list[Found]:
        return self.catalogue.graph_entries()

    def load_graph(self, name: str) -> Graph:
        return self.catalogue.load_graph(name)

    def validate(self, graph: Graph) -> None:
        self.catalogue.validate(graph)

    # -- handles (the executor's NodeResolver) ---------------------------------------------
    def handle_for(self, nodeset: str, url_override: str | None = None) -> NodeSetHandle:
        """A handle for this call site: the URL override, the bound server, or in-process."""
        if url_override is not None:
            return self.remote_handle(nodeset, url_override)
        if nodeset in self._bindings:
            return self._bindings[nodeset]
        return self.local_instance(nodeset)

    def local_instance(self, nodeset: str) -> LocalNodeSet:
        """The in-process instance of a node set (created once per process); only a
        built-in's synchronous nodes run on the event loop (`NodeSetCatalogue.trusted_inline`)."""
        if nodeset not in self._locals:
            self._locals[nodeset] = LocalNodeSet(
                self.catalogue.nodeset(nodeset), inline=self.catalogue.trusted_inline(nodeset)
            )
        return self._locals[nodeset]

    def prepare_locals(self, graph: Graph) -> None:
        """The in-process instances of the graph's local node sets, made now: their state
        (a policy's imports, say) is built as the run starts, not by the first episode's first
        call, whose time and per-step deadline would count it. A state that cannot be built
        fails the run here, naming its node set (NodeSetError), before any episode runs."""
        for nodeset in self.catalogue.local_in(graph):
            try:
                self.local_instance(nodeset)
            except Exception as exc:
                raise NodeSetError(
                    f"local node set {nodeset!r}: its state could not be built "
                    f"({describe(exc)}); fix its state_factory"
                ) from exc

    def remote_handle(self, nodeset: str, url: str) -> NodeSetHandle:
        """A proxy for ``url`` (one keep-alive client per URL, reused across episodes)."""
        key = f"{nodeset}@{url}"
        if key not in self._remotes:
            self._remotes[key] = RemoteNodeSet(nodeset, url, self.catalogue.manifest(nodeset))
        return self._remotes[key]

    def bind_handle(self, nodeset: str, handle: NodeSetHandle) -> None:
        """Route calls of a node set to ``handle`` (the Ray engine's model actors)."""
        self._bindings[nodeset] = handle

    def bound(self, nodeset: str) -> NodeSetHandle | None:
        return self._bindings.get(nodeset)

    # -- the seed's server operations (design note § 2, § 4) -------------------------------
    async def ensure_shared_nodesets_for_graph(self, graph: Graph) -> dict[str, str]:
        """Start each shared node set of the graph once (refcount +1); name → URL."""
        urls: dict[str, str] = {}
        for name in self.catalogue.shared_in(graph):
            record = await self.fleet.acquire(name)  # one launch, even for concurrent runs
            self._bindings[name] = record.handle
            urls[name] = record.url
        return urls

    def release_shared_nodesets(self, names: list[str]) -> list[str]:
        """Refcount −1 for each; returns the names whose refcount reached zero."""
        return self.fleet.release(names)

    async def register_remote_nodeset(self, name: str, url: str) -> None:
        """Borrow a server by URL: fetch its manifest, route calls there; never stop it."""
        record = await self.fleet.borrow(name, url)
        self._bindings[name] = record.handle
        self.catalogue.add_remote(record.handle.manifest)

    async def ensure_nodesets_for_graph(self, graph: Graph, worker_count: int = 1) -> list[str]:
        """Shared servers not yet bound are started; N tagged servers per replicated set."""
        if worker_count < 1:
            raise ConfigError(f"worker_count must be >= 1, got {worker_count}")
        for name in self.catalogue.shared_in(graph):
            if name not in self._bindings:
                await self.ensure_shared_nodesets_for_graph(_only(graph, name))
        replicated = self.catalogue.replicated_in(graph)
        wanted = [(n, k) for n in replicated for k in range(worker_count)]
        records = await self.fleet.start_many(wanted)
        return [server_key(r.nodeset, r.tag) for r in records]

    def get_server_url(self, nodeset: str, tag: int | None = None) -> str | None:
        return self.fleet.url(server_key(nodeset, tag))

    def get_env_panel(self, key: str) -> NodeSetHandle:
        """The handle of a (tagged) server, e.g. ``"env_minigrid#2"``."""
        record = self.fleet.record(key)
        if record is None:
            raise NodeSetError(
                f"no server {key!r} is running (running: {sorted(self.fleet.records)})"
            )
        return record.handle

    async def restart_server(self, key: str, *, kill: bool = False) -> NodeSetHandle:
        return (await self.fleet.restart(key, kill=kill)).handle

    def server_alive(self, key: str) -> bool:
        return self.fleet.alive(key)

    async def server_answers(self, key: str, timeout_s: float | None = None) -> bool:
        """Whether the server of ``key`` is known and answers ``/health`` now."""
        return await self.fleet.answers(key, timeout_s)

    def server_status(self) -> dict[str, ServerStatus]:
        return self.fleet.status()

    def shared_refcount(self, nodeset: str) -> int | None:
        """How many runs hold the shared server of ``nodeset``; None when none runs."""
        return self.fleet.refcount(nodeset)

    async def load_shared(self, nodeset: str) -> str:
        """Start the shared server of ``nodeset`` (no holder counted), route calls there;
        its URL."""
        record = await self.fleet.start(nodeset)
        self._bindings[nodeset] = record.handle
        return record.url

    async def unload_shared(self, nodeset: str) -> None:
        """Stop a shared server now (the caller checked that no run holds it)."""
        self._bindings.pop(nodeset, None)
        await self.fleet.stop(nodeset)

    async def shutdown_all(self) -> None:
        """Stop every owned server and in-process instance; borrowed servers are left alone."""
        self._bindings.clear()
        remotes, self._remotes = list(self._remotes.values()), {}
        for remote in remotes:
            await remote.close()
        await self.fleet.stop_all()
        await self.close_locals()

    async def close_locals(self) -> None:
        """Close in-process node-set instances (their simulators, models)."""
        locals_, self._locals = self._locals, {}
        for instance in locals_.values():
            await instance.close()


def _only(graph: Graph, nodeset: str) -> Graph:
    return graph.model_copy(update={"nodes": [n for n in graph.nodes if n.nodeset == nodeset]})
