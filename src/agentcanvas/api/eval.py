"""REST endpoints of batch eval: start, status, queue, cancel, resume, runs, episodes, compare."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Header, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, PlainTextResponse
from pydantic import BaseModel, Field, ValidationError

from agentcanvas import envsettings
from agentcanvas.cluster import select_engine
from agentcanvas.errors import AgentCanvasError, ConfigError, EpisodeNotFoundError, StateError
from agentcanvas.eval import health
from agentcanvas.eval.config import (
    RAY_ADDRESS_PATTERN,
    BinaryInterval,
    EvalConfig,
    FramesMode,
    MaxErrors,
)
from agentcanvas.eval.events import EvalComplete
from agentcanvas.eval.foreground import run_foreground
from agentcanvas.eval.planning import plan_comparison
from agentcanvas.eval.run_index import RunQuery
from agentcanvas.eval.run_meta import RunName, RunNote, RunTags
from agentcanvas.eval.run_setup import new_run_dir, run_registry, scanned_catalogue
from agentcanvas.eval.run_spec import RunSpec, SpecScheduling
from agentcanvas.eval.run_state import RunStatus
from agentcanvas.eval.runner import episode_tasks
from agentcanvas.eval.stopping import check_baseline_tasks, load_baseline
from agentcanvas.eval.store import check_disk_space
from agentcanvas.eval.tasks import check_tasks
from agentcanvas.fileio import read_json
from agentcanvas.graph.model import Graph
from agentcanvas.paths import NAME_PATTERNS
from agentcanvas.server.registry import WorkspaceComponentRegistry

from . import runs
from .idempotency import IDEMPOTENCY_HEADER, KEY_PATTERN, body_fingerprint
from .models import (
    MAX_EPISODE_INDEX,
    MAX_SEED,
    TASK_PATTERN,
    AssetName,
    EpisodeIndex,
    JsonInt,
    RequestModel,
    RunId,
    StepBudget,
    error_responses,
)
from .overlay import OVERLAY_PATTERN, borrow_shared, check_overlay, overlay_registry
from .run_detail import save_start_meta
from .services import ProcessServices

router = APIRouter(prefix="/api/eval/v2", tags=["eval"], responses=error_responses(400, 403, 422))
NOT_FOUND = error_responses(404)
MAX_TASKS = 1000
TaskId = Annotated[str, Field(pattern=TASK_PATTERN)]
RESUME_WAIT_S = 15.0


class StartRequest(RequestModel):
    """A run to queue. Only ``graph_name`` is required."""

    graph_name: str = Field(min_length=1, max_length=64, pattern=NAME_PATTERNS["graph"])
    episode_count: JsonInt = Field(default=10, ge=1, le=1_000_000)
    worker_count: JsonInt = Field(default=1, ge=1, le=64)
    tasks: list[TaskId] | None = Field(
        default=None, min_length=1, max_length=MAX_TASKS, json_schema_extra={"uniqueItems": True}
    )
    start_index: JsonInt = Field(default=0, ge=0, le=MAX_EPISODE_INDEX)
    step_budget: StepBudget | None = None
    seed: JsonInt = Field(default=0, ge=0, le=MAX_SEED)
    per_step_timeout_s: float = Field(default=10.0, gt=0, le=86_400.0)
    episode_timeout_s: float | None = Field(default=None, gt=0, le=86_400.0)
    max_errors: MaxErrors = Field(
        default=None,
        description="Error budget: a count (>= 0) or a fraction (0 < f < 1) of the run's "
        "episodes; past it the run stops with status failed. Default: never stop.",
    )
    save_frames: bool = False
    frames: FramesMode | None = Field(default=None, description="every, failures or none.")
    engine: Literal["local", "ray"] = "local"
    ray_address: str | None = Field(default=None, max_length=256, pattern=RAY_ADDRESS_PATTERN)
    certify: bool = Field(
        default=False,
        description="Audit every batched row of the run (determinism level certified).",
    )
    binary_interval: BinaryInterval = Field(
        default="wilson", description="Interval of 0/1 metrics: wilson or clopper-pearson."
    )
    until_halfwidth: float | None = Field(
        default=None,
        gt=0,
        lt=0.5,
        description="Stop rule: end once the success rate's anytime-valid confidence "
        "sequence (overall, all tasks pooled) is at most ±this wide; episode_count is the cap.",
    )
    until_decided_vs: str | None = Field(
        default=None,
        pattern=NAME_PATTERNS["run_id"],
        description="Stop rule: a baseline run id; end once an anytime-valid paired test "
        "decides this run is better or worse on the same episodes (404: no such run).",
    )
    stop_alpha: float = Field(
        default=0.05, gt=0, lt=0.5, description="Error rate of the stop rules (alpha)."
    )
    via_subprocess: bool = True
    priority: JsonInt = Field(default=0, ge=-100, le=100)
    marginal_vram_mb: float = Field(default=0.0, ge=0, le=1e9)
    exclusive_gpu: bool = False
    active_workspace_dir: str | None = Field(
        default=None,
        min_length=1,
        max_length=1024,
        pattern=OVERLAY_PATTERN,
        description=(
            "A folder of graphs/ and graph_nodes/ inside the workspace, relative to it "
            "(names of letters, digits, '_', '-', '.', not starting with '.'; not outputs/): "
            "404 when there is no such folder."
        ),
    )
    name: RunName | None = Field(default=None, description="A short name for the run.")
    tags: RunTags | None = Field(default=None, description="Labels to filter runs by.")
    note: RunNote | None = Field(default=None, description="Free text about the run.")


class StartResponse(BaseModel):
    run_id: str
    status: str
    via_subprocess: bool
    replayed: bool = Field(
        default=False,
        description=f"True when the {IDEMPOTENCY_HEADER} of an earlier start with the same "
        "body named this run: this is that start's answer, and nothing new was created.",
    )


def services(request: Request) -> ProcessServices:
    svc: ProcessServices = request.app.state.services
    return svc


IdempotencyKey = Annotated[
    str | None,
    Header(
        alias=IDEMPOTENCY_HEADER,
        pattern=KEY_PATTERN,
        max_length=255,
        description="Makes the start safe to retry: a later start with this key and the same "
        "body gets the first one's answer (200, replayed: true) and creates no run, also "
        "after a backend restart; with another body it is a 409. 1-255 visible ASCII "
        "characters, e.g. a UUID.",
    ),
]


@router.post("/start", response_model=StartResponse, responses=error_responses(404, 409, 413, 507))
async def start_eval_v2(
    body: StartRequest, request: Request, idempotency_key: IdempotencyKey = None
) -> StartResponse:
    """Queue a run (default) or, with via_subprocess false, run it inside the backend.

    With an ``Idempotency-Key`` header a retried start never creates a second run."""
    svc = services(request)
    if idempotency_key is None:
        return await _start(svc, body, None)
    fingerprint = body_fingerprint(body)
    async with svc.submit_keys.claim(idempotency_key, fingerprint) as earlier:
        if earlier is not None:
            return StartResponse.model_validate({**earlier.response, "replayed": True})
        return await _start(svc, body, (idempotency_key, fingerprint))


async def _start(
    svc: ProcessServices, body: StartRequest, key: tuple[str, str] | None
) -> StartResponse:
    overlay = None
    resolver = svc.registry
    if body.active_workspace_dir is not None:
        overlay = check_overlay(svc.workspace, body.active_workspace_dir)
        resolver = overlay_registry(svc.workspace, overlay)
    graph = resolver.load_graph(body.graph_name)
    _check_tasks(resolver, graph, body.tasks)
    try:
        config = EvalConfig(**body.model_dump(include=set(EvalConfig.model_fields) - {"version"}))
    except ValidationError as exc:  # a rule of EvalConfig that StartRequest does not repeat
        errors = [{**e, "loc": ("body", *e["loc"])} for e in exc.errors()]
        raise RequestValidationError(errors) from exc
    baseline = load_baseline(svc.scheduler.runs_dir, config)  # 404/400: until_decided_vs
    if config.until_decided_vs is not None:
        check_baseline_tasks(baseline, episode_tasks(config, graph), config.until_decided_vs)
    use_subprocess = body.via_subprocess and envsettings.EVAL_SUBPROCESS.get() == "1"

    def created(root: Path, answer: StartResponse) -> None:
        """The run's meta.json and submission.json, before it is queued."""
        save_start_meta(root, body.name, body.tags, body.note)
        if key is not None:
            svc.submit_keys.record(root, *key, answer.model_dump(exclude={"replayed"}))

    if not use_subprocess:
        check_disk_space(svc.scheduler.runs_dir, "start a run")
        run_id = await _start_in_process(svc, graph, config, overlay)
        answer = StartResponse(run_id=run_id, status=RunStatus.RUNNING, via_subprocess=False)
        created(svc.runs.run_dir(run_id).root, answer)
        return answer
    ray = config.engine == "ray"  # the Ray engine runs its own model actors
    urls = {} if ray else await borrow_shared(svc.registry, resolver, graph)
    models = {n: resolver.manifest(n).resources for n in resolver.shared_in(graph)} if ray else {}
    spec = RunSpec(
        config=config,
        scheduling=SpecScheduling(
            marginal_vram_mb=body.marginal_vram_mb,
            exclusive_gpu=body.exclusive_gpu,
            priority=body.priority,
            model_resources=models,  # what its placement group reserves for them
        ),
        graph=graph.model_dump(mode="json"),
        shared_nodesets=sorted(urls),
        active_workspace_dir=None if overlay is None else str(overlay),
    )

    def queued_answer(root: Path) -> StartResponse:
        return StartResponse(run_id=root.name, status=RunStatus.QUEUED, via_subprocess=True)

    try:
        run_id = svc.scheduler.submit(spec, urls, lambda root: created(root, queued_answer(root)))
    except AgentCanvasError:
        svc.registry.release_shared_nodesets(sorted(urls))
        raise
    svc.request_tick()
    return StartResponse(run_id=run_id, status=RunStatus.QUEUED, via_subprocess=True)


