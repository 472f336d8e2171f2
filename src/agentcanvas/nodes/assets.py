"""Frame assets of an episode: one H.264 mp4 per view, recorded while the episode runs.

A view is the node that rendered the frames (``env``, or a ``core.recordFrame`` node). While
an episode's recording is open (:func:`open_recording`, by whoever runs the episode), every
frame of a view goes to that view's encoder (:mod:`agentcanvas.nodes.frame_video`); when the
recording finishes, the episode's ``assets/`` holds one file per view, ``{view}.mp4``, which
carries its :class:`FrameIndex` (the steps its frames belong to, the frame rate, the frames'
size) in a box players skip: one file, not two, as a short episode's frames take less than
a disk block. Nothing is in ``assets/`` until then but ``.{view}.partial.mp4``, which only an
unfinished recording leaves (and the next recording of the episode deletes).

With no recording open (a node tried on its own, a tool of a user) a frame is written as a
PNG, ``step{step:04d}_{node}.png``: the layout every run folder had before, which readers
still read.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import numpy as np
from PIL import Image
from pydantic import BaseModel, ConfigDict, Field

from agentcanvas.errors import RunError
from agentcanvas.nodes.base import CallContext
from agentcanvas.nodes.frame_video import VideoEncoder, video_fps
from agentcanvas.paths import check_name, safe_child

__all__ = [
    "INDEX_VERSION",
    "PARTIAL_SUFFIX",
    "VIDEO_SUFFIX",
    "EpisodeRecording",
    "FrameIndex",
    "close_recording",
    "open_recording",
    "save_frame",
]

log = logging.getLogger(__name__)

VIDEO_SUFFIX: Final = ".mp4"
PARTIAL_SUFFIX: Final = ".partial.mp4"
INDEX_VERSION: Final = 1

_OPEN: dict[str, EpisodeRecording] = {}  # asset_dir -> its episode's open recording
_OPEN_LOCK = threading.Lock()


def save_frame(frame: Any, ctx: CallContext) -> str:
    """Record ``frame`` (H×W×3 or H×W×4 uint8) as step ``ctx.step`` of the view ``ctx.node_id``
    in the episode's assets; the name of the file it goes to ("" when no asset folder is set)."""
    if not ctx.asset_dir:
        return ""
    array = np.asarray(frame)
    if array.ndim != 3 or array.shape[2] not in (3, 4) or array.dtype != np.uint8:
        raise ValueError(
            f"frame must be an HxWx3 uint8 array, got {array.dtype}{list(array.shape)}"
        )
    check_name("asset", f"{ctx.node_id}{PARTIAL_SUFFIX}", field="node_id")  # names its files
    with _OPEN_LOCK:
        recording = _OPEN.get(ctx.asset_dir)
    if recording is not None:
        return recording.add(ctx.node_id, ctx.step, array)
    return _save_png(array, ctx)


def _save_png(array: np.ndarray, ctx: CallContext) -> str:
    folder = Path(ctx.asset_dir)
    folder.mkdir(parents=True, exist_ok=True)
    name = check_name("asset", f"step{ctx.step:04d}_{ctx.node_id}.png", field="node_id")
    path = safe_child(folder, "asset", name, field="node_id")
    Image.fromarray(array).save(path)
    return path.name


