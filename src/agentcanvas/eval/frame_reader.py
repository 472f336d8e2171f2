"""One frame of an episode's view as a PNG: what the frame scrubber shows.

An older run's frame is its PNG file. A recorded view's frame is decoded from its mp4: the
whole stretch between two keyframes at once (ffmpeg decodes from the keyframe anyway), kept
in memory, so that stepping through frames or playing them costs one ffmpeg run per
``KEYFRAME_EVERY`` frames. The kept stretches are bounded in bytes; the least recently used
goes first.
"""

from __future__ import annotations

import io
import threading
from collections import OrderedDict
from typing import Final

import numpy as np
from PIL import Image, UnidentifiedImageError

from agentcanvas.errors import AssetNotFoundError, DamagedRunError, RunError
from agentcanvas.eval.media import FrameView
from agentcanvas.nodes.frame_video import KEYFRAME_EVERY, decode_frames

__all__ = ["FrameReader"]

MAX_CACHED_BYTES: Final = 64 << 20
_Key = tuple[str, int, int, int]  # the mp4's path, mtime, size; the stretch's number


class FrameReader:
    """Frames as PNG bytes, recorded stretches decoded once and kept up to ``max_bytes``."""

    def __init__(self, max_bytes: int = MAX_CACHED_BYTES) -> None:
        self.max_bytes = max_bytes
        self.decodes = 0  # ffmpeg runs so far (what the cache saves is countable)
        self._kept: OrderedDict[_Key, list[np.ndarray]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def png(self, view: FrameView, position: int, what: str) -> bytes:
        """Frame ``position`` (0 = the first) of ``view`` as PNG; ``what`` names the view in
        errors. AssetNotFoundError past the last frame, DamagedRunError for a file that does
        not read."""
        if not 0 <= position < len(view.steps):
            raise AssetNotFoundError(
                f"{what} has {len(view.steps)} frame(s): no frame {position} (0-based)"
            )
        if view.video is None:
            return _png_file(view, position, what)
        return _encoded(self._frame(view, position, what))

    def _frame(self, view: FrameView, position: int, what: str) -> np.ndarray:
        assert view.video is not None and view.index is not None
        stat = view.video.stat()
        stretch = position // KEYFRAME_EVERY
        key = (str(view.video), stat.st_mtime_ns, stat.st_size, stretch)
        with self._lock:
            frames = self._kept.get(key)
            if frames is not None:
                self._kept.move_to_end(key)
        if frames is None:
            frames = self._decode(view, stretch, what)
            self._keep(key, frames)
        offset = position - stretch * KEYFRAME_EVERY
        if offset >= len(frames):
            raise DamagedRunError(
                f"{what}: its video has fewer frames than its index says ({position} missing)"
            )
        return frames[offset]

    def _decode(self, view: FrameView, stretch: int, what: str) -> list[np.ndarray]:
        assert view.video is not None and view.index is not None
        index = view.index
        self.decodes += 1
        try:
            return decode_frames(
                view.video,
                stretch * KEYFRAME_EVERY,
                KEYFRAME_EVERY,
                index.fps,
                (index.width, index.height),
            )
        except RunError as exc:
            raise DamagedRunError(f"{what}: {exc}") from exc

    def _keep(self, key: _Key, frames: list[np.ndarray]) -> None:
        size = sum(frame.nbytes for frame in frames)
        with self._lock:
            if key in self._kept or size > self.max_bytes:
                return
            self._kept[key] = frames
            self._bytes += size
            while self._bytes > self.max_bytes:
                _, dropped = self._kept.popitem(last=False)
                self._bytes -= sum(frame.nbytes for frame in dropped)


def _encoded(frame: np.ndarray) -> bytes:
    out = io.BytesIO()
    Image.fromarray(frame).save(out, format="PNG", compress_level=1)  # fast: it is served now
    return out.getvalue()


def _png_file(view: FrameView, position: int, what: str) -> bytes:
    path = view.pngs[position]
    data = path.read_bytes()
    try:
        with Image.open(io.BytesIO(data)) as image:
            if image.format != "PNG":
                raise DamagedRunError(f"{what}: {path.name} is not a PNG")
    except (UnidentifiedImageError, OSError) as exc:
        raise DamagedRunError(f"{what}: {path.name} is not a readable PNG") from exc
    return data
