"""Downloads of a run: its summary.json (with every episode record) and an episodes CSV.

Both follow the one rule of :func:`agentcanvas.eval.records.episode_records` through the
API's run cache: a complete summary's records, else the live ``episodes.jsonl`` index, so a
run still going downloads what it has. The CSV has one row per episode (see
:mod:`agentcanvas.export`); a missing or non-finite value is an empty cell.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from agentcanvas.export import csv_text, episode_rows

from .models import RunId, error_responses
from .strict_json import StrictJSONResponse

router = APIRouter(prefix="/api/eval/v2", tags=["eval"], responses=error_responses(400, 403, 422))

_CSV: dict[int | str, dict[str, Any]] = {
    200: {
        "content": {"text/csv": {"schema": {"type": "string"}}},
        "description": "One row per episode, header first.",
    }
}
_JSON: dict[int | str, dict[str, Any]] = {
    200: {
        "content": {"application/json": {"schema": {"type": "object"}}},
        "description": "The run summary with every episode record, as a file.",
    }
}


def _attachment(filename: str) -> dict[str, str]:
    return {"Content-Disposition": f'attachment; filename="{filename}"'}


@router.get(
    "/runs/{run_id}/summary.json",
    response_class=JSONResponse,
    responses={**error_responses(404), **_JSON},
)
async def download_summary(run_id: RunId, request: Request) -> StrictJSONResponse:
    """The run's summary with every episode record (``episodes_complete`` false while it
    runs), as an attachment."""
    summary = request.app.state.services.runs.summary(run_id)
    return StrictJSONResponse(summary, headers=_attachment(f"{run_id}_summary.json"))


@router.get(
    "/runs/{run_id}/episodes.csv",
    response_class=JSONResponse,
    responses={**error_responses(404), **_CSV},
)
async def download_episodes_csv(run_id: RunId, request: Request) -> Response:
    """The run's episodes as CSV, one row each (``run_id``, ``graph_name``, the record's
    fields, ``metric_<name>`` per metric), as an attachment."""
    summary = request.app.state.services.runs.summary(run_id)
    text = csv_text(episode_rows(summary, summary.get("episodes", [])))
    return Response(
        text,
        media_type="text/csv; charset=utf-8",
        headers=_attachment(f"{run_id}_episodes.csv"),
    )
