"""Node sets, graphs, canvas Play, and the WebSocket."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from fastapi import APIRouter, Request, WebSocket, WebSocketDisconnect
from pydantic import Field

from agentcanvas.errors import StateError
from agentcanvas.eval.config import EvalConfig
from agentcanvas.eval.episode import EpisodeOptions, EpisodeSpec, EpisodeWiring, run_episode
from agentcanvas.eval.events import CanvasEvent
from agentcanvas.eval.runner import episode_tasks
from agentcanvas.eval.seeding import episode_seed
from agentcanvas.graph.executor import ExecutionPrinciples
from agentcanvas.paths import NAME_PATTERNS, check_name
from agentcanvas.server.registry import WorkspaceComponentRegistry

from .models import (
    MAX_EPISODE_INDEX,
    MAX_SEED,
    GraphName,
    JsonInt,
    NodeSetName,
    RequestModel,
    StepBudget,
    error_responses,
)
from .services import ProcessServices
from .ws_clients import WebSocketClient

log = logging.getLogger(__name__)
router = APIRouter(tags=["workspace"], responses=error_responses(400, 403, 422))
NOT_FOUND = error_responses(404)


def services(request: Request) -> ProcessServices:
    svc: ProcessServices = request.app.state.services
    return svc


@router.get("/api/graphs")
async def graphs(request: Request) -> dict[str, Any]:
    svc = services(request)
    return {"graphs": [{"name": g.name, "origin": g.origin} for g in svc.registry.graph_entries()]}


@router.get("/api/graphs/{name}", responses=NOT_FOUND)
async def graph(name: GraphName, request: Request) -> dict[str, Any]:
    return services(request).registry.load_graph(name).model_dump(mode="json")


@router.get("/api/nodesets")
async def nodesets(request: Request) -> dict[str, Any]:
    svc = services(request)
    servers = {key: vars(s) for key, s in svc.registry.server_status().items()}
    return {
        "nodesets": [
            svc.registry.manifest(n).model_dump(mode="json") for n in svc.registry.nodeset_names()
        ],
        "servers": servers,
        "pending_unloads": sorted(svc.pending_unloads),
        "load_errors": svc.registry.load_errors,
    }


@router.post("/api/nodesets/{name}/load", responses=error_responses(404, 409))
async def load_nodeset(name: NodeSetName, request: Request) -> dict[str, Any]:
    svc = services(request)
    check_name("nodeset", name, field="name")
    if svc.registry.manifest(name).parallelism != "shared":
        raise StateError(f"node set {name!r} is not shared; only shared ones load in the backend")
    url = await svc.registry.load_shared(name)
    svc.pending_unloads.discard(name)
    return {"name": name, "url": url}


@router.post("/api/nodesets/{name}/unload", responses=error_responses(409))
async def unload_nodeset(name: NodeSetName, request: Request) -> dict[str, Any]:
    """Unload now when no run holds it; otherwise deferred until its refcount is zero."""
    svc = services(request)
    check_name("nodeset", name, field="name")
    refcount = svc.registry.shared_refcount(name)
    if refcount is None:
        raise StateError(f"node set {name!r} is not loaded")
    if refcount > 0:
        svc.pending_unloads.add(name)
        return {"name": name, "status": "deferred", "refcount": refcount}
    await svc.registry.unload_shared(name)
    return {"name": name, "status": "unloaded"}


class PlayRequest(RequestModel):
    """One episode of a graph on the canvas."""

    graph_name: str = Field(min_length=1, max_length=64, pattern=NAME_PATTERNS["graph"])
    episode: JsonInt = Field(default=0, ge=0, le=MAX_EPISODE_INDEX)
    task: str | None = Field(default=None, min_length=1, max_length=128)
    seed: JsonInt = Field(default=0, ge=0, le=MAX_SEED)
    step_budget: StepBudget | None = None


@router.post("/api/canvas/play", responses=error_responses(404, 409, 413))
async def canvas_play(body: PlayRequest, request: Request) -> dict[str, Any]:
    """One episode in the backend under the ExecutionGuard, with per-node events live."""
    svc = services(request)
    graph = svc.registry.load_graph(body.graph_name)
    task = body.task or episode_tasks(EvalConfig(graph_name=graph.name), graph)[0]
    registry = WorkspaceComponentRegistry(workspace=svc.workspace)
    registry.scan_all()
    async with svc.guard:
        urls = await svc.registry.ensure_shared_nodesets_for_graph(graph)
        try:
            for name, url in urls.items():
                await registry.register_remote_nodeset(name, url)
            env = registry.local_instance(graph.env.nodeset) if graph.env else None
            spec = EpisodeSpec(
                0,
                task,
                body.episode,
                episode_seed(body.seed, task, body.episode),
                key=f"canvas:{task}:{body.episode}",
            )
            wiring = EpisodeWiring(
                registry,
                env,
                principles=ExecutionPrinciples(False),
                events=lambda e: svc.broadcast(CanvasEvent.model_validate(e)),
            )
            result = await run_episode(
                graph, spec, wiring, EpisodeOptions(step_budget_override=body.step_budget)
            )
        finally:
            await registry.shutdown_all()
            svc.registry.release_shared_nodesets(sorted(urls))
    return result.model_dump(mode="json")


@router.websocket("/ws")
async def websocket(ws: WebSocket) -> None:
    """Events: eval_progress, eval_episode_done, eval_complete (source "eval"), canvas events."""
    svc: ProcessServices = ws.app.state.services
    await ws.accept()
    client = WebSocketClient(ws)
    svc.ws_connections.add(client)

    async with asyncio.TaskGroup() as group:  # owns the sender; both end with the connection
        sender = group.create_task(client.pump())
        try:
            while True:
                await ws.receive_text()
        except WebSocketDisconnect:
            pass
        finally:
            svc.ws_connections.discard(client)
            sender.cancel()
