"""An active-workspace overlay on a REST start: the same resolution as on the CLI.

A start request with ``active_workspace_dir`` resolves its graph, validates it and freezes it
with a registry that sees the overlay (its graphs and node sets over the workspace's), and the
run's subprocess gets the overlay too. The backend's shared servers run the workspace's code,
so only shared node sets the overlay does not redeclare are borrowed from them; the run
starts the overlay's own.
"""

from __future__ import annotations

from pathlib import Path

from agentcanvas.errors import NotFoundError, UnsafeNameError, UserInputError
from agentcanvas.graph.model import Graph
from agentcanvas.paths import resolve_within
from agentcanvas.server.registry import WorkspaceComponentRegistry

__all__ = [
    "OVERLAY_PATTERN",
    "borrow_shared",
    "borrowed_names",
    "check_overlay",
    "overlay_registry",
]

_SEGMENT = "[A-Za-z0-9_-][A-Za-z0-9_.-]{0,254}"
OVERLAY_PATTERN = f"^{_SEGMENT}(/{_SEGMENT})*$"
"""What a start's ``active_workspace_dir`` may be: a path relative to the workspace whose
names do not start with a dot (so no ``..``) and fit a file system's name limit."""


def check_overlay(workspace: Path, folder: str) -> Path:
    """The overlay's real path: it imports node-set code, so it must be inside the workspace."""
    try:
        path = resolve_within(workspace, folder)
        is_dir = path.is_dir()
    except (UnsafeNameError, OSError) as exc:
        raise UserInputError(
            f"active_workspace_dir: {folder[:200]!r} must be a folder inside the workspace "
            f"{workspace}"
        ) from exc
    if not is_dir:
        raise NotFoundError(f"active_workspace_dir: no folder {folder[:200]!r} in the workspace")
    outputs = (workspace / "outputs").resolve()
    if path == outputs or outputs in path.parents:
        raise UserInputError(
            f"active_workspace_dir: {folder[:200]!r} is inside the workspace's outputs/ (run "
            "folders, written by runs): give a folder of graphs/ and graph_nodes/ instead"
        )
    return path


def overlay_registry(workspace: Path, overlay: Path) -> WorkspaceComponentRegistry:
    """A registry of the workspace with ``overlay`` over it, scanned."""
    registry = WorkspaceComponentRegistry(workspace=workspace, active_workspace=overlay)
    registry.scan_all()
    return registry


def borrowed_names(resolver: WorkspaceComponentRegistry, graph: Graph) -> list[str]:
    """The shared node sets of ``graph`` a run borrows from the backend: all of them, but
    those ``resolver`` (the registry the graph was resolved with, the backend's or an
    overlay's) takes from the overlay, which are not the backend's and are left to the run."""
    return sorted(n for n in resolver.shared_in(graph) if resolver.origin(n) != "active")


async def borrow_shared(
    backend: WorkspaceComponentRegistry, resolver: WorkspaceComponentRegistry, graph: Graph
) -> dict[str, str]:
    """Start (refcount +1) the backend's shared servers the graph uses (those of
    :func:`borrowed_names`); name → URL."""
    urls: dict[str, str] = {}
    for name in borrowed_names(resolver, graph):
        only = graph.model_copy(update={"nodes": [n for n in graph.nodes if n.nodeset == name]})
        urls |= await backend.ensure_shared_nodesets_for_graph(only)
    return urls
