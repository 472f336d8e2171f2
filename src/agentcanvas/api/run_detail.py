"""Routes about one run beyond its summary: its name/tags/note and its episodes' distributions.

``GET/PATCH /runs/{run_id}/meta`` read and edit ``meta.json`` (strict JSON body, unknown
fields refused, a 422 naming the field; a damaged meta.json is a 422 naming it, and an edit
replaces it). ``GET /runs/{run_id}/distributions`` answers
histograms of each task's steps and return, and the step budgets the episodes ran under (the
effective budget, also when the config left it to the graph or the env).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request

from agentcanvas.errors import DamagedRunError
from agentcanvas.eval.run_index import read_checked_meta
from agentcanvas.eval.run_meta import MetaPatch, RunMeta, update_meta, write_meta

from .episode_stats import distributions
from .models import RunId, error_responses

__all__ = ["router", "save_start_meta"]

router = APIRouter(prefix="/api/eval/v2", tags=["eval"], responses=error_responses(400, 403, 422))


def save_start_meta(
    run_root: Path, name: str | None, tags: list[str] | None, note: str | None
) -> None:
    """Write a start request's name/tags/note, when any was given."""
    if name is not None or tags or note is not None:
        write_meta(run_root, RunMeta(name=name, tags=tags or [], note=note))


@router.get("/runs/{run_id}/meta", response_model=RunMeta, responses=error_responses(404))
async def get_meta(run_id: RunId, request: Request) -> RunMeta:
    """The run's name, tags and note (empty when none were set); 422 naming the field when
    meta.json is damaged."""
    root = request.app.state.services.runs.run_dir(run_id).root
    return read_checked_meta(root, f"run {run_id}: meta.json")


@router.patch("/runs/{run_id}/meta", response_model=RunMeta, responses=error_responses(404))
async def patch_meta(run_id: RunId, body: MetaPatch, request: Request) -> RunMeta:
    """Replace the fields given (``null`` clears one); the run's spec is never rewritten. A
    damaged meta.json is replaced (the edit starts from an empty meta)."""
    root = request.app.state.services.runs.run_dir(run_id).root
    try:
        read_checked_meta(root)
    except DamagedRunError:
        write_meta(root, RunMeta())
    return update_meta(root, body)


@router.get("/runs/{run_id}/distributions", responses=error_responses(404))
async def get_distributions(run_id: RunId, request: Request) -> dict[str, Any]:
    """Per task: histograms of steps and of the ``return`` metric; the step budgets used."""
    return distributions(request.app.state.services.runs.summary(run_id).get("episodes", []))
