"""The process boundary, kept for node sets that run in-process where they normally do not.

``play`` (and any run without servers) calls replicated and shared node sets in this
process. In a batch run their inputs and outputs cross a process boundary on the wire, so a
value the wire cannot carry fails there. :class:`WireBoundary` makes the in-process call
cross the same boundary — inputs and outputs are encoded and decoded — so that ``play`` gives
the record ``eval`` gives for the same episode.
"""

from __future__ import annotations

from typing import Any

from agentcanvas import wire
from agentcanvas.nodes.base import CallContext, LocalNodeSet, NodeSetHandle

__all__ = ["WireBoundary", "is_in_process", "needs_local_deadline", "with_boundary"]


class WireBoundary:
    """A LocalNodeSet whose calls carry their inputs and outputs through the wire format."""

    def __init__(self, inner: LocalNodeSet) -> None:
        self.inner = inner
        self.name = inner.name
        self.manifest = inner.manifest

    async def call(
        self, node_name: str, config: dict[str, Any], inputs: dict[str, Any], ctx: CallContext
    ) -> dict[str, Any]:
        sent = _round_trip("inputs", inputs)
        return _round_trip("outputs", await self.inner.call(node_name, config, sent, ctx))

    def __getattr__(self, name: str) -> Any:  # panel, evict, close: as the inner instance
        return getattr(self.inner, name)


def _round_trip(key: str, value: dict[str, Any]) -> dict[str, Any]:
    """``value`` as the far side of the wire sees it (WireError naming ``key.path``)."""
    decoded: dict[str, dict[str, Any]] = wire.decode(wire.encode({key: value}))  # type: ignore[assignment]
    return decoded[key]


def is_in_process(handle: NodeSetHandle) -> bool:
    """Whether calls to ``handle`` run in this process (no server deadline guards them)."""
    return isinstance(handle, LocalNodeSet | WireBoundary)


def needs_local_deadline(handle: NodeSetHandle, node_name: str) -> bool:
    """Whether an in-process call of ``node_name`` gets the per-step deadline: every call
    that is awaited — on a thread (a blocking node, or any synchronous node of a node set
    that is not ours) or a coroutine — so that a slow one is abandoned and blamed on its
    node. A synchronous node of ours runs on the event loop (``LocalNodeSet.runs_inline``),
    where no deadline can interrupt it, so none is set (it would only cost time)."""
    inner = handle.inner if isinstance(handle, WireBoundary) else handle
    if not isinstance(inner, LocalNodeSet):
        return False
    return not inner.runs_inline(node_name)


def runs_to_its_end(handle: NodeSetHandle, node_name: str) -> bool:
    """Whether a call of ``node_name`` through ``handle`` runs to its end on the event loop,
    never suspending: a synchronous node of ours, in process (``LocalNodeSet.runs_inline``)."""
    return isinstance(handle, LocalNodeSet) and handle.runs_inline(node_name)


def with_boundary(handle: NodeSetHandle) -> NodeSetHandle:
    """``handle``, wrapped in a WireBoundary when it is an in-process instance of a node set
    that a batch run hosts in a server (replicated or shared)."""
    if isinstance(handle, LocalNodeSet) and handle.manifest.parallelism != "local":
        return WireBoundary(handle)
    return handle
