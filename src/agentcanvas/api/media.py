"""An episode's video and frames (to play, scrub and download) and the run's failure videos.

A recorded episode's video was written while it ran (:mod:`agentcanvas.eval.media`): the
video route serves the file as it is. An older run's (PNG frames) is made on first request
and cached, in a thread, so the backend keeps serving. The frame scrubber lists an episode's
views (``…/frames``) and fetches one frame at a time as PNG (``…/frames/{view}/{position}``),
either layout. An episode without frames is a 404 that says why.
"""

from __future__ import annotations

import asyncio
import pathlib
import weakref
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import FileResponse, Response

from agentcanvas.errors import AssetNotFoundError
from agentcanvas.eval.frame_reader import FrameReader
from agentcanvas.eval.media import FrameView, episode_video, frame_views, has_frames, main_view
from agentcanvas.eval.store import RunDir
from agentcanvas.paths import check_name

from . import runs
from .models import EpisodeIndex, RunId, error_responses

router = APIRouter(prefix="/api/eval/v2", tags=["eval"], responses=error_responses(400, 403, 422))

MAX_FAILURE_VIDEOS = 24
MAX_SCANNED_FAILURES = 500  # bounds the folder reads of one request on a huge run
MAX_DECODES = 2  # ffmpeg runs at once for the scrubber: a dragged slider must not fork dozens
_READER = FrameReader()
_SLOTS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
    weakref.WeakKeyDictionary()
)
_MP4: dict[int | str, dict[str, Any]] = {
    200: {"content": {"video/mp4": {}}, "description": "The episode's frames as an H.264 mp4."}
}
_PNG: dict[int | str, dict[str, Any]] = {
    200: {"content": {"image/png": {}}, "description": "The frame as PNG."}
}
ViewName = Annotated[
    str,
    Path(
        min_length=1,
        max_length=100,
        description="A view: the node that rendered the frames (``env`` for the env).",
    ),
]
Position = Annotated[
    int, Path(ge=0, le=10_000_000, description="The frame's position in the view, from 0.")
]


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
    """The episode's video (its main view); 404 naming why when it has no frames."""
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


@router.get("/runs/{run_id}/episodes/{index}/frames", responses=error_responses(404))
async def episode_frames(run_id: RunId, index: EpisodeIndex, request: Request) -> dict[str, Any]:
    """The episode's views with frames: each view's steps, one per frame, in order; ``main``
    is the view its video shows (null: no frames)."""
    run_dir = request.app.state.services.runs.run_dir(run_id)
    views = await asyncio.to_thread(frame_views, _assets(run_dir, index))
    main = main_view(views)
    return {
        "run_id": run_id,
        "index": index,
        "main": main.name if main is not None else None,
        "views": [_view_json(views[name]) for name in sorted(views)],
    }


def _assets(run_dir: RunDir, index: int) -> pathlib.Path:
    """The episode's real assets folder; refused when a link leads out of the run folder."""
    runs.episode_folder(run_dir, index)
    return runs.served(run_dir, run_dir.episode_assets_dir(index))


def _decode_slots() -> asyncio.Semaphore:
    """This event loop's ``MAX_DECODES`` decoding slots."""
    loop = asyncio.get_running_loop()
    slots = _SLOTS.get(loop)
    if slots is None:
        slots = _SLOTS[loop] = asyncio.Semaphore(MAX_DECODES)
    return slots


def _view_json(view: FrameView) -> dict[str, Any]:
    index = view.index
    return {
        "view": view.name,
        "layout": view.layout,
        "frames": len(view.steps),
        "steps": list(view.steps),
        "fps": index.fps if index is not None else None,
        "width": index.width if index is not None else None,
        "height": index.height if index is not None else None,
    }


@router.get(
    "/runs/{run_id}/episodes/{index}/frames/{view}/{position}",
    response_class=Response,
    responses={**error_responses(404), **_PNG},
)
async def episode_frame(
    run_id: RunId, index: EpisodeIndex, view: ViewName, position: Position, request: Request
) -> Response:
    """Frame ``position`` of ``view`` as PNG (what the frame scrubber shows)."""
    check_name("asset", view, field="view")
    run_dir = request.app.state.services.runs.run_dir(run_id)
    views = await asyncio.to_thread(frame_views, _assets(run_dir, index))
    found = views.get(view)
    what = f"view {view!r} of episode {index} of run {run_id}"
    if found is None:
        shown = ", ".join(sorted(views)) or "none"
        raise AssetNotFoundError(f"{what} has no frames (views with frames: {shown})")
    async with _decode_slots():
        data = await asyncio.to_thread(_READER.png, found, position, what)
    return Response(data, media_type="image/png", headers={"Cache-Control": "private, max-age=60"})


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
        if not (folder / "episode.json").is_file() or not has_frames(folder / "assets"):
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
