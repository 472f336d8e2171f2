"""REST endpoints of batch eval: start, status, queue, cancel, resume, runs, episodes, compare."""

from __future__ import annotations

import asyncio
import os
from typing import Any

from fastapi import APIRouter, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, PlainTextResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agentcanvas.errors import StateError, UnsafeNameError, UserInputError
from agentcanvas.eval.config import EvalConfig
from agentcanvas.eval.foreground import run_foreground
from agentcanvas.eval.recovery import load_spec
from agentcanvas.eval.store import RunDir, new_run_id, read_json
from agentcanvas.nodes.registry import WorkspaceComponentRegistry
from agentcanvas.paths import resolve_within
from agentcanvas.state import ProcessServices

from . import runs

router = APIRouter(prefix="/api/eval/v2", tags=["eval"])
RESUME_WAIT_S = 15.0


class StartRequest(BaseModel):
    """A run to queue. Only ``graph_name`` is required."""

    model_config = ConfigDict(extra="forbid")

    graph_name: str = Field(min_length=1, max_length=64)
    episode_count: int = Field(default=10, ge=1, le=1_000_000)
    worker_count: int = Field(default=1, ge=1, le=64)
    tasks: list[str] | None = None
    start_index: int = Field(default=0, ge=0)
    step_budget: int | None = Field(default=None, ge=1)
    seed: int = Field(default=0, ge=0)
    per_step_timeout_s: float = Field(default=10.0, gt=0)
    save_frames: bool = False
    via_subprocess: bool = True
    priority: int = Field(default=0, ge=-100, le=100)
    marginal_vram_mb: float = Field(default=0.0, ge=0)
    exclusive_gpu: bool = False
    active_workspace_dir: str | None = None


class StartResponse(BaseModel):
    run_id: str
    status: str
    via_subprocess: bool


def services(request: Request) -> ProcessServices:
    svc: ProcessServices = request.app.state.services
    return svc


@router.post("/start", response_model=StartResponse)
async def start_eval_v2(body: StartRequest, request: Request) -> StartResponse:
    """Queue a run (default) or, with via_subprocess false, run it inside the backend."""
    svc = services(request)
    if body.active_workspace_dir is not None:
        _check_overlay(svc, body.active_workspace_dir)
    graph = svc.registry.load_graph(body.graph_name)
    try:
        config = EvalConfig(**body.model_dump(include=set(EvalConfig.model_fields) - {"version"}))
    except ValidationError as exc:  # a rule of EvalConfig that StartRequest does not repeat
        errors = [{**e, "loc": ("body", *e["loc"])} for e in exc.errors()]
        raise RequestValidationError(errors) from exc
    use_subprocess = (
        body.via_subprocess and os.environ.get("AGENTCANVAS_EVAL_SUBPROCESS", "1") != "0"
    )
    if not use_subprocess:
        run_id = await _start_in_process(svc, graph, config)
        return StartResponse(run_id=run_id, status="running", via_subprocess=False)
    urls = await svc.registry.ensure_shared_nodesets_for_graph(graph)
    spec = {
        "version": 1,
        "config": config.model_dump(mode="json"),
        "scheduling": {
            "marginal_vram_mb": body.marginal_vram_mb,
            "exclusive_gpu": body.exclusive_gpu,
            "priority": body.priority,
        },
        "graph": graph.model_dump(mode="json"),
        "shared_nodesets": sorted(urls),
        "active_workspace_dir": body.active_workspace_dir,
    }
    run_id = svc.scheduler.submit(spec, urls)
    svc.request_tick()
    return StartResponse(run_id=run_id, status="queued", via_subprocess=True)


def _check_overlay(svc: ProcessServices, folder: str) -> None:
    """An overlay imports node-set code: it must be a folder inside the workspace."""
    try:
        path = resolve_within(svc.workspace, folder)
    except UnsafeNameError as exc:
        raise UserInputError(
            f"active_workspace_dir: {folder!r} must be a folder inside the workspace "
            f"{svc.workspace}"
        ) from exc
    if not path.is_dir():
        raise UserInputError(f"active_workspace_dir: {folder!r} is not a folder")


async def _start_in_process(svc: ProcessServices, graph: Any, config: EvalConfig) -> str:
    """The legacy in-process path: a fresh registry borrowing the backend's shared servers."""
    run_dir = RunDir(svc.scheduler.runs_dir / new_run_id(svc.scheduler.runs_dir))
    urls = await svc.registry.ensure_shared_nodesets_for_graph(graph)
    registry = WorkspaceComponentRegistry(workspace=svc.workspace)
    registry.scan_all()
    for name, url in urls.items():
        await registry.register_remote_nodeset(name, url)

    async def go() -> None:
        try:
            await run_foreground(registry, graph, config, broadcast=svc.broadcast, run_dir=run_dir)
        finally:
            svc.registry.release_shared_nodesets(sorted(urls))
            svc.inprocess.pop(run_dir.root.name, None)

    svc.inprocess[run_dir.root.name] = asyncio.ensure_future(go())
    return run_dir.root.name


