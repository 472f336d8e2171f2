"""An episode's video (to play and to download) and the run's first failure videos.

The mp4 is made from the episode's frames on first request and cached in its folder
(:mod:`agentcanvas.eval.media`); encoding runs in a thread, so the backend keeps serving.
An episode without frames is a 404 that says why.
"""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import FileResponse

from agentcanvas.eval.media import episode_video, frame_files

from . import runs
from .models import EpisodeIndex, RunId, error_responses

router = APIRouter(prefix="/api/eval/v2", tags=["eval"], responses=error_responses(400, 403, 422))

MAX_FAILURE_VIDEOS = 24
MAX_SCANNED_FAILURES = 500  # bounds the folder reads of one request on a huge run
_MP4: dict[int | str, dict[str, Any]] = {
    200: {"content": {"video/mp4": {}}, "description": "The episode's frames as an H.264 mp4."}
}


@router.get(
    "/runs/{run_id}/episodes/{index}/video.mp4",
    response_class=FileResponse,
    responses={**error_responses(404, 409), **_MP4},
)
async def episode_video_file(
    run_id: RunId,
    index: EpisodeIndex,
    request: Request,
    download: bool = Query(False, description="Serve as an attachment (a file to save)."),
) -> FileResponse:
    """The episode's video, made on first request; 404 naming why when it has no frames."""
    run_dir = request.app.state.services.runs.run_dir(run_id)
    folder = runs.episode_folder(run_dir, index)
    what = f"episode {index} of run {run_id}"
    path = await asyncio.to_thread(episode_video, folder, what)
    filename = f"{run_id}_ep{index:04d}.mp4"
    return FileResponse(
        path,
        media_type="video/mp4",
        filename=filename,
        content_disposition_type="attachment" if download else "inline",
    )


@router.get("/runs/{run_id}/failure_videos", responses=error_responses(404))
async def failure_videos(
    run_id: RunId,
    request: Request,
    limit: int = Query(6, ge=1, le=MAX_FAILURE_VIDEOS),
) -> dict[str, Any]:
    """The first ``limit`` episodes (by index) that did not succeed and kept frames, each
    with its video's URL; ``failed`` counts every episode that ended without succeeding (a
    cancelled one did not end: it is neither a failure nor an error)."""
    svc = request.app.state.services
    summary = svc.runs.summary(run_id)
    run_dir = svc.runs.run_dir(run_id)
    failed = [e for e in summary.get("episodes", []) if _ended_unsuccessful(e)]
    shown: list[dict[str, Any]] = []
    for episode in failed[:MAX_SCANNED_FAILURES]:
        if len(shown) == limit:
            break
        index = int(episode["index"])
        folder = runs.episode_folder(run_dir, index)
        if not (folder / "episode.json").is_file() or not frame_files(folder / "assets"):
            continue
        shown.append(
            {
                **{k: episode.get(k) for k in ("index", "task", "episode_index", "status")},
                "outcome": "failure" if episode.get("status") == "completed" else "error",
                "steps": episode.get("steps"),
                "video": f"/api/eval/v2/runs/{run_id}/episodes/{index}/video.mp4",
            }
        )
    return {
        "run_id": run_id,
        "frames": _frames_of(summary),
        "failed": len(failed),
        "videos": shown,
    }


def _succeeded(episode: dict[str, Any]) -> bool:
    """Completed with a success metric above 0 (the rule frames ``failures`` keeps by)."""
    success = (episode.get("metrics") or {}).get("success")
    above_zero = isinstance(success, int | float) and success > 0  # True counts as 1
    return episode.get("status") == "completed" and above_zero


def _ended_unsuccessful(episode: dict[str, Any]) -> bool:
    """A task failure or an error; not a success, and not an episode cut short by a cancel."""
    return episode.get("status") != "cancelled" and not _succeeded(episode)


def _frames_of(summary: dict[str, Any]) -> str:
    """The run's frames mode: ``frames``, else every when ``save_frames``, else none."""
    config = summary.get("config") or {}
    return str(config.get("frames") or ("every" if config.get("save_frames") else "none"))
