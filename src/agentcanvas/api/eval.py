"""REST endpoints of batch eval: status, queue, cancel, resume, runs, episodes, compare (start:
:mod:`agentcanvas.api.start`)."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request
from fastapi.responses import FileResponse, JSONResponse, PlainTextResponse

from agentcanvas.errors import EpisodeNotFoundError
from agentcanvas.eval import health
from agentcanvas.eval.events import EvalComplete
from agentcanvas.eval.planning import plan_comparison
from agentcanvas.eval.run_index import RunQuery
from agentcanvas.eval.run_spec import RunSpec
from agentcanvas.eval.run_state import RunStatus
from agentcanvas.fileio import read_json
from agentcanvas.paths import NAME_PATTERNS

from . import runs
from .models import (
    MAX_EPISODE_INDEX,
    AssetName,
    EpisodeIndex,
    RunId,
    error_responses,
)
from .services import ProcessServices

router = APIRouter(prefix="/api/eval/v2", tags=["eval"], responses=error_responses(400, 403, 422))
NOT_FOUND = error_responses(404)
RESUME_WAIT_S = 15.0


def services(request: Request) -> ProcessServices:
    svc: ProcessServices = request.app.state.services
    return svc


@router.get("/status/{run_id}", responses=NOT_FOUND)
async def status(
    run_id: RunId,
    request: Request,
    compact: bool = Query(False, description="Leave out the per-episode records."),
) -> dict[str, Any]:
    svc = services(request)
    if compact:  # summary.json alone: a live run's records are not read
        summary = runs.compact(svc.runs.summary_file(run_id))
    else:
        summary = dict(svc.runs.summary(run_id))
    summary["waiting_reason"] = svc.scheduler.waiting_reason(run_id)
    if "health" not in summary:  # written by the scheduler, before any runner existed
        summary["health"] = health.of_summary(summary).model_dump(mode="json")
    return summary


@router.get("/queue")
async def queue(request: Request) -> dict[str, Any]:
    return services(request).scheduler.list_active()


@router.post("/cancel/{run_id}", responses=error_responses(404, 409))
async def cancel(run_id: RunId, request: Request) -> dict[str, str]:
    svc = services(request)
    svc.runs.run_dir(run_id)
    task = svc.inprocess.get(run_id)
    if task is not None:
        task.cancel()
        return {"run_id": run_id, "status": "cancelling"}
    result = svc.scheduler.cancel(run_id)
    svc.loads.cancel(run_id)  # a run cancelled while its shared models load
    if result == "cancelled":
        svc.broadcast(EvalComplete(run_id=run_id, status="cancelled"))
    svc.request_tick()
    return {"run_id": run_id, "status": result}


@router.post("/resume/{run_id}", responses=error_responses(404, 409, 507))
async def resume(run_id: RunId, request: Request) -> dict[str, str]:
    """Re-queue a run to execute only its missing episodes into the same folder."""
    svc = services(request)
    run_dir = svc.runs.run_dir(run_id)
    await _until_reaped(svc, run_id)
    spec = RunSpec.read(run_dir)  # ConfigError (400) naming the field when it was damaged
    spec.graph_model(source=f"run {run_id} spec.json")
    ray = spec.config.engine == "ray"  # the Ray engine runs its own model actors
    # Its shared node sets are started once it is queued again (shared_loads), off this call.
    svc.scheduler.resume(run_id, {}, [] if ray else list(spec.shared_nodesets))
    svc.loads.start_pending()
    svc.request_tick()
    return {"run_id": run_id, "status": RunStatus.QUEUED}


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
    status: str | None = Query(None, max_length=32),
    q: str | None = Query(None, max_length=200, description="Words in name, tags, note, id."),
    tag: str | None = Query(None, max_length=40, description="Only runs with this tag."),
    graph: str | None = Query(None, max_length=128, description="Only runs of this graph."),
    retry_of: str | None = Query(
        None, max_length=64, description="Only the retries of this run (config.retry_of)."
    ),
) -> dict[str, Any]:
    query = RunQuery(text=q, tag=tag, graph=graph, retry_of=retry_of)
    return services(request).runs.list(offset, limit, status, query)


@router.get("/runs/{run_id}/episodes", responses=NOT_FOUND)
async def list_episodes(
    run_id: RunId,
    request: Request,
    offset: int = Query(0, ge=0, le=MAX_EPISODE_INDEX),
    limit: int = Query(100, ge=1, le=1000),
    status: str | None = Query(None, max_length=32),
    sort: str = Query(
        "index:asc", pattern=r"^(index|steps|status|task|metric\.[^:]{1,64}):(asc|desc)$"
    ),
    outcome: runs.Outcome | None = None,
    task: str | None = Query(None, max_length=128, description="Only this task's episodes."),
) -> dict[str, Any]:
    """A page of episode records, each with its ``outcome``: error = not completed, failure =
    success 0; ``sort=metric.<name>:desc`` orders by a metric's number (those without last)."""
    summary = services(request).runs.summary(run_id)
    return runs.episodes_page(summary, offset, limit, status, sort, outcome, task)


