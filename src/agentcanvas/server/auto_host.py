"""auto_host: serve one node set over HTTP on 127.0.0.1 with an ephemeral port.

    python -m agentcanvas.server.auto_host --nodeset NAME [--tag K] [--record-dir DIR]

The port reaches the parent through the ready pipe (no race: the socket is bound and
listening before the line is written). HTTP endpoints: ``/health`` (which advertises the call
endpoint as ``"call"``), ``/manifest`` (the node set's manifest, with the call endpoint as
``"call_endpoint"``: `protocol.ServedManifest`; both say ``protocol_version``), ``/call/{node}``
(msgpack bodies, for tools),
``/panel/*``, ``/evict``, ``/attach`` + ``/detach``, ``/stats``, ``/determinism``,
``/batch_audit?run=<run_id>`` (each batched function's start-up check and audit, see
``batch_audit``; the checks run before the server reports ready), ``/batch_audit/certify``
(audit every batched row of one run). The hot
path — node calls, the episode's panel round trip and evictions — is served on the call
socket (`server.rpc_server`), with the same handlers; a replicated node set's run on the
connection's thread (`direct_handlers`).

SIGTERM and SIGINT stop the server gracefully, then the node set is closed. With
``--record-dir`` (``agentcanvas serve-nodeset``) the server records itself in
``DIR/<nodeset>[_<tag>].json`` while it runs.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Awaitable, Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import msgspec
import psutil
import uvicorn
from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from agentcanvas import envsettings, wire
from agentcanvas.catalogue import NodeSetCatalogue
from agentcanvas.errors import AgentCanvasError, UserInputError, WireError
from agentcanvas.fileio import atomic_write_json, read_json
from agentcanvas.nodes.base import CallContext, LocalNodeSet, NodeSet
from agentcanvas.paths import check_name
from agentcanvas.server import procs, protocol
from agentcanvas.server.batch_audit import audit_settings_from_env, build_auditor
from agentcanvas.server.batched_inference import BatchedInferenceServer
from agentcanvas.server.batching import policy_from_env
from agentcanvas.server.rpc_server import ON_LOOP, DirectHandler, Handler, RpcServer
from agentcanvas.server.runtime import fix_numeric_threads

__all__ = [
    "HOST",
    "ServerRecordFile",
    "create_app",
    "direct_handlers",
    "error_body",
    "error_status",
    "main",
    "record_path",
    "remove_record",
    "rpc_handlers",
    "serve",
    "write_record",
]

HOST = "127.0.0.1"
Body = TypeVar("Body", bound=msgspec.Struct)
log = logging.getLogger("agentcanvas.server")


def _wire_response(obj: Any) -> Response:
    return Response(content=wire.dumps(obj), media_type=wire.WIRE_CONTENT_TYPE)


def _wire_body(body: bytes, path: str) -> dict[str, Any]:
    try:
        value = wire.loads(body)
    except WireError as exc:
        raise UserInputError(f"{path}: {exc}") from exc
    if not isinstance(value, dict):
        raise UserInputError(f"{path}: a {type(value).__name__}, not a map")
    return value


def _json_body(body: bytes, kind: type[Body], path: str) -> Body:
    try:
        return msgspec.json.decode(body, type=kind)
    except msgspec.DecodeError as exc:  # ValidationError included
        raise UserInputError(f"{path}: {exc}") from exc


def create_app(
    instance: LocalNodeSet, batcher: BatchedInferenceServer, tag: int | None, call_endpoint: str
) -> FastAPI:
    """The node-set server's app. Node failures travel back as ``{"error": ...}`` data."""
    app = FastAPI(title=f"agentcanvas node set {instance.name}", docs_url=None, redoc_url=None)
    app.state.batcher = batcher

    @app.get(protocol.HEALTH)
    async def health() -> dict[str, Any]:
        reply = protocol.HealthReply(
            ok=True,
            nodeset=instance.name,
            tag=tag,
            pid=os.getpid(),
            call=call_endpoint,
            protocol_version=protocol.PROTOCOL_VERSION,
        )
        return msgspec.structs.asdict(reply)

    served = protocol.ServedManifest(
        **instance.manifest.model_dump(),
        protocol_version=protocol.PROTOCOL_VERSION,
        call_endpoint=call_endpoint,
    ).model_dump(mode="json")

    @app.get(protocol.MANIFEST)
    async def manifest() -> dict[str, Any]:
        return served

    handlers = rpc_handlers(instance, batcher)

    @app.post(protocol.CALL)
    async def call(node_name: str, request: Request) -> Response:
        body = _wire_body(await request.body(), protocol.call_path(node_name))
        return _wire_response(await handlers[protocol.OP_CALL]({**body, "node": node_name}))

    @app.post(protocol.PANEL_CHANGE)
    async def panel_change(request: Request) -> Response:
        body = _wire_body(await request.body(), protocol.PANEL_CHANGE)
        change = protocol.parse(body, protocol.PanelChangeRequest, protocol.PANEL_CHANGE)
        return _wire_response(await instance.panel_change(change.field, change.value))

    @app.post(protocol.PANEL_ACTION)
    async def panel_action(request: Request) -> Response:
        body = _wire_body(await request.body(), protocol.PANEL_ACTION)
        action = protocol.parse(body, protocol.PanelActionRequest, protocol.PANEL_ACTION)
        return _wire_response(await instance.panel_action(action.action))

    @app.post(protocol.PANEL_EPISODE)
    async def panel_episode(request: Request) -> Response:
        body = _wire_body(await request.body(), protocol.PANEL_EPISODE)
        return _wire_response(await handlers[protocol.OP_PANEL_EPISODE](body))

    @app.get(protocol.PANEL_LOAD)
    async def panel_load() -> dict[str, Any]:
        return (await instance.panel_load()).model_dump(mode="json")

    @app.post(protocol.EVICT)
    async def evict(request: Request) -> dict[str, bool]:
        body = _json_body(await request.body(), protocol.EvictRequest, protocol.EVICT)
        await instance.evict(body.episode_key)
        return msgspec.structs.asdict(protocol.OkReply(ok=True))

    @app.post(protocol.ATTACH)
    async def attach(request: Request) -> dict[str, int]:
        body = _json_body(await request.body(), protocol.ClientRequest, protocol.ATTACH)
        return msgspec.structs.asdict(protocol.AttachedReply(batcher.attach(body.client)))

    @app.post(protocol.DETACH)
    async def detach(request: Request) -> dict[str, int]:
        body = _json_body(await request.body(), protocol.ClientRequest, protocol.DETACH)
        return msgspec.structs.asdict(protocol.AttachedReply(batcher.detach(body.client)))

    @app.get(protocol.STATS)
    async def stats() -> dict[str, Any]:
        return batcher.stats()

    @app.get(protocol.DETERMINISM)
    async def determinism() -> dict[str, str]:
        return await instance.determinism()

    @app.get(protocol.BATCH_AUDIT)
    async def batch_audit(run: str = "") -> dict[str, Any]:
        return batcher.auditor.report(run) if batcher.auditor is not None else {}

    @app.post(protocol.BATCH_CERTIFY)
    async def batch_certify(request: Request) -> dict[str, bool]:
        body = _json_body(await request.body(), protocol.CertifyRequest, protocol.BATCH_CERTIFY)
        if batcher.auditor is not None:
            batcher.auditor.certify(body.run, body.certify)
        return msgspec.structs.asdict(protocol.OkReply(ok=batcher.auditor is not None))

    @app.exception_handler(AgentCanvasError)
    async def _agentcanvas_error(request: Request, exc: AgentCanvasError) -> JSONResponse:
        return JSONResponse(msgspec.structs.asdict(error_body(exc)), error_status(exc))

    @app.middleware("http")  # not exception_handler(Exception): that one drops the connection
    async def _any_error(
        request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        try:
            return await call_next(request)
        except Exception as exc:
            log.error("%s %s failed", request.method, request.url.path, exc_info=exc)
            return JSONResponse(msgspec.structs.asdict(error_body(exc)), error_status(exc))

    return app


def error_body(exc: BaseException) -> protocol.ErrorReply:
    """How a server reports an exception: ``{"error": "Type: message", "type", "message"}``."""
    name = type(exc).__name__
    return protocol.ErrorReply(error=f"{name}: {exc}", type=name, message=str(exc))


def error_status(exc: BaseException) -> int:
    """400 for bad input (UserInputError), 500 for everything else."""
    return 400 if isinstance(exc, UserInputError) else 500


def _call_request(args: dict[str, Any]) -> tuple[protocol.CallRequest, CallContext]:
    where = protocol.call_path(str(args.get("node")))
    try:
        request = msgspec.convert(args, protocol.CallRequest)
        return request, CallContext(**request.ctx)
    except (msgspec.ValidationError, TypeError) as exc:
        raise UserInputError(f"{where}: not a call payload ({exc})") from exc


def _failed(exc: Exception) -> dict[str, Any]:
    """A node's failure as its outputs: data for the caller; the server lives on."""
    return msgspec.structs.asdict(protocol.CallReply({"error": f"{type(exc).__name__}: {exc}"}))


def direct_handlers(instance: LocalNodeSet) -> dict[str, DirectHandler]:
    """The per-episode operations of a replicated node set, run on the rpc connection's own
    thread: it has one caller (its worker), so nothing needs the event loop between the
    socket and the simulator (no thread hop per call: issue 13). Concurrency stays what it
    was: blocking nodes and the panel may overlap (they ran on worker threads), other
    synchronous nodes and evictions run one at a time (they ran on the loop). A node that
    is async or batched goes to the event loop (`rpc_handlers`), as every op of a shared
    node set does."""

    serial = threading.Lock()  # non-blocking nodes and evictions, one at a time, as on the loop

    def call(args: dict[str, Any]) -> Any:
        request, ctx = _call_request(args)
        try:
            if not instance.runs_synchronously(request.node):
                return ON_LOOP
            if instance.nodeset.definition(request.node).spec.blocking:  # may overlap, as
                outputs = instance.call_here(  # on the worker threads they had before
                    request.node, request.config, request.inputs, ctx
                )
            else:
                with serial:
                    outputs = instance.call_here(request.node, request.config, request.inputs, ctx)
        except Exception as exc:
            return _failed(exc)
        return msgspec.structs.asdict(protocol.CallReply(outputs))

    def panel_episode(args: dict[str, Any]) -> dict[str, Any]:
        request = protocol.parse(args, protocol.PanelEpisodeRequest, protocol.PANEL_EPISODE)
        return instance.panel_episode_here(request.fields).model_dump(mode="json")

    def evict(args: dict[str, Any]) -> bool:
        request = protocol.parse(args, protocol.EvictRequest, protocol.EVICT)
        with serial:
            instance.evict_here(request.episode_key)
        return instance.nodeset.evict is not None

    return {
        protocol.OP_CALL: call,
        protocol.OP_PANEL_EPISODE: panel_episode,
        protocol.OP_EVICT: evict,
    }


def rpc_handlers(instance: LocalNodeSet, batcher: BatchedInferenceServer) -> dict[str, Handler]:
    """The per-episode operations, served on the rpc socket (and the HTTP routes above)."""

    async def call(args: dict[str, Any]) -> dict[str, Any]:
        request, ctx = _call_request(args)
        try:
            outputs = await _call(
                instance, batcher, request.node, request.config, request.inputs, ctx
            )
        except Exception as exc:  # the node's failure is data; the server lives on
            return _failed(exc)
        return msgspec.structs.asdict(protocol.CallReply(outputs))

    async def panel_episode(args: dict[str, Any]) -> dict[str, Any]:
        request = protocol.parse(args, protocol.PanelEpisodeRequest, protocol.PANEL_EPISODE)
        return (await instance.panel_episode(request.fields)).model_dump(mode="json")

    async def evict(args: dict[str, Any]) -> bool:
        """Whether the node set keeps per-episode state at all: False tells a client that
        later evictions can be skipped (one round trip less per episode)."""
        request = protocol.parse(args, protocol.EvictRequest, protocol.EVICT)
        await instance.evict(request.episode_key)
        return instance.nodeset.evict is not None

    return {
        protocol.OP_CALL: call,
        protocol.OP_PANEL_EPISODE: panel_episode,
        protocol.OP_EVICT: evict,
    }


async def _call(
    instance: LocalNodeSet,
    batcher: BatchedInferenceServer,
    node_name: str,
    config: dict[str, Any],
    inputs: dict[str, Any],
    ctx: CallContext,
) -> dict[str, Any]:
    """Batched model nodes go through the coalescer; everything else is called directly."""
    batch_fn = instance.nodeset.definition(node_name).batch_fn
    if batch_fn is None:
        return await instance.call(node_name, config, inputs, ctx)
    state = instance.state

    def handler(items: list[Any], cfg: dict[str, Any]) -> list[dict[str, Any]]:
        return batch_fn(items, cfg, state)

    result: dict[str, Any] = await batcher.submit(
        node_name, config, (inputs, ctx), ctx.client or "anonymous", handler, ctx.episode_key
    )
    return result


def _bind() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # accepted sockets inherit it
    sock.bind((HOST, 0))
    sock.listen(128)
    return sock


class _Server(uvicorn.Server):
    """uvicorn without its own signal capture: `serve` handles SIGINT/SIGTERM in the loop.

    uvicorn re-raises a captured SIGTERM once it has shut down, which kills the process
    before `serve` can close the node set and remove its record file.
    """

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


async def serve(
    nodeset: str,
    tag: int | None,
    record_dir: Path | None = None,
    loaded: NodeSet | None = None,
    *,
    inline: bool = False,
) -> None:
    """Load the node set (unless ``loaded``: a forked server got it from its template), bind,
    report the port to the parent, serve until terminated.

    Calls that are not a replicated node set's go through the server's event loop, which
    every worker calling a shared server shares: only a built-in's synchronous nodes run on
    it (the catalogue says which; ``inline`` for a ``loaded`` node set, default no), anyone
    else's on threads, so that one caller's slow call never holds up another's."""
    if loaded is None:
        catalogue = NodeSetCatalogue()
        catalogue.scan_all()
        loaded = catalogue.nodeset(nodeset)
        inline = catalogue.trusted_inline(nodeset)
    instance = LocalNodeSet(loaded, inline=inline)
    policy = policy_from_env()
    auditor = build_auditor(instance, policy.max_batch, audit_settings_from_env())
    batcher = BatchedInferenceServer(policy, auditor=auditor)
    direct = direct_handlers(instance) if instance.manifest.parallelism == "replicated" else None
    calls = RpcServer(rpc_handlers(instance, batcher), HOST, direct)
    sock = _bind()
    url = f"http://{HOST}:{sock.getsockname()[1]}"
    config = uvicorn.Config(
        create_app(instance, batcher, tag, calls.endpoint),
        log_level="warning",
        access_log=False,
        lifespan="off",
        timeout_keep_alive=300,
        proxy_headers=False,
        server_header=False,
        date_header=False,
    )
    server = _Server(config)
    loop = asyncio.get_running_loop()
    record: Path | None = None

    def on_signal(signum: int) -> None:
        if _orphaned():  # our parent died (the kernel's parent-death SIGTERM): nobody to
            # answer, nothing to hand over; a graceful stop (a model's close) would only
            # outlive it
            if record is not None:
                remove_record(record)
            os._exit(0)
        server.handle_exit(signum, None)

    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, on_signal, signum)
    serving = asyncio.ensure_future(server.serve(sockets=[sock]))
    answering = asyncio.ensure_future(calls.serve())
    try:
        await _until_started(server, serving)
        if record_dir is not None:
            record = write_record(record_dir, nodeset, tag, url)
        _announce(nodeset, url, sock.getsockname()[1], calls.endpoint)
        await asyncio.wait((serving, answering), return_when=asyncio.FIRST_COMPLETED)
    finally:
        server.should_exit = True  # when we got here by an error, uvicorn still runs
        answering.cancel()
        with contextlib.suppress(BaseException):
            await serving
        with contextlib.suppress(BaseException):
            await answering
        if record is not None:
            remove_record(record)
        await instance.close()


