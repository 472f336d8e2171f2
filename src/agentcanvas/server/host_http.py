"""A node-set server's HTTP side: its FastAPI app (`create_app`) and routes.

Each route is a plain function that reaches the hosted node set through the app's state
(`served`). A request body is decoded in one place (`_body`: msgpack for the panel and call
routes, JSON for the small control requests), into its `protocol` struct, and a body that
does not fit is a 400 naming the route and the field. An exception maps to its status by
type (`protocol.STATUS_BY_TYPE`) and travels back as `protocol.ErrorReply`; a node's failure
is data in its outputs, never an error status.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import msgspec
from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse

from agentcanvas import wire
from agentcanvas.errors import AgentCanvasError, UserInputError, WireError
from agentcanvas.server import protocol
from agentcanvas.server.hosted import HostedNodeSet

__all__ = ["Served", "create_app"]

log = logging.getLogger("agentcanvas.server")
Body = TypeVar("Body")
Tree = dict[str, Any]


@dataclass(frozen=True)
class Served:
    """What the routes reach through ``app.state.served``: the hosted node set and the
    replies that never change (health, the served manifest)."""

    hosted: HostedNodeSet
    health: dict[str, Any]
    manifest: dict[str, Any]


def _served(request: Request) -> Served:
    served: Served = request.app.state.served
    return served


async def _body(request: Request, kind: type[Body], encoding: Literal["wire", "json"]) -> Body:
    """The request's body as ``kind`` (a msgspec type); UserInputError naming the route and
    the field when it is not that."""
    where, raw = request.url.path, await request.body()
    try:
        if encoding == "json":
            return msgspec.json.decode(raw, type=kind)
        value = wire.loads(raw)
    except (msgspec.DecodeError, WireError) as exc:  # ValidationError included
        raise UserInputError(f"{where}: {exc}") from exc
    if not isinstance(value, dict):
        raise UserInputError(f"{where}: a {type(value).__name__}, not a map")
    return protocol.parse(value, kind, where)


def _wire(obj: Any) -> Response:
    return Response(content=wire.dumps(obj), media_type=wire.WIRE_CONTENT_TYPE)


def _json(reply: msgspec.Struct) -> dict[str, Any]:
    return msgspec.structs.asdict(reply)


async def health(request: Request) -> dict[str, Any]:
    return _served(request).health


async def manifest(request: Request) -> dict[str, Any]:
    return _served(request).manifest


async def call(node_name: str, request: Request) -> Response:
    args = await _body(request, Tree, "wire")
    return _wire(await _served(request).hosted.call({**args, "node": node_name}))


async def panel_change(request: Request) -> Response:
    change = await _body(request, protocol.PanelChangeRequest, "wire")
    instance = _served(request).hosted.instance
    return _wire(await instance.panel_change(change.field, change.value))


async def panel_action(request: Request) -> Response:
    action = await _body(request, protocol.PanelActionRequest, "wire")
    return _wire(await _served(request).hosted.instance.panel_action(action.action))


async def panel_episode(request: Request) -> Response:
    args = await _body(request, Tree, "wire")
    return _wire(await _served(request).hosted.panel_episode(args))


async def panel_load(request: Request) -> dict[str, Any]:
    return (await _served(request).hosted.instance.panel_load()).model_dump(mode="json")


async def evict(request: Request) -> dict[str, Any]:
    body = await _body(request, protocol.EvictRequest, "json")
    await _served(request).hosted.instance.evict(body.episode_key)
    return _json(protocol.OkReply(ok=True))


async def attach(request: Request) -> dict[str, Any]:
    body = await _body(request, protocol.ClientRequest, "json")
    return _json(protocol.AttachedReply(_served(request).hosted.batcher.attach(body.client)))


async def detach(request: Request) -> dict[str, Any]:
    body = await _body(request, protocol.ClientRequest, "json")
    return _json(protocol.AttachedReply(_served(request).hosted.batcher.detach(body.client)))


async def stats(request: Request) -> dict[str, Any]:
    return _served(request).hosted.batcher.stats()


async def determinism(request: Request) -> dict[str, str]:
    return await _served(request).hosted.instance.determinism()


async def batch_audit(request: Request, run: str = "") -> dict[str, Any]:
    auditor = _served(request).hosted.batcher.auditor
    return auditor.report(run) if auditor is not None else {}


async def batch_certify(request: Request) -> dict[str, Any]:
    body = await _body(request, protocol.CertifyRequest, "json")
    auditor = _served(request).hosted.batcher.auditor
    if auditor is not None:
        auditor.certify(body.run, body.certify)
    return _json(protocol.OkReply(ok=auditor is not None))


_ROUTES: tuple[tuple[str, str, Callable[..., Awaitable[Any]]], ...] = (
    ("GET", protocol.HEALTH, health),
    ("GET", protocol.MANIFEST, manifest),
    ("POST", protocol.CALL, call),
    ("POST", protocol.PANEL_CHANGE, panel_change),
    ("POST", protocol.PANEL_ACTION, panel_action),
    ("POST", protocol.PANEL_EPISODE, panel_episode),
    ("GET", protocol.PANEL_LOAD, panel_load),
    ("POST", protocol.EVICT, evict),
    ("POST", protocol.ATTACH, attach),
    ("POST", protocol.DETACH, detach),
    ("GET", protocol.STATS, stats),
    ("GET", protocol.DETERMINISM, determinism),
    ("GET", protocol.BATCH_AUDIT, batch_audit),
    ("POST", protocol.BATCH_CERTIFY, batch_certify),
)


def _error_response(exc: BaseException) -> JSONResponse:
    return JSONResponse(_json(protocol.error_reply(exc)), protocol.status_of(exc))


async def _any_error(
    request: Request, call_next: Callable[[Request], Awaitable[Response]]
) -> Response:
    """Every exception of a route as its `protocol.ErrorReply` (a middleware, not
    ``exception_handler(Exception)``: that one drops the connection)."""
    try:
        return await call_next(request)
    except Exception as exc:
        if not isinstance(exc, AgentCanvasError):  # ours name what failed; the rest is a bug
            log.error("%s %s failed", request.method, request.url.path, exc_info=exc)
        return _error_response(exc)


def create_app(hosted: HostedNodeSet, call_endpoint: str) -> FastAPI:
    """The node-set server's app; ``call_endpoint``: its call socket (on /health, /manifest)."""
    instance = hosted.instance
    app = FastAPI(title=f"agentcanvas node set {instance.name}", docs_url=None, redoc_url=None)
    health_reply = protocol.HealthReply(
        ok=True,
        nodeset=instance.name,
        tag=hosted.tag,
        pid=os.getpid(),
        call=call_endpoint,
        protocol_version=protocol.PROTOCOL_VERSION,
    )
    served_manifest = protocol.ServedManifest(
        **instance.manifest.model_dump(),
        protocol_version=protocol.PROTOCOL_VERSION,
        call_endpoint=call_endpoint,
    )
    app.state.served = Served(hosted, _json(health_reply), served_manifest.model_dump(mode="json"))
    for method, path, endpoint in _ROUTES:
        app.add_api_route(path, endpoint, methods=[method])
    app.middleware("http")(_any_error)
    return app