class FrameIndex(BaseModel):
    """What the frames of one view's ``{view}.mp4`` are (the note the mp4 carries)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    version: int = Field(
        default=INDEX_VERSION, ge=1, le=INDEX_VERSION, description="Format version."
    )
    view: str = Field(description="The node that rendered the frames (its id).")
    frames: int = Field(ge=1, description="How many frames the video has.")
    fps: int = Field(ge=1, le=1000, description="The video's frame rate.")
    width: int = Field(ge=1, le=16384, description="Width of a frame as rendered, in pixels.")
    height: int = Field(ge=1, le=16384, description="Height of a frame as rendered, in pixels.")
    steps: list[tuple[int, int]] = Field(
        description="The step of each frame, in order: runs of consecutive steps [start, stop)."
    )

    def step_list(self) -> list[int]:
        """The step of each frame, in order."""
        return [step for start, stop in self.steps for step in range(start, stop)]


@dataclass
class _View:
    encoder: VideoEncoder
    steps: list[int] = field(default_factory=list)


class EpisodeRecording:
    """The frames of one episode, by view, while it runs: an encoder per view.

    Made by :func:`open_recording`; ended by exactly one of ``finish`` (the videos and their
    indexes are written) or ``abort`` (nothing is left), both blocking: call them off the event
    loop. A frame that cannot be recorded (ffmpeg failed) is logged and dropped with its view:
    what is recorded never changes an episode's result."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._views: dict[str, _View] = {}
        self._failed: set[str] = set()
        self._lock = threading.Lock()
        self._closed = False

    def add(self, view: str, step: int, frame: np.ndarray) -> str:
        """Queue ``frame`` as ``step`` of ``view``; the name of the view's video."""
        with self._lock:
            if self._closed or view in self._failed:
                return ""
            entry = self._views.get(view)
            if entry is None:
                entry = self._views[view] = self._start(view, frame)
            entry.steps.append(step)
            encoder = entry.encoder
        encoder.add(frame)  # outside the lock: it may wait for ffmpeg
        return f"{view}{VIDEO_SUFFIX}"

    def _start(self, view: str, frame: np.ndarray) -> _View:
        self.folder.mkdir(parents=True, exist_ok=True)
        partial = self.folder / f".{view}{PARTIAL_SUFFIX}"
        return _View(VideoEncoder(partial, width=frame.shape[1], height=frame.shape[0]))

    def _close(self) -> dict[str, _View]:
        with self._lock:
            self._closed = True
            views, self._views = self._views, {}
        return views

    def finish(self) -> list[str]:
        """Finish every view's video and write its index; the views that have frames."""
        finished = []
        for view, entry in sorted(self._close().items()):
            fps = video_fps(len(entry.steps))
            index = FrameIndex(
                view=view,
                frames=len(entry.steps),
                fps=fps,
                width=entry.encoder.width,
                height=entry.encoder.height,
                steps=step_runs(entry.steps),
            )
            target = self.folder / f"{view}{VIDEO_SUFFIX}"
            try:
                entry.encoder.finish(target, fps, note=index.model_dump_json().encode())
            except RunError as exc:
                log.warning("the frames of view %r in %s are lost: %s", view, self.folder, exc)
                continue
            finished.append(view)
        return finished

    def abort(self) -> None:
        """Stop every encoder and delete what they wrote (the frames are not kept)."""
        views = self._close()
        for entry in views.values():
            entry.encoder.abort()
        if views:  # the folder its first frame made goes too, when nothing else is in it
            with contextlib.suppress(OSError):
                self.folder.rmdir()


def step_runs(steps: list[int]) -> list[tuple[int, int]]:
    """``[0, 1, 2, 5, 6]`` as ``[(0, 3), (5, 7)]``: runs of consecutive steps, ``[start, stop)``."""
    runs: list[tuple[int, int]] = []
    for step in steps:
        if runs and runs[-1][1] == step:
            runs[-1] = (runs[-1][0], step + 1)
        else:
            runs.append((step, step + 1))
    return runs


def open_recording(asset_dir: str) -> EpisodeRecording:
    """Start recording the frames saved into ``asset_dir`` (one episode's assets folder);
    the caller ends it with ``finish`` or ``abort``, then :func:`close_recording`."""
    recording = EpisodeRecording(Path(asset_dir))
    with _OPEN_LOCK:
        if asset_dir in _OPEN:
            raise RuntimeError(f"frames of {asset_dir} are already being recorded")
        _OPEN[asset_dir] = recording
    return recording


def close_recording(asset_dir: str) -> None:
    """Frames saved into ``asset_dir`` from now on are not recorded (they become PNGs)."""
    with _OPEN_LOCK:
        _OPEN.pop(asset_dir, None)
