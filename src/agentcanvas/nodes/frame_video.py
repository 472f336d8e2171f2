"""One view's frames as an H.264 mp4, encoded while the episode runs, and read back.

:class:`VideoEncoder` pipes each frame (raw RGB) to an ffmpeg process (imageio-ffmpeg's
binary) that encodes it at once, so the episode's video exists the moment the episode ends:
nothing is encoded on request. The pipe is fed by the encoder's own thread (the event loop
never waits on ffmpeg, nor forks it), through a short queue: past ``MAX_QUEUED`` frames the
caller waits for ffmpeg instead of holding the episode in memory.

The frame rate is chosen at the end, from the number of frames (:func:`video_fps`: an episode
plays in about ten seconds): ffmpeg writes the mp4 at ``NOMINAL_FPS`` and :func:`_finalise`
rescales its track's clock in the header, in place (no second pass, no re-encoding). It also
appends the caller's note (what the frames are: :func:`read_note`) in a ``uuid`` box, which
players skip: one file per view holds both.

:func:`decode_frames` reads frames back for the frame scrubber (``-ss`` to the frame's time:
ffmpeg decodes from the keyframe before it; keyframes are ``KEYFRAME_EVERY`` frames apart).
H.264 4:2:0 is lossy: flat-colour frames and caption text come back with a PSNR above
``MIN_PSNR_DB`` (checked by the tests), a frame's size and order exactly. Failures (ffmpeg
missing or failing, a damaged file) are RunError naming the file.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import struct
import subprocess
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Final

import numpy as np

from agentcanvas.errors import RunError

__all__ = [
    "KEYFRAME_EVERY",
    "MIN_PSNR_DB",
    "NOMINAL_FPS",
    "VideoEncoder",
    "decode_frames",
    "read_note",
    "video_fps",
]

log = logging.getLogger(__name__)

NOMINAL_FPS: Final = 30
MIN_FPS: Final = 4
MAX_FPS: Final = 30
VIDEO_TARGET_S: Final = 10.0
KEYFRAME_EVERY: Final = 32  # a scrubbed frame is at most this many frames from a keyframe
MAX_QUEUED: Final = 8
MIN_PSNR_DB: Final = 30.0
CRF: Final = 23  # x264's default quality: captions stay crisp, flat areas cost nothing
_TRACK_TIMESCALE: Final = NOMINAL_FPS * 1000  # per frame 1000 ticks: any fps divides it
_FINISH_S: Final = 60.0
_DECODE_S: Final = 30.0


def video_fps(n_frames: int) -> int:
    """Frames per second that play an episode in about ``VIDEO_TARGET_S`` (4 to 30 fps)."""
    return int(min(MAX_FPS, max(MIN_FPS, round(n_frames / VIDEO_TARGET_S))))


def _ffmpeg() -> str:
    import imageio_ffmpeg  # imported on first use: only runs that keep frames need it

    return str(imageio_ffmpeg.get_ffmpeg_exe())


def _even(side: int) -> int:
    return side + (side % 2)


class VideoEncoder:
    """Frames of one view, ``width`` x ``height`` (the first frame's), into ``partial``.

    ``add`` queues a frame (padded or cropped to the size, sides made even for 4:2:0);
    ``finish`` closes the stream, sets the frame rate and renames the mp4 to its place;
    ``abort`` stops ffmpeg and deletes what it wrote. Exactly one of the two ends it."""

    def __init__(self, partial: Path, width: int, height: int) -> None:
        self.partial, self.width, self.height = partial, width, height
        self.frames = 0
        self._queue: queue.Queue[bytes | None] = queue.Queue(MAX_QUEUED)
        self._process: subprocess.Popen[bytes] | None = None
        self._error: str | None = None
        self._aborted = threading.Event()
        self._starting = threading.Lock()  # abort and ffmpeg's start: one sees the other
        self._thread = threading.Thread(target=self._feed, name=f"frames {partial.name}")
        self._thread.daemon = True  # joined by finish/abort; daemon only so a crash cannot hang
        self._thread.start()

    def add(self, frame: np.ndarray) -> None:
        """Queue ``frame`` (H×W×3 uint8); waits while ``MAX_QUEUED`` frames are queued."""
        if self._error is not None or self._aborted.is_set():
            return
        self._queue.put(self._fitted(frame).tobytes())  # a copy: the caller keeps its array
        self.frames += 1

    def _fitted(self, frame: np.ndarray) -> np.ndarray:
        """``frame`` as RGB of the view's size (a larger one cropped, a smaller one padded
        with black), then with even sides for 4:2:0 (its last row and column repeated: a
        black edge would bleed into the picture's colours)."""
        rgb = frame[..., :3]
        if rgb.shape[:2] != (self.height, self.width):
            out = np.zeros((self.height, self.width, 3), dtype=np.uint8)
            h, w = min(self.height, rgb.shape[0]), min(self.width, rgb.shape[1])
            out[:h, :w] = rgb[:h, :w]
            rgb = out
        pad = ((0, self.height % 2), (0, self.width % 2), (0, 0))
        return np.pad(rgb, pad, mode="edge") if any(p[1] for p in pad) else rgb

    def _command(self) -> list[str]:
        size = f"{_even(self.width)}x{_even(self.height)}"
        return [
            _ffmpeg(), "-hide_banner", "-loglevel", "error", "-y",
            "-f", "rawvideo", "-pix_fmt", "rgb24", "-s", size,
            "-framerate", str(NOMINAL_FPS), "-i", "pipe:0",
            "-c:v", "libx264", "-preset", "veryfast", "-crf", str(CRF),
            "-pix_fmt", "yuv420p", "-g", str(KEYFRAME_EVERY), "-threads", "1",
            # x264's settings banner is an SEI unit of ~700 bytes: most of a short clip's header
            "-bsf:v", "filter_units=remove_types=6",
            "-video_track_timescale", str(_TRACK_TIMESCALE),
            "-movflags", "+faststart", "-f", "mp4", str(self.partial),
        ]  # fmt: skip

    def _feed(self) -> None:
        """The encoder's thread: start ffmpeg, then write each queued frame to its stdin."""
        with self._starting:
            if not self._aborted.is_set():  # aborted before it started: it never starts
                try:
                    self._process = subprocess.Popen(
                        self._command(), stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                        stderr=subprocess.PIPE,
                    )  # fmt: skip
                except OSError as exc:
                    self._error = f"cannot start ffmpeg: {exc}"
        stdin = self._process.stdin if self._process is not None else None
        while (item := self._queue.get()) is not None:
            if stdin is None or self._error is not None or self._aborted.is_set():
                continue  # drain: a waiting add must not hang
            try:
                stdin.write(item)
            except OSError as exc:  # ffmpeg died: its stderr says why (read in finish)
                self._error = f"ffmpeg stopped taking frames: {exc}"
        if stdin is not None:
            _close_quietly(stdin)

    def finish(self, target: Path, fps: int, note: bytes = b"") -> None:
        """End the stream, wait for ffmpeg, set ``fps``, add ``note`` (:func:`read_note`),
        rename to ``target``; RunError when the video could not be made (nothing is left
        behind then)."""
        try:
            try:
                self._queue.put(None, timeout=_FINISH_S)
            except queue.Full as exc:
                raise RunError(f"ffmpeg took no frame for {_FINISH_S:g} s") from exc
            self._thread.join(_FINISH_S)
            process = self._process
            if process is None or self._thread.is_alive():
                raise RunError(self._error or "ffmpeg did not take the frames in time")
            try:
                process.wait(timeout=_FINISH_S)
            except subprocess.TimeoutExpired as exc:
                raise RunError(f"ffmpeg did not finish within {_FINISH_S:g} s") from exc
            if process.returncode != 0 or self._error is not None:
                raise RunError(f"{self._error or 'ffmpeg failed'}: {_said(process)}")
            _finalise(self.partial, fps, note)
            os.replace(self.partial, target)
            if process.stderr is not None:
                _close_quietly(process.stderr)
        except BaseException:
            self.abort()
            raise

    def abort(self) -> None:
        """Stop ffmpeg at once and delete the partial file (an episode whose frames go)."""
        with self._starting:
            self._aborted.set()
            process = self._process
        if process is not None and process.poll() is None:
            process.kill()
        try:  # wake the thread: with ffmpeg gone it drains the queue without writing
            self._queue.put(None, timeout=_FINISH_S)
        except queue.Full:
            log.warning("the frame thread of %s did not drain its queue", self.partial.name)
        self._thread.join(_FINISH_S)
        if process is not None:
            try:
                process.wait(timeout=_FINISH_S)
            except subprocess.TimeoutExpired:
                log.warning("ffmpeg (pid %d) did not exit after kill", process.pid)
            if process.stderr is not None:
                _close_quietly(process.stderr)
        self.partial.unlink(missing_ok=True)


def _said(process: subprocess.Popen[bytes]) -> str:
    """The end of what ffmpeg wrote to stderr (little: it logs errors only)."""
    if process.stderr is None:
        return ""
    return process.stderr.read().decode(errors="replace").strip()[-400:]


def _close_quietly(stream: IO[bytes]) -> None:
    with contextlib.suppress(OSError):  # ffmpeg already gone: finish reports its exit status
        stream.close()


# -- the frame rate, set in the mp4's header --------------------------------------------------

_CONTAINERS: Final = {b"moov", b"trak", b"mdia", b"edts"}
_NOTE_UUID: Final = uuid.uuid5(uuid.NAMESPACE_URL, "agentcanvas:frames-index").bytes
MAX_NOTE_BYTES: Final = 1 << 20


def _boxes(data: memoryview, start: int, end: int) -> Iterator[tuple[bytes, int, int]]:
    """``(type, payload start, box end)`` of each ISO-BMFF box between start and end."""
    at = start
    while at + 8 <= end:
        size, kind = struct.unpack_from(">I4s", data, at)
        header = 8
        if size == 1:
            (size,) = struct.unpack_from(">Q", data, at + 8)
            header = 16
        elif size == 0:
            size = end - at
        if size < header or at + size > end:
            raise RunError(f"mp4 box {kind!r} at {at} has a bad size {size}")
        yield kind, at + header, at + size
        at += size


def _finalise(path: Path, fps: int, note: bytes) -> None:
    """Make the mp4 at ``path`` (written at ``NOMINAL_FPS``) play at ``fps``, and append
    ``note`` in a box of its own. For the rate, the track's clock runs ``fps / NOMINAL_FPS``
    as fast, and the durations the movie's clock counts (movie, track, edit list) grow by the
    inverse; sample tables are left as they are, so the header keeps its size."""
    with path.open("r+b") as file:
        if fps != NOMINAL_FPS:
            data = bytearray(file.read())
            view = memoryview(data)
            found = _patch(view, 0, len(data), fps)
            view.release()
            if not {b"mvhd", b"tkhd", b"mdhd"} <= found:
                raise RunError(f"{path.name}: unexpected mp4 layout (found {sorted(found)})")
            file.seek(0)
            file.write(data)
        if note:
            file.seek(0, os.SEEK_END)
            file.write(struct.pack(">I4s", 8 + len(_NOTE_UUID) + len(note), b"uuid"))
            file.write(_NOTE_UUID + note)


def read_note(path: Path) -> bytes | None:
    """The note :meth:`VideoEncoder.finish` appended to the mp4 at ``path`` (None: none, or
    not an mp4). Reads the top-level box headers only, then the note."""
    with path.open("rb") as file:
        size_all = os.fstat(file.fileno()).st_size
        at = 0
        while at + 8 <= size_all:
            file.seek(at)
            size, kind = struct.unpack(">I4s", file.read(8))
            header = 8
            if size == 1:
                (size,) = struct.unpack(">Q", file.read(8))
                header = 16
            if size < header or at + size > size_all:
                return None
            if kind == b"uuid" and file.read(len(_NOTE_UUID)) == _NOTE_UUID:
                length = size - header - len(_NOTE_UUID)
                return file.read(length) if length <= MAX_NOTE_BYTES else None
            at += size
    return None


def _patch(data: memoryview, start: int, end: int, fps: int) -> set[bytes]:
    found: set[bytes] = set()
    for kind, body, box_end in _boxes(data, start, end):
        if kind in _CONTAINERS:
            found |= _patch(data, body, box_end, fps)
        elif kind in (b"mvhd", b"tkhd", b"mdhd", b"elst"):
            _patch_box(data, kind, body, fps)
            found.add(kind)
    return found


def _scaled(value: int, fps: int) -> int:
    return round(value * NOMINAL_FPS / fps)


def _patch_box(data: memoryview, kind: bytes, body: int, fps: int) -> None:
    wide = data[body] == 1  # version 1: 64-bit times and durations
    time_fmt, time_size = (">Q", 8) if wide else (">I", 4)
    if kind == b"elst":
        (count,) = struct.unpack_from(">I", data, body + 4)
        entry = body + 8
        for _ in range(count):  # segment_duration (movie clock), media_time, rate
            (segment,) = struct.unpack_from(time_fmt, data, entry)
            struct.pack_into(time_fmt, data, entry, _scaled(segment, fps))
            entry += 2 * time_size + 4
        return
    # mvhd / mdhd: creation, modification, timescale, duration; tkhd: creation,
    # modification, track id, reserved, duration.
    after_times = body + 4 + 2 * time_size
    if kind == b"tkhd":
        duration_at = after_times + 8
        (duration,) = struct.unpack_from(time_fmt, data, duration_at)
        struct.pack_into(time_fmt, data, duration_at, _scaled(duration, fps))
    elif kind == b"mvhd":
        (duration,) = struct.unpack_from(time_fmt, data, after_times + 4)
        struct.pack_into(time_fmt, data, after_times + 4, _scaled(duration, fps))
    else:  # mdhd: the track's clock; its duration counts its own ticks, unchanged
        (timescale,) = struct.unpack_from(">I", data, after_times)
        if timescale * fps % NOMINAL_FPS:
            raise RunError(f"track timescale {timescale} cannot run at {fps} fps")
        struct.pack_into(">I", data, after_times, timescale * fps // NOMINAL_FPS)


# -- reading frames back -----------------------------------------------------------------------


def decode_frames(
    path: Path, first: int, count: int, fps: int, size: tuple[int, int]
) -> list[np.ndarray]:
    """Frames ``first`` … ``first + count - 1`` (fewer at the end) of the mp4 at ``path``,
    played at ``fps``, each cropped to ``size`` (width, height: the frames as rendered)."""
    width, height = size
    coded = (_even(width), _even(height))
    command = [_ffmpeg(), "-hide_banner", "-loglevel", "error", "-nostdin"]
    if first > 0:  # half a frame early: the first frame at or after it is frame ``first``
        command += ["-ss", f"{(first - 0.5) / fps:.6f}"]
    command += ["-i", str(path), "-frames:v", str(count)]
    command += ["-f", "rawvideo", "-pix_fmt", "rgb24", "pipe:1"]
    try:
        done = subprocess.run(command, capture_output=True, timeout=_DECODE_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RunError(f"cannot decode {path.name}: {exc}") from exc
    if done.returncode != 0:
        said = done.stderr.decode(errors="replace").strip()[-400:]
        raise RunError(f"cannot decode {path.name}: {said}")
    frame_bytes = coded[0] * coded[1] * 3
    n = len(done.stdout) // frame_bytes
    frames = np.frombuffer(done.stdout, np.uint8, n * frame_bytes).reshape(n, coded[1], coded[0], 3)
    return [frames[i, :height, :width] for i in range(n)]