def _orphaned() -> bool:
    """Whether the parent that started us (``PARENT_PID_ENV``) is gone."""
    expected = os.environ.get(procs.PARENT_PID_ENV)
    return expected is not None and expected.isdigit() and os.getppid() != int(expected)


def _announce(nodeset: str, url: str, port: int, call_endpoint: str) -> None:
    """Report the port to the parent through the ready pipe, or print where we listen."""
    if os.environ.get(procs.READY_FD_ENV):
        procs.child_report_ready(
            {"port": port, "pid": os.getpid(), "nodeset": nodeset, "call": call_endpoint}
        )
    else:
        print(f"serving {nodeset} on {url}", flush=True)  # calls: see /health


async def _until_started(server: uvicorn.Server, serving: asyncio.Future[None]) -> None:
    while not server.started:
        if serving.done():
            serving.result()
            raise AgentCanvasError("uvicorn stopped before starting")
        await asyncio.sleep(0.005)


def record_path(record_dir: Path, nodeset: str, tag: int | None) -> Path:
    """``<record_dir>/<nodeset>[_<tag>].json``: where a by-hand server records itself."""
    return record_dir / (f"{nodeset}.json" if tag is None else f"{nodeset}_{tag}.json")


class ServerRecordFile(BaseModel):
    """What a by-hand server (``--record-dir``) writes about itself while it runs."""

    version: int = 1
    pid: int
    url: str
    nodeset: str
    tag: int | None
    started_at: datetime = Field(description="When the process started (its create time).")