def _check_tasks(
    resolver: WorkspaceComponentRegistry, graph: Graph, tasks: list[str] | None
) -> None:
    """Unknown tasks are a 422 naming the valid ones, before anything is queued."""
    try:
        check_tasks(resolver, graph, tasks)
    except ConfigError as exc:
        error = {"loc": ("body", "tasks"), "msg": str(exc), "type": "value_error", "input": tasks}
        raise RequestValidationError([error]) from exc


async def _start_in_process(
    svc: ProcessServices, graph: Graph, config: EvalConfig, overlay: Path | None
) -> str:
    """The legacy in-process path: a fresh registry borrowing the backend's shared servers."""
    run_dir = new_run_dir(svc.scheduler.runs_dir)
    registry = run_registry(scanned_catalogue(svc.workspace, overlay), run_dir)
    ray = config.engine == "ray"  # the Ray engine runs its own model actors
    urls = {} if ray else await borrow_shared(svc.registry, registry, graph)
    engine = select_engine(config)

    async def go() -> None:
        try:
            await run_foreground(
                registry,
                graph,
                config,
                broadcast=svc.broadcast,
                run_dir=run_dir,
                shared_urls=urls,
                engine=engine,
            )
        finally:
            svc.registry.release_shared_nodesets(sorted(urls))

    svc.inprocess.start(go(), name=run_dir.root.name)  # a failure is logged and recorded
    return run_dir.root.name


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
    summary["waiting_reason"] = svc.scheduler.waiting_reasons.get(run_id)
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
    graph = spec.graph_model(source=f"run {run_id} spec.json")
    ray = spec.config.engine == "ray"  # the Ray engine runs its own model actors
    urls = {} if ray else await svc.registry.ensure_shared_nodesets_for_graph(graph)
    try:
        svc.scheduler.resume(run_id, urls, sorted(urls))
    except StateError:
        svc.registry.release_shared_nodesets(sorted(urls))
        raise
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
) -> dict[str, Any]:
    query = RunQuery(text=q, tag=tag)
    return services(request).runs.list(offset, limit, status, query)


@router.get("/runs/{run_id}/episodes", responses=NOT_FOUND)
async def list_episodes(
    run_id: RunId,
    request: Request,
    offset: int = Query(0, ge=0, le=MAX_EPISODE_INDEX),
    limit: int = Query(100, ge=1, le=1000),
    status: str | None = Query(None, max_length=32),
    sort: str = Query("index:asc", pattern=r"^(index|steps|status|task):(asc|desc)$"),
    outcome: runs.Outcome | None = None,
    task: str | None = Query(None, max_length=128, description="Only this task's episodes."),
) -> dict[str, Any]:
    """A page of episode records; ``outcome`` error = not completed, failure = success 0."""
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
    svc = services(request)
    left, right = svc.runs.summary(a), svc.runs.summary(b)
    # in a thread: the sequential verdict's simulation may take a few hundred ms
    return await asyncio.to_thread(runs.compare_runs, left, right)


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
