"""NodeSetCatalogue: what node sets and graphs a workspace has (discovery, manifests, checks).

``scan_all()`` discovers node sets (built-ins, then ``workspace/graph_nodes/``, then the
active overlay's, later ones overriding earlier ones of the same name) and graphs
(``graphs/`` likewise). A graph is validated against the manifests when loaded, so an
unknown node type is refused before anything runs. ``load_one(name)`` finds and imports one
node set by the same precedence and no other: a node-set server's own, so that it neither
pays for the others nor depends on them (one user's broken node set).

The catalogue knows nothing of servers: which servers run where is the fleet's business
(:mod:`agentcanvas.server.fleet`), and the seed's ``WorkspaceComponentRegistry``
(:mod:`agentcanvas.server.registry`) puts the two together.
"""

from __future__ import annotations

import os
from pathlib import Path

from agentcanvas.catalogue import discovery
from agentcanvas.catalogue.discovery import Found
from agentcanvas.errors import (
    GraphValidationError,
    NodeSetError,
    UnknownGraphError,
    UnknownNodeSetError,
)
from agentcanvas.graph.model import Graph, Node, load_graph_file
from agentcanvas.graph.validate import validate_graph
from agentcanvas.nodes.base import NodeSet
from agentcanvas.nodes.manifest import NodeSetManifest, NodeTypeSpec
from agentcanvas.paths import check_name, workspace_dir

__all__ = ["ACTIVE_WORKSPACE_ENV", "NodeSetCatalogue"]

ACTIVE_WORKSPACE_ENV = "ACTIVE_WORKSPACE_DIR"


class NodeSetCatalogue:
    """Per-process catalogue of node sets and graphs: what exists, never where it runs."""

    def __init__(self, workspace: Path | None = None, active_workspace: Path | None = None) -> None:
        self.workspace = workspace or workspace_dir()
        overlay = active_workspace or os.environ.get(ACTIVE_WORKSPACE_ENV) or None
        self.active_workspace = Path(overlay) if overlay else None
        self._found_nodesets: dict[str, Found] = {}
        self._found_graphs: dict[str, Found] = {}
        self._nodesets: dict[str, NodeSet] = {}
        self._manifests: dict[str, NodeSetManifest] = {}
        self.load_errors: dict[str, str] = {}

    # -- discovery -------------------------------------------------------------------------
    def scan_all(self) -> None:
        """(Re)discover node sets and graphs from disk. Import failures are kept, not raised."""
        found = discovery.builtin_nodesets()
        for folder, origin in reversed(self._folders()):  # later ones override earlier ones
            found |= discovery.folder_nodesets(folder, origin)
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

    def _folders(self) -> list[tuple[Path, discovery.Origin]]:
        """The ``graph_nodes`` folders, the one that wins first (the overlay's)."""
        folders: list[tuple[Path, discovery.Origin]] = [
            (self.workspace / "graph_nodes", "workspace")
        ]
        if self.active_workspace is not None:
            folders.insert(0, (self.active_workspace / "graph_nodes", "active"))
        return folders

    def load_one(self, name: str) -> NodeSet:
        """Find and import the node set ``name`` alone (the one `scan_all` would take, without
        importing any other); UnknownNodeSetError when there is none, NodeSetError when it
        fails to load."""
        item = discovery.find_nodeset(name, self._folders())
        if item is None:
            known = discovery.builtin_nodesets()
            for folder, origin in reversed(self._folders()):
                known |= discovery.folder_nodesets(folder, origin)
            raise UnknownNodeSetError(
                f"unknown node set {name!r} (known: {', '.join(sorted(known))})"
            )
        nodeset = discovery.import_nodeset(item)
        self._found_nodesets[name] = item
        self._nodesets[name] = nodeset
        self._manifests[name] = nodeset.manifest()
        return nodeset

    def _discover_graphs(self) -> dict[str, Found]:
        graphs = discovery.builtin_graphs()
        graphs |= discovery.folder_graphs(self.workspace / "graphs", "workspace")
        if self.active_workspace is not None:
            graphs |= discovery.folder_graphs(self.active_workspace / "graphs", "active")
        return graphs

    def add_remote(self, manifest: NodeSetManifest) -> None:
        """Know a node set by the manifest of a borrowed server (it wins over a rescan)."""
        self._manifests[manifest.name] = manifest

    # -- node sets -------------------------------------------------------------------------
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

    def trusted_inline(self, name: str) -> bool:
        """Whether an in-process instance of the node set may run its synchronous nodes on
        the event loop (``LocalNodeSet(inline=...)``): only a built-in, ours and tested to
        return fast. A workspace's or the overlay's (user code, even one replacing a
        built-in) runs them on threads under the per-step deadline, so that a slow call costs
        only its own episode time."""
        item = self._found_nodesets.get(name)
        return name in self._nodesets and item is not None and item.origin == "builtin"

    def is_forkable(self, name: str) -> bool:
        """Whether a server of the node set may be forked from a loaded template."""
        return self.manifest(name).forkable

    def node_spec(self, node_type: str) -> NodeTypeSpec:
        nodeset, _, node_name = node_type.partition(".")
        spec = self.manifest(nodeset).node_type(node_name)
        if spec is None:
            raise GraphValidationError(f"unknown node type {node_type!r}")
        return spec

    def shared_in(self, graph: Graph) -> list[str]:
        """The graph's node sets served by one shared server per process."""
        return [n for n in graph.nodesets() if self.manifest(n).parallelism == "shared"]

    def replicated_in(self, graph: Graph) -> list[str]:
        """The graph's node sets served by one server per worker."""
        return [n for n in graph.nodesets() if self.manifest(n).parallelism == "replicated"]

    def local_in(self, graph: Graph) -> list[str]:
        """The graph's node sets that run in the runner's own process."""
        return [n for n in graph.nodesets() if self.manifest(n).parallelism == "local"]

    # -- graphs ----------------------------------------------------------------------------
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
