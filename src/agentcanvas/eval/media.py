"""An episode's frames as media: which episodes keep them, recording them, reading them back.

Frames are never part of an episode's record, so what is kept changes no result:

- ``frames_mode``: ``every``, ``failures`` or ``none`` (``save_frames`` alone means
  ``every``). Under ``failures`` every episode renders, and the recording of an episode that
  succeeded is dropped as soon as it ends, before its ``episode.json`` is written, so a
  finished episode's frames are final. Whether an episode succeeded is read from its own
  record only (status ``completed`` and a ``success`` metric above 0), never from a worker
  or an order, so the same episodes keep frames at any worker count.
- :func:`recorded_frames`: one attempt at an episode records its frames, per view, as an
  H.264 mp4 encoded while it runs (:mod:`agentcanvas.nodes.assets`); what an earlier attempt
  (a retry, a resumed run) left is deleted first, and an attempt that does not finish leaves
  nothing.
- :func:`frame_views` reads both layouts of ``assets/``: the recorded one (``{view}.mp4``,
  which carries what its frames are) and the PNG frames of older runs
  (``step{step:04d}_{view}.png``).
- :func:`episode_video`: the main view's mp4, there already for a recorded episode; for an
  older run, made from its PNGs on first request and cached as ``video.mp4``
  (:mod:`agentcanvas.eval.media_png`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from agentcanvas.errors import AssetNotFoundError, DamagedRunError, StateError
from agentcanvas.eval.config import EpisodeResult, EvalConfig, FramesMode
from agentcanvas.eval.media_png import PNG_FRAME_RE, png_video
from agentcanvas.nodes.assets import (
    VIDEO_SUFFIX,
    EpisodeRecording,
    FrameIndex,
    close_recording,
    open_recording,
)
from agentcanvas.nodes.frame_video import read_note

__all__ = [
    "AttemptFrames",
    "FrameView",
    "clear_frames",
    "episode_video",
    "frame_views",
    "frames_mode",
    "has_frames",
    "keeps_frames",
    "main_view",
    "recorded_frames",
    "renders",
    "succeeded",
]


def frames_mode(config: EvalConfig) -> FramesMode:
    """The run's frames mode; ``save_frames`` without ``frames`` means ``every``."""
    if config.frames is not None:
        return config.frames
    return "every" if config.save_frames else "none"


def renders(config: EvalConfig) -> bool:
    """Whether episodes render frames at all (``every`` and ``failures`` both do)."""
    return frames_mode(config) != "none"


def succeeded(result: EpisodeResult) -> bool:
    """Completed with a ``success`` metric above 0; anything else did not succeed."""
    value = result.metrics.get("success")
    is_number = isinstance(value, int | float) and not isinstance(value, str)
    return result.status == "completed" and is_number and float(value) > 0  # type: ignore[arg-type]


def keeps_frames(config: EvalConfig, result: EpisodeResult) -> bool:
    """Whether the episode of ``result`` keeps its frames under the run's frames mode."""
    mode = frames_mode(config)
    return mode == "every" or (mode == "failures" and not succeeded(result))


# -- recording ----------------------------------------------------------------------------------


class AttemptFrames:
    """The frames one attempt at an episode is recording (none when it does not render)."""

    def __init__(self, recording: EpisodeRecording | None) -> None:
        self._recording = recording

    async def finish(self, keep: bool) -> None:
        """Write the videos (``keep``) or drop them; in a thread: it waits for ffmpeg."""
        recording, self._recording = self._recording, None
        if recording is None:
            return
        await asyncio.to_thread(recording.finish if keep else recording.abort)


@asynccontextmanager
async def recorded_frames(asset_dir: str) -> AsyncIterator[AttemptFrames]:
    """Record the frames saved into ``asset_dir`` while the block runs (nothing when it is
    ""); the block ends with ``finish``, else what was recorded is dropped. The frames an
    earlier attempt left in the folder are deleted first."""
    if not asset_dir:
        yield AttemptFrames(None)
        return
    await asyncio.to_thread(clear_frames, Path(asset_dir))
    frames = AttemptFrames(open_recording(asset_dir))
    try:
        yield frames
    finally:
        close_recording(asset_dir)
        await asyncio.shield(frames.finish(keep=False))  # no-op when the block finished it


