"""auto_host: serve one node set over HTTP on 127.0.0.1 with an ephemeral port.

    python -m agentcanvas.server.auto_host --nodeset NAME [--tag K]

The port reaches the parent through the ready pipe (no race: the socket is bound and
listening before the line is written). Endpoints: ``/health``, ``/manifest``,
``/call/{node}`` (wire-encoded), ``/panel/*``, ``/evict``, ``/attach`` + ``/detach``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import sys
from typing import Any

import uvicorn
from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse

from agentcanvas.errors import AgentCanvasError, UserInputError
from agentcanvas.nodes.base import CallContext, LocalNodeSet
from agentcanvas.nodes.registry import WorkspaceComponentRegistry
from agentcanvas.server import procs, wire
from agentcanvas.server.batched_inference import BatchedInferenceServer
from agentcanvas.server.batching import policy_from_env
from agentcanvas.server.runtime import fix_numeric_threads

HOST = "127.0.0.1"


def _wire_response(obj: Any) -> Response:
    return Response(content=wire.encode(obj), media_type=wire.WIRE_CONTENT_TYPE)


def create_app(instance: LocalNodeSet, tag: int | None) -> FastAPI:
    """The node-set server's app. Node failures travel back as ``{"error": ...}`` data."""
    app = FastAPI(title=f"agentcanvas node set {instance.name}", docs_url=None, redoc_url=None)
    batcher = BatchedInferenceServer(policy_from_env())
    app.state.batcher = batcher

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"ok": True, "nodeset": instance.name, "tag": tag, "pid": os.getpid()}

    @app.get("/manifest")
    async def manifest() -> dict[str, Any]:
        return instance.manifest.model_dump(mode="json")

    @app.post("/call/{node_name}")
    async def call(node_name: str, request: Request) -> Response:
        payload = wire.decode(await request.body())
        assert isinstance(payload, dict)
        ctx = CallContext(**payload["ctx"])
        try:
            outputs = await _call(instance, batcher, node_name, payload["config"],
                                  payload["inputs"], ctx)
        except Exception as exc:  # the node's failure is returned as data, the server lives on
            outputs = {"error": f"{type(exc).__name__}: {exc}"}
        return _wire_response({"outputs": outputs})

    @app.post("/panel/change")
    async def panel_change(request: Request) -> Response:
        body = wire.decode(await request.body())
        assert isinstance(body, dict)
        return _wire_response(await instance.panel_change(body["field"], body["value"]))

    @app.post("/panel/action")
    async def panel_action(request: Request) -> Response:
        body = wire.decode(await request.body())
        assert isinstance(body, dict)
        return _wire_response(await instance.panel_action(body["action"]))

    @app.get("/panel/load")
    async def panel_load() -> dict[str, Any]:
        return (await instance.panel_load()).model_dump(mode="json")

    @app.post("/evict")
    async def evict(request: Request) -> dict[str, bool]:
        await instance.evict(str((await request.json())["episode_key"]))
        return {"ok": True}

    @app.post("/attach")
    async def attach(request: Request) -> dict[str, int]:
        return {"attached": batcher.attach(str((await request.json())["client"]))}

    @app.post("/detach")
    async def detach(request: Request) -> dict[str, int]:
        return {"attached": batcher.detach(str((await request.json())["client"]))}

    @app.get("/stats")
    async def stats() -> dict[str, Any]:
        return batcher.stats()

    @app.get("/determinism")
    async def determinism() -> dict[str, str]:
        return await instance.determinism()

    @app.exception_handler(AgentCanvasError)
    async def _agentcanvas_error(request: Request, exc: AgentCanvasError) -> JSONResponse:
        status = 400 if isinstance(exc, UserInputError) else 500
        return JSONResponse({"error": f"{type(exc).__name__}: {exc}"}, status_code=status)

    return app


async def _call(  # noqa: PLR0913
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
        node_name, config, (inputs, ctx), ctx.client or "anonymous", handler
    )
    return result


def _bind() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # accepted sockets inherit it
    sock.bind((HOST, 0))
    sock.listen(128)
    return sock


async def serve(nodeset: str, tag: int | None) -> None:
    """Load the node set, bind, report the port to the parent, serve until terminated."""
    registry = WorkspaceComponentRegistry()
    registry.scan_all()
    instance = LocalNodeSet(registry.nodeset(nodeset))
    sock = _bind()
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        create_app(instance, tag), log_level="warning", access_log=False, lifespan="off",
        timeout_keep_alive=300,
    )
    server = uvicorn.Server(config)
    serving = asyncio.ensure_future(server.serve(sockets=[sock]))
    try:
        while not server.started:
            if serving.done():
                serving.result()
                raise AgentCanvasError("uvicorn stopped before starting")
            await asyncio.sleep(0.005)
        if os.environ.get(procs.READY_FD_ENV):
            procs.child_report_ready({"port": port, "pid": os.getpid(), "nodeset": nodeset})
        else:
            print(f"serving {nodeset} on http://{HOST}:{port}", flush=True)
        await serving
    finally:
        await instance.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="agentcanvas.server.auto_host")
    parser.add_argument("--nodeset", required=True)
    parser.add_argument("--tag", type=int, default=None)
    args = parser.parse_args(argv)
    if os.environ.get(procs.PARENT_PID_ENV):
        procs.set_parent_death_signal()
    fix_numeric_threads()
    try:
        asyncio.run(serve(args.nodeset, args.tag))
    except AgentCanvasError as exc:
        print(f"auto_host {args.nodeset}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 0
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
