"""``POST /api/eval/v2/start``: queue a run (or run it in the backend), safe to retry.

The body is :class:`StartRequest`; the run is queued at once (its shared models are started
afterwards, off the request: :mod:`agentcanvas.api.shared_loads`), and an
``Idempotency-Key`` makes a retried start find the run of the first (:mod:`.idempotency`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, Header, Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, Field, ValidationError

from agentcanvas import envsettings
from agentcanvas.cluster import select_engine
from agentcanvas.errors import ConfigError
from agentcanvas.eval.config import (
    EvalConfig,
)
from agentcanvas.eval.foreground import run_foreground
from agentcanvas.eval.run_setup import new_run_dir, run_registry, scanned_catalogue
from agentcanvas.eval.run_spec import RunSpec, SpecScheduling
from agentcanvas.eval.run_state import RunStatus
from agentcanvas.eval.runner import episode_tasks
from agentcanvas.eval.stopping import check_baseline_tasks, load_baseline
from agentcanvas.eval.store import check_disk_space
from agentcanvas.eval.tasks import check_tasks
from agentcanvas.graph.model import Graph
from agentcanvas.server.registry import WorkspaceComponentRegistry

from .idempotency import IDEMPOTENCY_HEADER, KEY_PATTERN, body_fingerprint
from .models import (
    error_responses,
)
from .overlay import (
    borrow_shared,
    borrowed_names,
    check_overlay,
    overlay_registry,
)
from .run_detail import save_start_meta
from .services import ProcessServices
from .start_request import StartRequest

__all__ = ["IdempotencyKey", "StartRequest", "StartResponse", "router", "start_run"]

router = APIRouter(prefix="/api/eval/v2", tags=["eval"], responses=error_responses(400, 403, 422))


class StartResponse(BaseModel):
    run_id: str
    status: str
    via_subprocess: bool
    replayed: bool = Field(
        default=False,
        description=f"True when the {IDEMPOTENCY_HEADER} of an earlier start with the same "
        "body named this run: this is that start's answer, and nothing new was created.",
    )


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
    return await start_run(request.app.state.services, body, idempotency_key)


async def start_run(
    svc: ProcessServices,
    body: StartRequest,
    idempotency_key: str | None,
    graph: Graph | None = None,
) -> StartResponse:
    """Queue (or run) ``body``'s run, as ``POST /start`` does; ``graph``: the graph to run
    instead of the one named ``graph_name`` in the workspace (a retry runs the original's
    frozen graph), validated against the node sets first."""
    if idempotency_key is None:
        return await _start(svc, body, None, graph)
    fingerprint = body_fingerprint(body)
    async with svc.submit_keys.claim(idempotency_key, fingerprint) as earlier:
        if earlier is not None:
            return StartResponse.model_validate({**earlier.response, "replayed": True})
        return await _start(svc, body, (idempotency_key, fingerprint), graph)


async def _start(
    svc: ProcessServices,
    body: StartRequest,
    key: tuple[str, str] | None,
    frozen: Graph | None = None,
) -> StartResponse:
    overlay = None
    resolver = svc.registry
    if body.active_workspace_dir is not None:
        overlay = check_overlay(svc.workspace, body.active_workspace_dir)
        resolver = overlay_registry(svc.workspace, overlay)
    options = body.run_options()
    if frozen is None:
        graph = resolver.load_graph(options["graph_name"])
    else:
        resolver.validate(frozen)
        graph = frozen
    _check_tasks(resolver, graph, options["tasks"])
    try:
        config = EvalConfig(**options)
    except ValidationError as exc:  # a rule of EvalConfig across fields (its validators)
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
        # Borrowed from the backend; started for the run once it is queued (shared_loads).
        shared_nodesets=[] if ray else borrowed_names(resolver, graph),
        active_workspace_dir=None if overlay is None else str(overlay),
    )

    def queued_answer(root: Path) -> StartResponse:
        return StartResponse(run_id=root.name, status=RunStatus.QUEUED, via_subprocess=True)

    run_id = svc.scheduler.submit(spec, {}, lambda root: created(root, queued_answer(root)))
    svc.loads.start_pending()
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
    """The legacy in-process path: a fresh registry borrowing the backend's shared servers
    (this start waits for them to load: only queued runs load theirs after the answer)."""
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
