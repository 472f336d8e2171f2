"""The node-set server's protocol: its routes and rpc operations, named once, its version,
and every request and reply body, typed.

``auto_host`` serves these routes and operations; ``proxy`` and ``rpc_client`` (and anything else
that talks to a node-set server) name them from here. Bodies travel as wire maps (msgpack, or
JSON for the small control requests and replies)::

    route / op                        request               reply
    HEALTH                            -                     HealthReply (versioned)
    MANIFEST                          -                     ServedManifest (versioned)
    CALL, OP_CALL                     CallRequest           CallReply
    PANEL_CHANGE                      PanelChangeRequest    PanelValues
    PANEL_ACTION                      PanelActionRequest    PanelValues
    PANEL_EPISODE, OP_PANEL_EPISODE   PanelEpisodeRequest   LoadInfo
    PANEL_LOAD                        -                     LoadInfo
    EVICT                             EvictRequest          OkReply (HTTP) / KeepsState (rpc)
    ATTACH, DETACH                    ClientRequest         AttachedReply
    DETERMINISM                       -                     DeterminismModes
    STATS, BATCH_AUDIT                -                     free-form maps (for people)
    BATCH_CERTIFY                     CertifyRequest        OkReply
    any route that fails              -                     ErrorReply (status: STATUS_BY_TYPE)
    the rpc envelope                  RpcRequest            RpcReply[reply] (``ok`` | RpcError)

A request that does not fit its struct is a UserInputError (HTTP 400) naming the route and the
field (`parse`); a reply that does not fit is a ProtocolError naming the server, the route and
the field (`fit`). The bodies are msgspec structs, not pydantic models:
msgspec is the wire's library (``agentcanvas.wire``), it decodes a reply straight into its
struct in one pass — no dearer than the dict it replaces on the per-call path (bench/rpc.py)
— and it is as strict. The two replies that *are* node-API models stay pydantic:
``ServedManifest`` (a NodeSetManifest) and ``LoadInfo``; `fit` takes both kinds.

``PROTOCOL_VERSION`` is ``MAJOR.MINOR``, advertised on ``/health`` and ``/manifest``. A minor
version only adds routes, reply fields and optional request fields, which the structs and
``ServedManifest`` ignore when they do not know them (the node-API models inside, the
manifest's own fields and ``LoadInfo``, stay strict: they change with the node API). A client
refuses a server of another major version (`check_version`, ProtocolVersionError naming both
versions and the URL) before it judges the reply's shape. 2.2 added the attach that may start
a unix-socket call connection (`rpc_shared`); a client attaches only to a server that
advertises 2.2 or later (`attaches_memory`).
"""

from __future__ import annotations

from typing import Annotated, Any, Final, Generic, TypeVar

import msgspec
import pydantic
from pydantic import ConfigDict, Field

from agentcanvas.errors import ProtocolError, ProtocolVersionError, UserInputError
from agentcanvas.nodes.manifest import NodeSetManifest

__all__ = [
    "ATTACH",
    "BATCH_AUDIT",
    "BATCH_CERTIFY",
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
    "PROTOCOL_VERSION",
    "STATS",
    "STATUS_BY_TYPE",
    "AttachedReply",
    "CallReply",
    "CallRequest",
    "CertifyRequest",
    "ClientRequest",
    "DeterminismModes",
    "ErrorReply",
    "EvictRequest",
    "HealthReply",
    "KeepsState",
    "OkReply",
    "PanelActionRequest",
    "PanelChangeRequest",
    "PanelEpisodeRequest",
    "PanelValues",
    "RpcError",
    "RpcReply",
    "RpcRequest",
    "ServedManifest",
    "Versioned",
    "attaches_memory",
    "call_path",
    "check_version",
    "error_reply",
    "fit",
    "fit_versioned",
    "major",
    "not_fitting",
    "parse",
    "rpc_error",
    "rpc_reply",
    "status_of",
]

PROTOCOL_VERSION = "2.2"
"""This package's protocol, ``MAJOR.MINOR``; see the module docstring for what each part means.
2.0: the call endpoint is a framed stream socket (`server.rpc_framing`), no longer ZeroMQ.
2.1: an rpc request may say ``after``: run only if the connection's previous request, of that
id, succeeded (a 2.0 server ignores it and runs the request anyway)."""