@router.get("/runs/{run_id}/episodes/{index}", responses=NOT_FOUND)
async def episode(run_id: RunId, index: EpisodeIndex, request: Request) -> dict[str, Any]:
    run_dir = services(request).runs.run_dir(run_id)
    runs.episode_folder(run_dir, index)
    path = runs.served(run_dir, run_dir.episode_json_path(index))
    if not path.exists():
        raise EpisodeNotFoundError(f"episode {index} of run {run_id}: episode.json does not exist")
    record: dict[str, Any] = read_json(path)
    record["assets"] = runs.episode_assets(run_dir, index)
    record["outcome"] = runs.outcome_of(record)
    return record


@router.get("/runs/{run_id}/episodes/{index}/log", responses=NOT_FOUND)
async def episode_log(run_id: RunId, index: EpisodeIndex, request: Request) -> dict[str, Any]:
    return runs.episode_log(services(request).runs.run_dir(run_id), index)


@router.get(
    "/runs/{run_id}/episodes/{index}/assets/{name}",
    response_class=FileResponse,
    responses={**NOT_FOUND, 200: {"content": {"*/*": {}}, "description": "The file."}},
)
async def episode_asset(
    run_id: RunId, index: EpisodeIndex, name: AssetName, request: Request
) -> FileResponse:
    return FileResponse(runs.asset_path(services(request).runs.run_dir(run_id), index, name))


@router.get("/runs/{run_id}/graph", responses=NOT_FOUND)
async def run_graph(run_id: RunId, request: Request) -> Any:
    run_dir = services(request).runs.run_dir(run_id)
    path = run_dir.graph_path if run_dir.graph_path.exists() else run_dir.spec_path
    data = read_json(runs.served(run_dir, path))
    return data.get("graph", data) if path == run_dir.spec_path else data


TEXT: dict[int | str, dict[str, Any]] = {
    200: {"content": {"text/plain": {"schema": {"type": "string"}}}, "description": "Text."}
}


@router.get(
    "/runs/{run_id}/logs/{which}", response_class=JSONResponse, responses={**NOT_FOUND, **TEXT}
)
async def run_log(
    run_id: RunId, which: Literal["stdout", "stderr"], request: Request
) -> PlainTextResponse:
    run_dir = services(request).runs.run_dir(run_id)
    path = run_dir.stdout_path if which == "stdout" else run_dir.stderr_path
    return PlainTextResponse(runs.log_tail(runs.served(run_dir, path)))


RunIdQuery = Annotated[str, Query(pattern=NAME_PATTERNS["run_id"], max_length=64)]


@router.get("/compare", responses=NOT_FOUND)
async def compare(a: RunIdQuery, b: RunIdQuery, request: Request) -> dict[str, Any]:
    """Runs ``a`` and ``b`` paired by (task, episode_index); 400 when no episode pairs.
    ``caveats`` says what the reader must know (different seeds: not paired by scene), and
    ``graph_differences`` what differs between their frozen graphs."""
    svc = services(request)
    left, right = svc.runs.summary(a), svc.runs.summary(b)
    folders = svc.runs.run_dir(a), svc.runs.run_dir(b)
    # in a thread: the sequential verdict's simulation may take a few hundred ms
    return await asyncio.to_thread(runs.compare_runs, left, right, *folders)


@router.get("/plan", responses=NOT_FOUND)
async def plan(
    request: Request,
    run: RunIdQuery,
    delta: float = Query(gt=-1, lt=1, description="Difference in success rate to detect."),
    power: float = Query(0.8, gt=0, lt=1),
    alpha: float = Query(0.05, gt=0, lt=0.5),
    workers: int = Query(1, ge=1, le=64, description="Workers, for the ETA."),
    vs: RunIdQuery | None = None,
) -> dict[str, Any]:
    """Paired episodes needed to detect ``delta`` against run ``run`` (Connor 1987 for a
    fixed-n McNemar; the anytime-valid test's by simulation), per task and pooled, with an
    ETA; the discordance observed against ``vs`` when given, else assumed (said)."""
    svc = services(request)
    baseline = svc.runs.summary(run)
    other = svc.runs.summary(vs) if vs is not None else None
    return await asyncio.to_thread(
        plan_comparison,
        baseline,
        delta,
        power=power,
        alpha=alpha,
        workers=workers,
        other=other,
    )