@router.get("/status/{run_id}")
async def status(
    run_id: str,
    request: Request,
    compact: bool = Query(False, description="Leave out the per-episode records."),
) -> dict[str, Any]:
    svc = services(request)
    full = svc.runs.summary(run_id)
    summary = runs.compact(full) if compact else dict(full)
    summary["waiting_reason"] = svc.scheduler.waiting_reasons.get(run_id)
    return summary


@router.get("/queue")
async def queue(request: Request) -> dict[str, Any]:
    return services(request).scheduler.list_active()


@router.post("/cancel/{run_id}")
async def cancel(run_id: str, request: Request) -> dict[str, str]:
    svc = services(request)
    svc.runs.run_dir(run_id)
    task = svc.inprocess.get(run_id)
    if task is not None:
        task.cancel()
        return {"run_id": run_id, "status": "cancelling"}
    result = svc.scheduler.cancel(run_id)
    if result == "cancelled":
        svc.broadcast(
            {"type": "eval_complete", "source": "eval", "run_id": run_id, "status": "cancelled"}
        )
    svc.request_tick()
    return {"run_id": run_id, "status": result}


@router.post("/resume/{run_id}")
async def resume(run_id: str, request: Request) -> dict[str, str]:
    """Re-queue a run to execute only its missing episodes into the same folder."""
    svc = services(request)
    run_dir = svc.runs.run_dir(run_id)
    await _until_reaped(svc, run_id)
    spec = load_spec(run_dir)  # ConfigError (400) naming the field when it was damaged
    from agentcanvas.graph.model import parse_graph

    graph = parse_graph(spec["graph"], source=f"run {run_id} spec.json")
    urls = await svc.registry.ensure_shared_nodesets_for_graph(graph)
    try:
        svc.scheduler.resume(run_id, urls, sorted(urls))
    except StateError:
        svc.registry.release_shared_nodesets(sorted(urls))
        raise
    svc.request_tick()
    return {"run_id": run_id, "status": "queued"}


async def _until_reaped(svc: ProcessServices, run_id: str) -> None:
    """A run that says it ended may still be stopping its servers (its process holds the
    folder's lock): wait for the scheduler to reap it, up to RESUME_WAIT_S, before a resume."""
    deadline = asyncio.get_running_loop().time() + RESUME_WAIT_S
    while svc.scheduler.finishing(run_id) and asyncio.get_running_loop().time() < deadline:
        svc.request_tick()
        await asyncio.sleep(0.1)


@router.get("/runs")
async def list_runs(
    request: Request,
    offset: int = Query(0, ge=0),
    limit: int = Query(50, ge=1, le=500),
    status: str | None = None,
) -> dict[str, Any]:
    return services(request).runs.list(offset, limit, status)


@router.get("/runs/{run_id}/episodes")
async def list_episodes(
    run_id: str,
    request: Request,
    offset: int = Query(0, ge=0),
    limit: int = Query(100, ge=1, le=1000),
    status: str | None = None,
    sort: str = Query("index:asc", pattern=r"^(index|steps|status|task):(asc|desc)$"),
    outcome: runs.Outcome | None = None,
) -> dict[str, Any]:
    """A page of episode records; ``outcome`` error = not completed, failure = success 0."""
    summary = services(request).runs.summary(run_id)
    return runs.episodes_page(summary, offset, limit, status, sort, outcome)


@router.get("/runs/{run_id}/episodes/{index}")
async def episode(run_id: str, index: int, request: Request) -> dict[str, Any]:
    run_dir = services(request).runs.run_dir(run_id)
    path = run_dir.episode_json_path(index)
    if not path.exists():
        raise UserInputError(f"episode {index} of run {run_id} has no episode.json")
    record: dict[str, Any] = read_json(path)
    record["assets"] = runs.episode_assets(run_dir, index)
    return record


@router.get("/runs/{run_id}/episodes/{index}/log")
async def episode_log(run_id: str, index: int, request: Request) -> dict[str, Any]:
    return runs.episode_log(services(request).runs.run_dir(run_id), index)


@router.get("/runs/{run_id}/episodes/{index}/assets/{name}")
async def episode_asset(run_id: str, index: int, name: str, request: Request) -> FileResponse:
    return FileResponse(runs.asset_path(services(request).runs.run_dir(run_id), index, name))


@router.get("/runs/{run_id}/graph")
async def run_graph(run_id: str, request: Request) -> Any:
    run_dir = services(request).runs.run_dir(run_id)
    path = run_dir.graph_path if run_dir.graph_path.exists() else run_dir.spec_path
    data = read_json(path)
    return data.get("graph", data) if path == run_dir.spec_path else data


@router.get("/runs/{run_id}/logs/{which}", response_class=PlainTextResponse)
async def run_log(run_id: str, which: str, request: Request) -> str:
    if which not in ("stdout", "stderr"):
        raise UserInputError("which: expected 'stdout' or 'stderr'")
    run_dir = services(request).runs.run_dir(run_id)
    return runs.log_tail(run_dir.stdout_path if which == "stdout" else run_dir.stderr_path)


@router.get("/compare")
async def compare(a: str, b: str, request: Request) -> dict[str, Any]:
    svc = services(request)
    return runs.compare_runs(svc.runs.summary(a), svc.runs.summary(b))