_VERSION_PATTERN = r"^[0-9]{1,6}\.[0-9]{1,6}$"
Version = Annotated[str, msgspec.Meta(pattern=_VERSION_PATTERN)]

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
BATCH_CERTIFY = "/batch_audit/certify"

# -- rpc operations (the per-episode hot path, same handlers as the routes) ----------------
OP_CALL = "call"
OP_PANEL_EPISODE = "panel_episode"
OP_EVICT = "evict"


def call_path(node_name: str) -> str:
    """The HTTP route of one node's calls."""
    return CALL.format(node_name=node_name)


# -- requests ------------------------------------------------------------------------------
class CallRequest(msgspec.Struct):
    """One node call: ``ctx`` is a CallContext's fields."""

    node: str
    config: dict[str, Any]
    inputs: dict[str, Any]
    ctx: dict[str, Any]


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


class CertifyRequest(msgspec.Struct):
    """Audit every batched row of ``run`` (the ``<run_id>`` of its episode keys), serving each
    its result computed alone; ``certify: false`` at the run's end stops it."""

    run: str
    certify: bool = True


class ClientRequest(msgspec.Struct):
    """Attach or detach a batching client (a run's worker)."""

    client: str


class RpcRequest(msgspec.Struct):
    """One rpc request's header frame: ``op`` (an ``OP_*``) applied to ``args``; with
    ``after``, only if the request of that id, the one before it on this connection,
    succeeded (the second of a pair sent in one write: `rpc_client.RpcClient.request_then`)."""

    id: int
    op: str
    args: dict[str, Any]
    after: int | None = None


# -- replies ---------------------------------------------------------------------------------
class Versioned(msgspec.Struct):
    """What every versioned reply (/health, /manifest) carries, read before the rest."""

    protocol_version: Version


class HealthReply(msgspec.Struct):
    """``GET /health``: who serves, the protocol it speaks, and the rpc endpoint of the hot
    path (``call``)."""

    ok: bool
    nodeset: str
    tag: int | None
    pid: int
    call: str
    protocol_version: Version


class ServedManifest(NodeSetManifest):
    """``GET /manifest``: the node set's manifest, the protocol the server speaks and where it
    takes its hot-path calls, so that a borrower that only has the URL learns all three in one
    request. Fields it does not know are ignored (a later minor version may add some); the
    manifest's own fields stay strict (they are versioned by ``manifest_version``)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    protocol_version: str = Field(
        pattern=_VERSION_PATTERN, description="The server's PROTOCOL_VERSION (MAJOR.MINOR)."
    )
    call_endpoint: str | None = Field(
        default=None,
        description="The call-socket endpoint (``ipc://@NAME`` or ``tcp://HOST:PORT``) of "
        "node calls, the episode's panel round trip and evictions (as ``call`` on /health); "
        "None from a server that does not say.",
    )

    def declared(self) -> NodeSetManifest:
        """The manifest as the node set declares it, without what the server adds."""
        added = {"call_endpoint", "protocol_version"}
        return NodeSetManifest.model_validate(self.model_dump(exclude=added))


class CallReply(msgspec.Struct):
    """The node's outputs, or ``{"error": "Type: message"}`` when the node raised."""

    outputs: dict[str, Any]


PanelValues = dict[str, Any]
"""A panel's field values after a change or an action."""

KeepsState = bool
"""The rpc reply to an eviction: whether the node set keeps per-episode state at all (False:
later evictions can be skipped)."""

DeterminismModes = dict[str, str]
"""Per-node batch modes, e.g. ``{"embed": "padded"}``."""


class OkReply(msgspec.Struct):
    """``POST /evict`` over HTTP."""

    ok: bool


class AttachedReply(msgspec.Struct):
    """How many clients are attached after an attach or a detach."""

    attached: int


class ErrorReply(msgspec.Struct):
    """The body of a failed HTTP request (status 400 for bad input, else 500)."""

    error: str  # "Type: message"
    type: str
    message: str


class RpcError(msgspec.Struct):
    """An rpc handler's exception: its type, message and the HTTP status it would have."""

    type: str
    message: str
    status: int


Reply = TypeVar("Reply")


class RpcReply(msgspec.Struct, Generic[Reply]):
    """One rpc reply's header frame: the request's ``id`` and either ``ok`` or ``err``;
    ``id`` is None in a server's answer to bytes it could not read as a request (its ``err``
    says why; the server then ends the connection)."""

    id: int | None
    ok: Reply | msgspec.UnsetType = msgspec.UNSET
    err: RpcError | msgspec.UnsetType = msgspec.UNSET


