"""WorkspaceComponentRegistry: the node sets and graphs a process knows, and how to reach them.

``scan_all()`` discovers node sets (built-ins, then ``workspace/graph_nodes/``, then the
active overlay's, later ones overriding earlier ones of the same name) and graphs
(``graphs/`` likewise). A graph is validated against the manifests when loaded, so an
unknown node type is refused before anything runs.

Node-set servers (shared, replicated, borrowed) are kept in ``self.servers``
(:class:`~agentcanvas.server.servers.NodeSetServers`); the seed's registry operations
(``ensure_shared_nodesets_for_graph``, ``register_remote_nodeset``,
``ensure_nodesets_for_graph``, ``get_server_url``, ``get_env_panel``, ``shutdown_all``) are
methods here.
"""

from __future__ import annotations

import os
from pathlib import Path

from agentcanvas.errors import (
    ConfigError,
    GraphValidationError,
    NodeSetError,
    UnknownGraphError,
    UnknownNodeSetError,
)
from agentcanvas.graph.model import Graph, Node, load_graph_file
from agentcanvas.graph.validate import validate_graph
from agentcanvas.nodes import discovery
from agentcanvas.nodes.base import LocalNodeSet, NodeSet, NodeSetHandle
from agentcanvas.nodes.discovery import Found
from agentcanvas.nodes.manifest import NodeSetManifest, NodeTypeSpec
from agentcanvas.paths import check_name, workspace_dir
from agentcanvas.server.proxy import RemoteNodeSet
from agentcanvas.server.servers import NodeSetServers, server_key

ACTIVE_WORKSPACE_ENV = "ACTIVE_WORKSPACE_DIR"


