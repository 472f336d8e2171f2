"""The node-set server's protocol: its routes and rpc operations, named once, and the
request and reply bodies, typed (msgspec structs, checked by ``parse``).

``auto_host`` serves these routes and operations; ``proxy`` (and anything else that talks to
a node-set server) names them from here. Bodies travel as wire maps (msgpack, or JSON for
the small control requests); a body that does not fit its struct is a UserInputError (HTTP
400) naming the route and the field.
"""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec
from pydantic import Field

from agentcanvas.errors import UserInputError
from agentcanvas.nodes.manifest import NodeSetManifest

__all__ = [
    "ATTACH",
    "BATCH_AUDIT",
    "CALL",
    "DETACH",
    "DETERMINISM",
    "EVICT",
    "HEALTH",
    "MANIFEST",
    "OP_CALL",
    "OP_EVICT",
    "OP_PANEL_EPISODE",
    "PANEL_ACTION",
    "PANEL_CHANGE",
    "PANEL_EPISODE",
    "PANEL_LOAD",
    "STATS",
    "AttachedReply",
    "CallReply",
    "CallRequest",
    "ClientRequest",
    "EvictRequest",
    "HealthReply",
    "PanelActionRequest",
    "PanelChangeRequest",
    "PanelEpisodeRequest",
    "ServedManifest",
    "call_path",
    "parse",
]

# -- HTTP routes ---------------------------------------------------------------------------
HEALTH = "/health"
MANIFEST = "/manifest"
CALL = "/call/{node_name}"
PANEL_CHANGE = "/panel/change"
PANEL_ACTION = "/panel/action"
PANEL_EPISODE = "/panel/episode"
PANEL_LOAD = "/panel/load"
EVICT = "/evict"
ATTACH = "/attach"
DETACH = "/detach"
STATS = "/stats"
DETERMINISM = "/determinism"
BATCH_AUDIT = "/batch_audit"

# -- rpc operations (the per-episode hot path, same handlers as the routes) ----------------
OP_CALL = "call"
OP_PANEL_EPISODE = "panel_episode"
OP_EVICT = "evict"


def call_path(node_name: str) -> str:
    """The HTTP route of one node's calls."""
    return CALL.format(node_name=node_name)


# -- bodies ----------------------------------------------------------------------------------
class CallRequest(msgspec.Struct):
    """One node call: ``ctx`` is a CallContext's fields."""

    node: str
    config: dict[str, Any]
    inputs: dict[str, Any]
    ctx: dict[str, Any]


class CallReply(msgspec.Struct):
    """The node's outputs, or ``{"error": "Type: message"}`` when the node raised."""

    outputs: dict[str, Any]


class PanelChangeRequest(msgspec.Struct):
    field: str
    value: Any


class PanelActionRequest(msgspec.Struct):
    action: str


class PanelEpisodeRequest(msgspec.Struct):
    """Reset, set these fields in order, play and load (``nodes.base.start_episode``)."""

    fields: list[tuple[str, Any]]


class EvictRequest(msgspec.Struct):
    episode_key: str


class ClientRequest(msgspec.Struct):
    """Attach or detach a batching client (a run's worker)."""

    client: str


class AttachedReply(msgspec.Struct):
    attached: int


class HealthReply(msgspec.Struct):
    """``GET /health``: who serves, and the rpc endpoint of the hot path (``call``)."""

    ok: bool
    nodeset: str
    tag: int | None
    pid: int
    call: str


class ServedManifest(NodeSetManifest):
    """``GET /manifest``: the node set's manifest and where this server takes its hot-path
    calls, so that a borrower that only has the URL learns both in one request."""

    call_endpoint: str | None = Field(
        default=None,
        description="The ZeroMQ endpoint of node calls, the episode's panel round trip and "
        "evictions (as ``call`` on /health); None from a server that does not say.",
    )

    def declared(self) -> NodeSetManifest:
        """The manifest as the node set declares it, without what the server adds."""
        return NodeSetManifest.model_validate(self.model_dump(exclude={"call_endpoint"}))


Body = TypeVar("Body", bound=msgspec.Struct)


def parse(value: Any, body: type[Body], where: str) -> Body:
    """``value`` (a decoded wire or JSON map) as ``body``; UserInputError naming ``where``."""
    try:
        return msgspec.convert(value, body)
    except msgspec.ValidationError as exc:
        raise UserInputError(f"{where}: {exc}") from exc
