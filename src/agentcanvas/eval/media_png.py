"""Episodes of older runs, whose frames are PNG files: their video, made on request.

Before frames were recorded as video while an episode ran, each frame was a PNG in the
episode's ``assets/`` (``step{step:04d}_{view}.png``). Such a folder still plays: its video is
encoded from the PNGs on first request (with the recorder's own encoder) and cached as
``video.mp4`` beside ``episode.json`` (written under a temporary name, then renamed: a reader
never sees half a file).
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Final

import numpy as np
from PIL import Image

from agentcanvas.nodes.frame_video import VideoEncoder, video_fps

__all__ = ["PNG_FRAME_RE", "VIDEO_NAME", "png_video", "read_png"]

VIDEO_NAME: Final = "video.mp4"
PNG_FRAME_RE: Final = re.compile(r"^step(\d+)_(.+)\.png$")


def read_png(path: Path) -> np.ndarray:
    """A PNG frame as H×W×3 uint8."""
    with Image.open(path) as image:
        return np.asarray(image.convert("RGB"))


def png_video(episode_dir: Path, frames: Sequence[Path]) -> Path:
    """The cached mp4 of ``frames`` (an older episode's PNGs, in order), made now if missing."""
    cached = episode_dir / VIDEO_NAME
    if cached.is_file():
        return cached
    first = read_png(frames[0])
    partial = episode_dir / f".{VIDEO_NAME}.{os.getpid()}.{id(frames)}.partial.mp4"
    encoder = VideoEncoder(partial, width=first.shape[1], height=first.shape[0])
    try:
        encoder.add(first)
        for path in frames[1:]:
            encoder.add(read_png(path))
    except BaseException:
        encoder.abort()
        raise
    encoder.finish(cached, video_fps(len(frames)))
    return cached
