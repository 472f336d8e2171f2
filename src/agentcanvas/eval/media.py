"""An episode's frames as media: which episodes keep them, and the episode's video.

Frames are never part of an episode's record, so what is kept changes no result:

- ``frames_mode``: ``every``, ``failures`` or ``none`` (``save_frames`` alone means
  ``every``). Under ``failures`` every episode renders, and the frames of an episode that
  succeeded are deleted as soon as it ends, before its ``episode.json`` is written, so a
  finished episode's frames are final. Whether an episode succeeded is read from its own
  record only (status ``completed`` and a ``success`` metric above 0), never from a worker
  or an order, so the same episodes keep frames at any worker count.
- ``episode_video``: the episode's frames as an H.264 mp4 (imageio + imageio-ffmpeg), made
  on first request once the episode has ended and cached as ``video.mp4`` in its folder
  (written to a temporary name, then renamed: a reader never sees half a file).
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Final

import numpy as np
from PIL import Image

from agentcanvas.errors import AssetNotFoundError, StateError
from agentcanvas.eval.config import EpisodeResult, EvalConfig, FramesMode

__all__ = [
    "VIDEO_NAME",
    "discard_unwanted_frames",
    "episode_video",
    "frame_files",
    "frames_mode",
    "renders",
    "succeeded",
    "video_fps",
]

VIDEO_NAME: Final = "video.mp4"
MIN_FPS: Final = 4
MAX_FPS: Final = 30
VIDEO_TARGET_S: Final = 10.0
SHARP_VIDEO_PX: Final = 400  # frames smaller than this are doubled in the video
_MACRO_BLOCK_PX: Final = 16  # H.264 in yuv420p wants even sides; 16 avoids ffmpeg's rescale
_FRAME_RE: Final = re.compile(r"^step(\d+)_(.+)\.png$")


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


def discard_unwanted_frames(config: EvalConfig, result: EpisodeResult, assets_dir: Path) -> int:
    """Under ``failures``, delete the frames of an episode that succeeded; how many went."""
    if frames_mode(config) != "failures" or not succeeded(result) or not assets_dir.is_dir():
        return 0
    removed = 0
    for path in assets_dir.iterdir():
        if _FRAME_RE.match(path.name):
            path.unlink(missing_ok=True)
            removed += 1
    return removed


def frame_files(assets_dir: Path) -> list[Path]:
    """The frames of the episode's main view (``env`` when there is one), by step."""
    views: dict[str, list[tuple[int, Path]]] = {}
    if assets_dir.is_dir():
        for path in assets_dir.iterdir():
            found = _FRAME_RE.match(path.name)
            if found and path.is_file():
                views.setdefault(found.group(2), []).append((int(found.group(1)), path))
    if not views:
        return []
    view = "env" if "env" in views else sorted(views)[0]
    return [path for _, path in sorted(views[view])]


def video_fps(n_frames: int) -> int:
    """Frames per second that play an episode in about ``VIDEO_TARGET_S`` (4 to 30 fps)."""
    return int(min(MAX_FPS, max(MIN_FPS, round(n_frames / VIDEO_TARGET_S))))


def episode_video(episode_dir: Path, what: str) -> Path:
    """The cached mp4 of the episode in ``episode_dir``, made now if missing.

    ``what`` names the episode in errors. AssetNotFoundError (404) when the episode has no
    frames; StateError (409) while it has not ended (its frames may still change)."""
    cached = episode_dir / VIDEO_NAME
    if cached.is_file():
        return cached
    if not (episode_dir / "episode.json").is_file():
        raise StateError(f"{what} has not ended yet: its video is made once it ends")
    frames = frame_files(episode_dir / "assets")
    if not frames:
        raise AssetNotFoundError(
            f"{what} has no frames, so its video does not exist (runs keep frames with "
            "--save-frames or --frames every|failures; under failures an episode that "
            "succeeded keeps none)"
        )
    _encode(frames, cached)
    return cached


def _encode(frames: Sequence[Path], target: Path) -> None:
    import imageio.v2 as imageio  # imported on first use: ffmpeg is only needed for videos

    partial = target.with_name(f".{target.stem}.{os.getpid()}.{id(frames)}.partial.mp4")
    try:
        first = _padded(_read(frames[0]), None)
        writer = imageio.get_writer(
            partial,
            format="FFMPEG",
            mode="I",
            fps=video_fps(len(frames)),
            codec="libx264",
            pixelformat="yuv420p",
            macro_block_size=1,
            ffmpeg_log_level="error",
        )
        with writer:
            writer.append_data(first)
            for path in frames[1:]:
                writer.append_data(_padded(_read(path), first.shape))
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)


def _read(path: Path) -> np.ndarray:
    """A frame as RGB, doubled (nearest neighbour) while small: H.264 blurs sharp cell edges
    of a small picture, and a browser enlarging it blurs them again."""
    with Image.open(path) as image:
        picture = np.asarray(image.convert("RGB"))
    while min(picture.shape[:2]) < SHARP_VIDEO_PX:
        picture = np.repeat(np.repeat(picture, 2, axis=0), 2, axis=1)
    return picture


def _padded(picture: np.ndarray, shape: tuple[int, ...] | None) -> np.ndarray:
    """``picture`` padded with black to ``shape`` (the first frame's), or else to sides that
    are multiples of 16; a larger frame is cropped to it."""
    if shape is None:
        height = -(-picture.shape[0] // _MACRO_BLOCK_PX) * _MACRO_BLOCK_PX
        width = -(-picture.shape[1] // _MACRO_BLOCK_PX) * _MACRO_BLOCK_PX
    else:
        height, width = shape[0], shape[1]
    out = np.zeros((height, width, 3), dtype=np.uint8)
    h, w = min(height, picture.shape[0]), min(width, picture.shape[1])
    out[:h, :w] = picture[:h, :w]
    return out
