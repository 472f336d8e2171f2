"""A WorkspaceComponentRegistry over a test workspace."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from agentcanvas.graph.model import Graph
from agentcanvas.server.registry import WorkspaceComponentRegistry


def scanned(workspace: Path) -> WorkspaceComponentRegistry:
    """The workspace's registry, scanned; every node set imported without error."""
    reg = WorkspaceComponentRegistry(workspace=workspace)
    reg.scan_all()
    assert not reg.load_errors, reg.load_errors
    return reg


@asynccontextmanager
async def started_registry(
    workspace: Path, graph: Graph | str, worker_count: int
) -> AsyncIterator[WorkspaceComponentRegistry]:
    """A scanned registry with the servers for ``graph`` (a Graph or the name of one in the
    workspace) started for ``worker_count`` workers; every server shut down at the end."""
    reg = scanned(workspace)
    wanted = reg.load_graph(graph) if isinstance(graph, str) else graph
    await reg.ensure_nodesets_for_graph(wanted, worker_count=worker_count)
    try:
        yield reg
    finally:
        await reg.shutdown_all()