def write_record(record_dir: Path, nodeset: str, tag: int | None, url: str) -> Path:
    """Record this server atomically; returns the file."""
    record_dir.mkdir(parents=True, exist_ok=True)
    path = record_path(record_dir, nodeset, tag)
    started_at = datetime.fromtimestamp(psutil.Process().create_time(), UTC)
    record = ServerRecordFile(
        pid=os.getpid(), url=url, nodeset=nodeset, tag=tag, started_at=started_at
    )
    atomic_write_json(path, record.model_dump(mode="json"))
    return path


def remove_record(path: Path) -> None:
    """Remove this server's record, unless another server has since taken the file."""
    with contextlib.suppress(OSError, AgentCanvasError):
        if read_json(path).get("pid") == os.getpid():
            path.unlink()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="agentcanvas.server.auto_host")
    parser.add_argument("--nodeset", required=True)
    parser.add_argument("--tag", type=int, default=None)
    parser.add_argument(
        "--record-dir",
        type=Path,
        default=None,
        help="record this server in DIR/<nodeset>[_<tag>].json while it runs",
    )
    args = parser.parse_args(argv)
    if os.environ.get(procs.PARENT_PID_ENV):
        procs.set_parent_death_signal()
    try:
        check_name("nodeset", args.nodeset)
        envsettings.check_all()  # a bad setting fails here, before the node set loads
        fix_numeric_threads()
        asyncio.run(serve(args.nodeset, args.tag, args.record_dir))
    except AgentCanvasError as exc:
        print(f"auto_host {args.nodeset}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 0
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
