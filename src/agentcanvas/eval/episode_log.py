"""An episode's own files besides its record: the firing log written as the episode runs.

:class:`EpisodeLog` is the local engine's ``log.jsonl`` writer; whatever else writes an
episode's files (the Ray engine's shipped log and frames) implements :class:`EpisodeFiles`,
which the recorder calls in its thread before it writes the episode's ``episode.json``.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any, ClassVar, Protocol

from agentcanvas.errors import DiskFullError, RunError
from agentcanvas.fileio import encode_jsonl_line, make_dirs, write_error

__all__ = ["EpisodeFiles", "EpisodeLog"]


class EpisodeFiles(Protocol):
    """An episode's files besides its record, finished in the recording thread."""

    @property
    def nbytes(self) -> int:
        """Bytes held in memory until `write_rest` (what the recorder's queue counts)."""

    def write_rest(self) -> None:
        """Write what is not on disk yet (the episode's folder exists); raise RunError
        (DiskFullError for a full disk) when a write fails."""

    def discard(self) -> None:
        """The files will not be written (their record failed): let go of what is held."""


class EpisodeLog:
    """One episode's node firings for its log.jsonl, encoded as they happen and written in
    batches: at most FLUSH_AFTER_S after a firing (a timer on the event loop, so the lines
    before a node that hangs are on disk at once, for whoever watches the episode), when
    FLUSH_BYTES have gathered, and the rest in the recording thread, before the episode's
    episode.json — no ``write`` on the episode's path for a short episode, where there was
    one per firing (a write per firing cost more than the firing itself). The first write
    creates the episode's folder and truncates what an earlier attempt (a retry, a resume)
    left."""

    FLUSH_AFTER_S: ClassVar[float] = 0.01
    FLUSH_BYTES: ClassVar[int] = 256 * 1024

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lines = bytearray()
        self._fd: int | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._failure: RunError | None = None

    @property
    def nbytes(self) -> int:
        return len(self._lines)

    def record(self, entry: dict[str, Any]) -> None:
        if isinstance(self._failure, DiskFullError):  # the record's write reports it, and
            return  # the episode is left missing (resume runs it): no error of its own
        if self._failure is not None:  # a timed flush failed: the episode learns it here
            raise self._failure
        self._lines += encode_jsonl_line(self.path, entry)
        if len(self._lines) >= self.FLUSH_BYTES:
            try:
                self._flush()
            except DiskFullError as exc:
                self._failure = exc
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self.FLUSH_AFTER_S, self._timed)

    def _timed(self) -> None:
        self._timer = None
        try:
            self._flush()
        except RunError as exc:
            self._failure = exc

    def _flush(self, folder_made: bool = False) -> None:
        if not self._lines:
            return
        line = memoryview(bytes(self._lines))
        self._lines.clear()
        try:
            if self._fd is None:
                if not folder_made:
                    make_dirs(self.path.parent)
                flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_TRUNC
                self._fd = os.open(self.path, flags, 0o666)
            while line:
                line = line[os.write(self._fd, line) :]
        except OSError as exc:
            raise write_error(self.path, exc, "append to") from exc

    def finish(self) -> None:
        """The episode ended (on the loop's thread): no timed flush any more; from here on
        only `write_rest` touches the log, in the recording thread."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def write_rest(self) -> None:
        """Write what is left and close (the recording thread, after `finish`); an episode
        that fired nothing leaves no log (nor the one an earlier attempt left)."""
        try:
            if self._failure is not None:
                raise self._failure
            if self._lines:
                self._flush(folder_made=True)  # (the recorder made it: `EpisodeFiles`)
            elif self._fd is None:
                self.path.unlink(missing_ok=True)
        finally:
            self.discard()

    def discard(self) -> None:
        """Drop what is not written yet (an attempt that is retried) and close."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._lines.clear()
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)