STATUS_BY_TYPE: Final[tuple[tuple[type[BaseException], int], ...]] = ((UserInputError, 400),)
"""The status a server answers an exception with, by its type, most specific first; the
rest is a 500. One table for both transports (the HTTP status, `RpcError.status`): a client
reads 400 as the caller's mistake (UserInputError) and anything else as the server's
(RemoteError), whichever way the request went."""


def status_of(exc: BaseException) -> int:
    """The status of an exception raised handling a request, by its type (never its text)."""
    return next((status for kind, status in STATUS_BY_TYPE if isinstance(exc, kind)), 500)


def error_reply(exc: BaseException) -> ErrorReply:
    """How a server reports an exception over HTTP: ``{"error": "Type: message", ...}``."""
    name = type(exc).__name__
    return ErrorReply(error=f"{name}: {exc}", type=name, message=str(exc))


def rpc_error(exc: BaseException) -> RpcError:
    """How a server reports an exception on the call socket: type, message and status."""
    return RpcError(type(exc).__name__, str(exc), status_of(exc))


def rpc_reply(kind: type[Reply]) -> type[RpcReply[Reply]]:
    """The rpc envelope of a reply of ``kind``, to decode in one pass."""
    envelope: type[RpcReply[Reply]] = RpcReply[kind]  # type: ignore[valid-type]  # built at run time
    return envelope


# -- checks ----------------------------------------------------------------------------------
Body = TypeVar("Body")


def parse(value: Any, body: type[Body], where: str) -> Body:
    """``value`` (a decoded wire or JSON map) as ``body`` (a msgspec struct, or a plain
    ``dict[str, Any]``); UserInputError naming ``where``."""
    try:
        return msgspec.convert(value, body)
    except msgspec.ValidationError as exc:
        raise UserInputError(f"{where}: {exc}") from exc


def not_fitting(server: str, route: str, detail: str) -> ProtocolError:
    """The error for a reply of ``server`` on ``route`` that does not fit; ``detail`` names
    the field."""
    return ProtocolError(f"{server} answered {route} with a reply that does not fit: {detail}")


def fit(value: Any, kind: type[Reply], server: str, route: str) -> Reply:
    """``value`` (a decoded reply) as ``kind`` — a msgspec type, or a pydantic model of the
    node API; ProtocolError naming ``server``, ``route`` and the field when it does not fit."""
    try:
        if isinstance(kind, type) and issubclass(kind, pydantic.BaseModel):
            model: Reply = kind.model_validate(value)
            return model
        return msgspec.convert(value, kind)
    except msgspec.ValidationError as exc:
        raise not_fitting(server, route, str(exc)) from exc
    except pydantic.ValidationError as exc:
        raise not_fitting(server, route, _fields(exc)) from exc


def _fields(exc: pydantic.ValidationError) -> str:
    """pydantic's errors as msgspec words them: ``message - at `$.field.path```."""
    return "; ".join(
        f"{error['msg']} - at `{'.'.join(['$', *map(str, error['loc'])])}`"
        for error in exc.errors()[:3]
    )


def major(version: str) -> int:
    """The major part of a ``MAJOR.MINOR`` version."""
    return int(version.partition(".")[0])


def attaches_memory(advertised: str) -> bool:
    """Whether a server of protocol ``advertised`` takes a call connection that starts with
    an attach (`rpc_shared`: 2.2 and later); an older one reads it as garbage."""
    major_part, _, minor_part = advertised.partition(".")
    return (int(major_part), int(minor_part or 0)) >= (2, 2)


def check_version(advertised: str, server: str) -> None:
    """ProtocolVersionError naming both versions and ``server`` (with its URL) when the
    server speaks another major version than this client."""
    if major(advertised) != major(PROTOCOL_VERSION):
        raise ProtocolVersionError(
            f"{server} speaks protocol {advertised}, this client speaks {PROTOCOL_VERSION}: "
            "another major version, refused"
        )


def fit_versioned(value: Any, kind: type[Reply], server: str, route: str) -> Reply:
    """`fit` for a versioned reply (/health, /manifest): a server of another major version
    is refused first, whatever the rest of its reply looks like."""
    check_version(fit(value, Versioned, server, route).protocol_version, server)
    return fit(value, kind, server, route)
