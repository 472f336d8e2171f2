"""The live event channel of a run in its own process: ``events.jsonl`` in the run folder.

The eval subprocess shares no memory with the backend, so its runner's events (one
``eval_episode_done`` and one ``eval_progress`` per episode) are appended to ``events.jsonl``
(:class:`EventLog`) and the backend tails that file (:class:`EventTail`) and pushes each line
to its WebSocket clients. ``eval_complete`` is not written: the backend sends it once, when it
has reaped the process and knows the run's final status.

Appends are whole lines in one ``write``; the reader keeps its offset at the last complete
line, so a line being written is read on the next poll, never half. Lines are the events'
wire form (:mod:`agentcanvas.eval.events`) and are read back as the same models; a line that
is not one (torn, or from another version) is skipped.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Final

from pydantic import ValidationError

from agentcanvas.errors import RunError
from agentcanvas.eval.events import LIVE_EVENT, EvalEpisodeDone, EvalProgress, LiveEvent
from agentcanvas.fileio import append_jsonl

__all__ = ["EVENTS_FILE", "RELAYED_TYPES", "EventLog", "EventTail", "events_path"]

EVENTS_FILE: Final = "events.jsonl"
RELAYED_TYPES: Final = (EvalEpisodeDone, EvalProgress)
MAX_READ_BYTES: Final = 4 << 20  # per poll; the rest waits for the next one
log = logging.getLogger(__name__)


def events_path(run_root: Path) -> Path:
    """``<run folder>/events.jsonl``."""
    return run_root / EVENTS_FILE


class EventLog:
    """A runner's ``broadcast`` in the eval subprocess: append relayed events to the file."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __call__(self, event: LiveEvent) -> None:
        if not isinstance(event, RELAYED_TYPES):
            return
        try:
            append_jsonl(self.path, event.wire())
        except RunError as exc:  # the live view misses an event; the records are on disk
            log.warning("live event not written: %s", exc)


class EventTail:
    """Reads the lines appended to an events file since the last read."""

    def __init__(self, path: Path, *, from_start: bool = False) -> None:
        self.path = path
        self.offset = 0 if from_start else _size(path)

    def read_new(self) -> list[LiveEvent]:
        """The complete lines added since the last call, as events (torn lines are skipped)."""
        size = _size(self.path)
        if size < self.offset:  # replaced or truncated: a new writer starts over
            self.offset = 0
        if size == self.offset:
            return []
        try:
            with self.path.open("rb") as handle:
                handle.seek(self.offset)
                data = handle.read(min(size - self.offset, MAX_READ_BYTES))
        except OSError:  # removed since the stat: nothing more to read
            return []
        end = data.rfind(b"\n")
        if end < 0:
            return []
        self.offset += end + 1
        return [event for line in data[:end].split(b"\n") if (event := _parse(line))]


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _parse(line: bytes) -> LiveEvent | None:
    try:
        return LIVE_EVENT.validate_json(line)
    except ValidationError:
        return None