class WorkspaceComponentRegistry:
    """Per-process catalogue of node sets and graphs, plus the handles that reach them."""

    def __init__(self, workspace: Path | None = None, active_workspace: Path | None = None) -> None:
        self.workspace = workspace or workspace_dir()
        overlay = active_workspace or os.environ.get(ACTIVE_WORKSPACE_ENV) or None
        self.active_workspace = Path(overlay) if overlay else None
        self._found_nodesets: dict[str, Found] = {}
        self._found_graphs: dict[str, Found] = {}
        self._nodesets: dict[str, NodeSet] = {}
        self._manifests: dict[str, NodeSetManifest] = {}
        self.load_errors: dict[str, str] = {}
        self._bindings: dict[str, NodeSetHandle] = {}
        self._locals: dict[str, LocalNodeSet] = {}
        self._remotes: dict[str, RemoteNodeSet] = {}
        self.servers = NodeSetServers(self._manifests)

    # -- discovery -------------------------------------------------------------------------
    def scan_all(self) -> None:
        """(Re)discover node sets and graphs from disk. Import failures are kept, not raised."""
        found = discovery.builtin_nodesets()
        found |= discovery.folder_nodesets(self.workspace / "graph_nodes", "workspace")
        if self.active_workspace is not None:
            found |= discovery.folder_nodesets(self.active_workspace / "graph_nodes", "active")
        self._found_nodesets, self._found_graphs = found, self._discover_graphs()
        self.load_errors.clear()
        for name, item in found.items():
            if name in self._manifests and name not in self._nodesets:
                continue  # a remote registration wins over the local declaration
            try:
                nodeset = discovery.import_nodeset(item)
            except NodeSetError as exc:
                self.load_errors[name] = str(exc)
                continue
            self._nodesets[name] = nodeset
            self._manifests[name] = nodeset.manifest()

    def _discover_graphs(self) -> dict[str, Found]:
        graphs = discovery.builtin_graphs()
        graphs |= discovery.folder_graphs(self.workspace / "graphs", "workspace")
        if self.active_workspace is not None:
            graphs |= discovery.folder_graphs(self.active_workspace / "graphs", "active")
        return graphs

    def nodeset_names(self) -> list[str]:
        return sorted(self._manifests)

    def origin(self, name: str) -> str:
        item = self._found_nodesets.get(name)
        return "remote" if name not in self._nodesets else (item.origin if item else "builtin")

    def manifest(self, name: str) -> NodeSetManifest:
        try:
            return self._manifests[name]
        except KeyError:
            detail = f": {self.load_errors[name]}" if name in self.load_errors else ""
            raise UnknownNodeSetError(
                f"unknown node set {name!r}{detail} (known: {', '.join(self.nodeset_names())})"
            ) from None

    def find_manifest(self, name: str) -> NodeSetManifest | None:
        return self._manifests.get(name)

    def nodeset(self, name: str) -> NodeSet:
        """The Python declaration of a locally discovered node set."""
        if name not in self._nodesets:
            self.manifest(name)  # raises a clear error for unknown names
            raise NodeSetError(f"node set {name!r} is only known remotely (borrowed by URL)")
        return self._nodesets[name]

    def graph_entries(self) -> list[Found]:
        return [self._found_graphs[name] for name in sorted(self._found_graphs)]

    def load_graph(self, name: str) -> Graph:
        """Load a graph by name and validate it against the known node sets."""
        check_name("graph", name, field="graph_name")
        item = self._found_graphs.get(name)
        if item is None:  # saved since the last scan? graphs are cheap to re-discover
            self._found_graphs = self._discover_graphs()
            item = self._found_graphs.get(name)
        if item is None:
            known = ", ".join(sorted(self._found_graphs)) or "none"
            raise UnknownGraphError(f"unknown graph {name!r} (known graphs: {known})")
        graph = load_graph_file(item.path)
        self.validate(graph)
        return graph

    def validate(self, graph: Graph) -> None:
        """Semantic validation (node types, ports, cycles, configs) against the manifests."""
        try:
            validate_graph(graph, self.find_manifest, self._check_config)
        except GraphValidationError as exc:
            broken = [n for n in graph.nodesets() if n in self.load_errors]
            if not broken:
                raise
            details = "\n".join(
                f"  - node set '{n}' failed to load: {self.load_errors[n]}" for n in broken
            )
            raise GraphValidationError(f"{exc}\n{details}") from exc

    def _check_config(self, node: Node) -> None:
        if node.nodeset in self._nodesets:
            self._nodesets[node.nodeset].validate_config(node.node_name, node.config)

    # -- NodeResolver ----------------------------------------------------------------------
    def node_spec(self, node_type: str) -> NodeTypeSpec:
        nodeset, _, node_name = node_type.partition(".")
        spec = self.manifest(nodeset).node_type(node_name)
        if spec is None:
            raise GraphValidationError(f"unknown node type {node_type!r}")
        return spec

    def handle_for(self, nodeset: str, url_override: str | None = None) -> NodeSetHandle:
        """A handle for this call site: the URL override, the bound server, or in-process."""
        if url_override is not None:
            return self.remote_handle(nodeset, url_override)
        if nodeset in self._bindings:
            return self._bindings[nodeset]
        return self.local_instance(nodeset)

    def local_instance(self, nodeset: str) -> LocalNodeSet:
        """The in-process instance of a node set (created once per process)."""
        if nodeset not in self._locals:
            self._locals[nodeset] = LocalNodeSet(self.nodeset(nodeset))
        return self._locals[nodeset]

    # -- server operations (design note § 2, § 4) ------------------------------------------
    def remote_handle(self, nodeset: str, url: str) -> NodeSetHandle:
        """A proxy for ``url`` (one keep-alive client per URL, reused across episodes)."""
        key = f"{nodeset}@{url}"
        if key not in self._remotes:
            self._remotes[key] = RemoteNodeSet(nodeset, url, self.manifest(nodeset))
        return self._remotes[key]

    async def ensure_shared_nodesets_for_graph(self, graph: Graph) -> dict[str, str]:
        """Start each shared node set of the graph once (refcount +1); name → URL."""
        urls: dict[str, str] = {}
        for name in self.servers.shared_in(graph):
            record = await self.servers.start(name)  # one launch, even for concurrent runs
            record.refcount += 1
            self._bindings[name] = record.handle
            urls[name] = record.url
        return urls

    def release_shared_nodesets(self, names: list[str]) -> list[str]:
        """Refcount −1 for each; returns the names whose refcount reached zero."""
        idle = []
        for name in names:
            record = self.servers.records.get(name)
            if record is not None:
                record.refcount = max(0, record.refcount - 1)
                if record.refcount == 0:
                    idle.append(name)
        return idle

    async def register_remote_nodeset(self, name: str, url: str) -> None:
        """Borrow a server by URL: fetch its manifest, route calls there; never stop it."""
        record = await self.servers.borrow(name, url)
        self._bindings[name] = record.handle
        self._manifests[name] = record.handle.manifest

    async def ensure_nodesets_for_graph(self, graph: Graph, worker_count: int = 1) -> list[str]:
        """Shared servers not yet bound are started; N tagged servers per replicated set."""
        if worker_count < 1:
            raise ConfigError(f"worker_count must be >= 1, got {worker_count}")
        for name in self.servers.shared_in(graph):
            if name not in self._bindings:
                await self.ensure_shared_nodesets_for_graph(_only(graph, name))
        wanted = [(n, k) for n in self.servers.replicated_in(graph) for k in range(worker_count)]
        records = await self.servers.start_many(wanted)
        return [server_key(r.nodeset, r.tag) for r in records]

    def get_server_url(self, nodeset: str, tag: int | None = None) -> str | None:
        record = self.servers.records.get(server_key(nodeset, tag))
        return record.url if record is not None else None

    def get_env_panel(self, key: str) -> NodeSetHandle:
        """The handle of a (tagged) server, e.g. ``"env_minigrid#2"``."""
        record = self.servers.records.get(key)
        if record is None:
            raise NodeSetError(
                f"no server {key!r} is running (running: {sorted(self.servers.records)})"
            )
        return record.handle

    async def restart_server(self, key: str) -> NodeSetHandle:
        return (await self.servers.restart(key)).handle

    def server_alive(self, key: str) -> bool:
        record = self.servers.records.get(key)
        return record is not None and record.is_alive()

    def bind_server(self, nodeset: str) -> None:
        """Route calls of a node set to its (untagged) server."""
        self._bindings[nodeset] = self.servers.records[nodeset].handle

    async def unload_shared(self, nodeset: str) -> None:
        """Stop a shared server now (the caller checked that no run holds it)."""
        self._bindings.pop(nodeset, None)
        await self.servers.stop(nodeset)

    def bind_handle(self, nodeset: str, handle: NodeSetHandle) -> None:
        """Route calls of a node set to ``handle`` (the Ray engine's model actors)."""
        self._bindings[nodeset] = handle

    def bound(self, nodeset: str) -> NodeSetHandle | None:
        return self._bindings.get(nodeset)

    async def shutdown_all(self) -> None:
        """Stop every owned server and in-process instance; borrowed servers are left alone."""
        self._bindings.clear()
        remotes, self._remotes = list(self._remotes.values()), {}
        for remote in remotes:
            await remote.close()
        await self.servers.stop_all()
        await self.close_locals()

    async def close_locals(self) -> None:
        """Close in-process node-set instances (their simulators, models)."""
        locals_, self._locals = self._locals, {}
        for instance in locals_.values():
            await instance.close()


def _only(graph: Graph, nodeset: str) -> Graph:
    return graph.model_copy(update={"nodes": [n for n in graph.nodes if n.nodeset == nodeset]})
