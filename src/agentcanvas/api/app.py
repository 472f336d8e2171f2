"""The backend app: ``create_app()`` with a lifespan that owns the process's services.

The lifespan scans the workspace, builds the JobScheduler (queue recovered from disk), and
drives the scheduler tick about once a second — and at once after a submit or cancel. The
shared node sets of queued runs (re-queued ones too) are started by ``SharedLoads`` in tasks
of their own, so the backend answers while models load. A
third loop does the Ray work of the scheduler's cluster reservations (placement groups of
queued Ray runs) in a worker thread, and asks for a tick when one of them changes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from pathlib import Path

from fastapi import FastAPI

from agentcanvas.paths import runs_dir
from agentcanvas.scheduler.calibration import CalibrationStore
from agentcanvas.scheduler.job_scheduler import JobScheduler
from agentcanvas.scheduler.jobs import SchedulerHooks
from agentcanvas.scheduler.samplers import default_samplers
from agentcanvas.scheduler.settings import AdmissionSettings
from agentcanvas.server.registry import WorkspaceComponentRegistry

from . import downloads, failures, leaderboard, media, misc, run_detail, start
from . import eval as eval_api
from .error_handlers import install_error_handlers
from .limits import BodyLimitMiddleware
from .method_not_allowed import install_method_not_allowed
from .progress import POLL_S
from .security import GuardMiddleware
from .services import ProcessServices
from .strict_json import StrictJSONResponse
from .web_mount import web_mount

log = logging.getLogger(__name__)
TICK_S = 1.0
CLUSTER_POLL_S = 0.5
CLUSTER_CLOSE_S = 30.0
INPROCESS_STOP_S = 10.0
LOOP_STOP_S = 5.0
WEB_DIR = Path(__file__).parent / "web"


def build_services(
    workspace: Path,
    backend_url: str,
    token: str | None,
    admission: AdmissionSettings | None = None,
) -> ProcessServices:
    registry = WorkspaceComponentRegistry(workspace=workspace)
    registry.scan_all()
    calibration = CalibrationStore(workspace / "outputs" / "calibration.json")
    admission = admission or AdmissionSettings.resolve()
    scheduler = JobScheduler(
        runs_dir(workspace),
        backend_url,
        default_samplers(admission.cpu_oversubscription),
        calibration,
        capacity_mb=admission.capacity_mb(),
        cwd=workspace,
    )
    svc = ProcessServices(workspace=workspace, registry=registry, scheduler=scheduler, token=token)
    scheduler.hooks = SchedulerHooks(
        canvas_locked=svc.guard.held,
        release_shared=lambda names: _release(svc, names),
        on_progress=svc.relay_progress,
        on_finished=svc.progress.finish,
    )
    return svc


def _release(svc: ProcessServices, names: list[str]) -> None:
    svc.registry.release_shared_nodesets(names)
    svc.request_tick()


async def _drain_pending_unloads(svc: ProcessServices) -> None:
    for name in sorted(svc.pending_unloads):
        refcount = svc.registry.shared_refcount(name)
        if not refcount:
            svc.pending_unloads.discard(name)
            if refcount is not None:
                await svc.registry.unload_shared(name)


async def _tick_loop(svc: ProcessServices) -> None:
    while True:
        try:
            svc.scheduler.tick()
            svc.loads.start_pending()  # runs re-queued or resumed since: their models
            await _drain_pending_unloads(svc)
        except Exception:  # the loop must outlive one bad tick
            log.exception("scheduler tick failed")
        _relay(svc)  # right after a spawn, before the new process can write an event
        svc.wake.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(svc.wake.wait(), timeout=TICK_S)


async def _cluster_loop(svc: ProcessServices) -> None:
    """Create, poll and remove the placement groups of Ray runs, off the event loop; a
    backend that never queues a Ray run never imports Ray."""
    cluster = svc.scheduler.cluster
    while True:
        if cluster.busy():
            try:
                changed = await asyncio.to_thread(cluster.refresh)
            except Exception:  # the loop must outlive one bad refresh (a lost cluster)
                log.exception("cluster reservations refresh failed")
            else:
                if changed:
                    svc.request_tick()
        await asyncio.sleep(CLUSTER_POLL_S)


def _relay(svc: ProcessServices) -> None:
    try:
        svc.progress.poll({k: j.job.run_dir.root for k, j in svc.scheduler.running.items()})
    except Exception:  # the live view must not stop the scheduler
        log.exception("progress relay failed")


async def _relay_loop(svc: ProcessServices) -> None:
    """Episode events of subprocess runs reach WebSocket clients within POLL_S or so."""
    while True:
        await asyncio.sleep(POLL_S)
        _relay(svc)


async def _shutdown(svc: ProcessServices) -> None:
    """In order: the loops (no admission after this), in-process runs (cancelled; their
    ``finally`` blocks write summaries and stop their servers), subprocess runs, servers."""
    await svc.loops.aclose(LOOP_STOP_S)
    await svc.loads.aclose(LOOP_STOP_S)  # what a load had borrowed is given back
    await svc.inprocess.aclose(INPROCESS_STOP_S)
    svc.scheduler.shutdown()
    if svc.scheduler.cluster.busy():  # remove the placement groups still held, leave Ray
        try:
            async with asyncio.timeout(CLUSTER_CLOSE_S):
                await asyncio.to_thread(svc.scheduler.cluster.close)
        except Exception:  # a lost cluster: its groups died with it
            log.exception("could not release the cluster reservations")
    await svc.registry.shutdown_all()


def create_app(
    workspace: Path,
    backend_url: str,
    token: str | None = None,
    allowed_hosts: set[str] | None = None,
    admission: AdmissionSettings | None = None,
) -> FastAPI:
    """The backend's FastAPI app (API, WebSocket, web page)."""

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        svc = build_services(workspace, backend_url, token, admission)
        app.state.services = svc
        requeued = svc.scheduler.recover()
        if requeued:
            log.info("re-queued %d run(s) after restart: %s", len(requeued), requeued)
        svc.loops.start(_tick_loop(svc), name="scheduler tick")
        svc.loops.start(_relay_loop(svc), name="progress relay")
        svc.loops.start(_cluster_loop(svc), name="cluster reservations")
        try:
            yield
        finally:
            await _shutdown(svc)

    app = FastAPI(
        title="AgentCanvas Batch Eval",
        version="0.1.0",
        lifespan=lifespan,
        default_response_class=StrictJSONResponse,
    )
    app.add_middleware(BodyLimitMiddleware)
    app.add_middleware(GuardMiddleware, allowed_hosts=allowed_hosts or set(), token=token)
    app.include_router(start.router)
    app.include_router(eval_api.router)
    app.include_router(downloads.router)
    app.include_router(media.router)
    app.include_router(leaderboard.router)
    app.include_router(run_detail.router)
    app.include_router(failures.router)
    app.include_router(misc.router)
    install_error_handlers(app)
    install_method_not_allowed(app)
    if WEB_DIR.is_dir():
        app.router.routes.append(web_mount(WEB_DIR))
    return app