def clear_frames(assets_dir: Path) -> int:
    """Delete every frame file of either layout in ``assets_dir``; how many went."""
    if not assets_dir.is_dir():
        return 0
    removed = 0
    for path in assets_dir.iterdir():
        name = path.name
        if PNG_FRAME_RE.match(name) or name.endswith(VIDEO_SUFFIX):  # partial ones too
            path.unlink(missing_ok=True)
            removed += 1
    return removed


# -- reading ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FrameView:
    """One view's frames in an episode's assets: a recorded mp4, or an older run's PNGs."""

    name: str
    steps: tuple[int, ...]
    video: Path | None = None  # recorded layout: the mp4
    index: FrameIndex | None = None  # recorded layout: its frames.json
    pngs: tuple[Path, ...] = ()  # PNG layout: one file per frame

    @property
    def layout(self) -> str:
        return "video" if self.video is not None else "png"


def frame_views(assets_dir: Path) -> dict[str, FrameView]:
    """The views with frames in ``assets_dir``, by name (both layouts; a view recorded as
    video wins over PNGs of the same name). DamagedRunError for an unreadable index."""
    if not assets_dir.is_dir():
        return {}
    pngs: dict[str, list[tuple[int, Path]]] = {}
    videos: list[Path] = []
    for path in assets_dir.iterdir():
        if path.is_symlink() or not path.is_file():  # frames are files: a link may lead anywhere
            continue
        found = PNG_FRAME_RE.match(path.name)
        if found:
            pngs.setdefault(found.group(2), []).append((int(found.group(1)), path))
        elif path.name.endswith(VIDEO_SUFFIX) and not path.name.startswith("."):
            videos.append(path)
    views = {
        name: FrameView(
            name, tuple(s for s, _ in sorted(files)), pngs=tuple(p for _, p in sorted(files))
        )
        for name, files in pngs.items()
    }
    for path in videos:
        index = _read_index(path)
        if index is not None:
            views[index.view] = FrameView(index.view, tuple(index.step_list()), path, index)
    return views


def _read_index(video: Path) -> FrameIndex | None:
    """The frames index ``video`` carries (None: an mp4 that is not a recording)."""
    note = read_note(video)
    if note is None:
        return None
    where = f"{video.parent.parent.name}/assets/{video.name}"
    try:
        index = FrameIndex.model_validate_json(note)
    except ValidationError as exc:
        raise DamagedRunError(f"{where}: its frames index does not read ({exc})") from exc
    if len(index.step_list()) != index.frames or f"{index.view}{VIDEO_SUFFIX}" != video.name:
        raise DamagedRunError(f"{where}: its frames index does not match the file")
    return index


def main_view(views: dict[str, FrameView]) -> FrameView | None:
    """The view an episode's video shows: ``env`` when there is one, else the first by name."""
    if not views:
        return None
    return views.get("env") or views[sorted(views)[0]]


def has_frames(assets_dir: Path) -> bool:
    """Whether ``assets_dir`` holds frames that can be shown (a damaged index: no)."""
    try:
        return bool(frame_views(assets_dir))
    except DamagedRunError:
        return False


def episode_video(episode_dir: Path, what: str) -> Path:
    """The mp4 of the episode in ``episode_dir`` (its main view); ``what`` names it in errors.

    A recorded episode's video is served as it was written. An older run's is made from its
    PNG frames on first request (then cached). AssetNotFoundError (404) when the episode has
    no frames; StateError (409) while it has not ended (its frames may still change)."""
    if not (episode_dir / "episode.json").is_file():
        raise StateError(f"{what} has not ended yet: its video is there once it ends")
    view = main_view(frame_views(episode_dir / "assets"))
    if view is None:
        raise AssetNotFoundError(
            f"{what} has no frames, so its video does not exist (runs keep frames with "
            "--save-frames or --frames every|failures; under failures an episode that "
            "succeeded keeps none)"
        )
    if view.video is not None:
        return view.video
    return png_video(episode_dir, view.pngs)
