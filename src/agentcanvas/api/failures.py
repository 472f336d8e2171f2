"""Why a run's episodes failed, and running them again: ``GET /runs/{run_id}/failures`` (the
report of :mod:`.failure_report`, as ``agentcanvas failures RUN --json`` prints it) and
``POST /retry/{run_id}`` (a new run of some of its episodes, with the same seeds, linked to
the original by ``retry_of``: :mod:`agentcanvas.eval.retry`).

A retry is queued like a start (:func:`.start.start_run`: same checks, same answer, an
``Idempotency-Key`` honoured) with the original's run options, scheduling and overlay, and
runs the original's frozen graph. The original's folder is only read.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, Request
from pydantic import BeforeValidator, Field, ValidationError

from agentcanvas import jsontext
from agentcanvas.errors import DamagedRunError, NotFoundError, UserInputError
from agentcanvas.eval.retry import SELECTION_KEYWORDS, original_graph, parse_selection, retry_config
from agentcanvas.eval.run_meta import RunName, RunNote, RunTags
from agentcanvas.eval.run_spec import RunSpec
from agentcanvas.eval.store import RunDir
from agentcanvas.graph.model import Graph

from .failure_report import FailureReport, failure_report
from .models import RequestModel, RunId, error_responses, integral
from .services import ProcessServices
from .start import IdempotencyKey, StartRequest, StartResponse, start_run

__all__ = ["RetryRequest", "retry_start", "router"]

router = APIRouter(prefix="/api/eval/v2", tags=["eval"], responses=error_responses(400, 403, 422))

# Bounds before the validator, or an optional field's schema loses them (as models.StepBudget).
WorkerCount = Annotated[int, Field(ge=1, le=64), BeforeValidator(integral)]
_WORDS = "; ".join(f"{word}: {meaning}" for word, meaning in SELECTION_KEYWORDS.items())


class RetryRequest(RequestModel):
    """Which episodes of a run to run again, and how the new run is named."""

    select: str = Field(
        min_length=1,
        max_length=2000,
        description=f"'errors', 'failures' or run indices like '3,17,40-45' ({_WORDS}).",
    )
    worker_count: WorkerCount | None = Field(
        default=None, description="Parallel workers, 1 to 64 (default: the original's)."
    )
    name: RunName | None = Field(default=None, description="A short name for the new run.")
    tags: RunTags | None = Field(default=None, description="Labels to filter runs by.")
    note: RunNote | None = Field(default=None, description="Free text about the new run.")


def _services(request: Request) -> ProcessServices:
    svc: ProcessServices = request.app.state.services
    return svc


@router.get("/runs/{run_id}/failures", response_model=FailureReport, responses=error_responses(404))
async def failures(run_id: RunId, request: Request) -> FailureReport:
    """The run's episodes that did not succeed, grouped by cause (largest group first), each
    group with its kind in words, its episodes, tasks, an example and its traceback."""
    summary = _services(request).runs.summary(run_id)
    return await asyncio.to_thread(failure_report, run_id, summary.get("episodes", []))


@router.post(
    "/retry/{run_id}",
    response_model=StartResponse,
    responses=error_responses(404, 409, 413, 507),
)
async def retry(
    run_id: RunId, body: RetryRequest, request: Request, idempotency_key: IdempotencyKey = None
) -> StartResponse:
    """Queue a new run of the episodes ``select`` names, with the original's seed (each
    episode starts as it did), graph and options, ``retry_of`` the original: answered as a
    start. 400 naming ``select`` when it is not a selection or names no episode."""
    svc = _services(request)
    run_dir = svc.runs.run_dir(run_id)
    start, graph = await asyncio.to_thread(retry_start, run_dir, body, svc.workspace)
    return await start_run(svc, start, idempotency_key, graph)


def retry_start(run_dir: RunDir, body: RetryRequest, workspace: Path) -> tuple[StartRequest, Graph]:
    """The start body and the frozen graph of a retry of ``body.select`` of the run in
    ``run_dir``; UserInputError naming ``select`` for a bad or empty selection."""
    graph = original_graph(run_dir)  # 404 without a spec; 400 naming its field if damaged
    try:
        config = retry_config(run_dir, parse_selection(body.select))
    except (NotFoundError, DamagedRunError):
        raise
    except UserInputError as exc:
        raise UserInputError(f"select: {exc}") from exc
    spec = RunSpec.read(run_dir)
    options = config.model_dump(mode="json", exclude={"version"})
    if body.worker_count is not None:
        options["worker_count"] = body.worker_count
    payload = {
        **options,
        "priority": spec.scheduling.priority,
        "marginal_vram_mb": spec.scheduling.marginal_vram_mb,
        "exclusive_gpu": spec.scheduling.exclusive_gpu,
        "active_workspace_dir": _overlay(spec, workspace),
        "name": body.name,
        "tags": body.tags,
        "note": body.note,
    }
    try:  # from JSON, as a start body arrives: the same rules, strictly
        start = StartRequest.model_validate_json(jsontext.dumps(payload))
    except ValidationError as exc:
        problem = exc.errors()[0]
        where = ".".join(map(str, problem["loc"]))
        raise UserInputError(
            f"run {run_dir.root.name}: its config cannot be queued over REST ({where}: "
            f"{problem['msg']}); retry it with `agentcanvas retry {run_dir.root.name}`"
        ) from exc
    return start, graph


def _overlay(spec: RunSpec, workspace: Path) -> str | None:
    """The original's overlay folder, relative to the workspace (as a start body names it)."""
    if spec.active_workspace_dir is None:
        return None
    folder = Path(spec.active_workspace_dir)
    if not folder.is_absolute():
        return str(folder)
    try:
        return str(folder.resolve().relative_to(workspace.resolve()))
    except ValueError as exc:
        raise UserInputError(
            f"the run's overlay {str(folder)!r} is not inside the workspace {str(workspace)!r}"
        ) from exc
