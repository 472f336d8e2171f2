"""Per-episode records of a run: the append-only ``episodes.jsonl`` index and its readers.

Where a run's per-episode records live (issue 13: flat cost per episode at any run size):

- ``episodes/ep{idx:04d}/episode.json`` is the durable record of one episode: written
  atomically (fsync) when the episode ends, before anything else mentions it.
- ``episodes.jsonl`` in the run folder indexes them: one line per record (exactly
  ``EpisodeResult.model_dump(mode="json")``, as in summary.json), appended in completion
  order right after the episode.json, in one ``write`` and without fsync (the episode.json
  files are the durable copy; the index can always be rebuilt from them). A run starts its
  index afresh, holding the results it resumes from; a retry or a resumed episode appends
  a newer line for the same index, and readers keep the last line per index and sort by
  index. A torn last line (a writer killed mid-line) is skipped and counted.
- ``summary.json`` carries the records only once the run has ended: while it runs the
  summary holds counts and aggregates, ``episodes: []`` and ``episodes_complete: false``;
  the final summary holds every record, sorted by index, with ``episodes_complete: true``.
  :func:`episode_records` is the one rule readers follow: the summary's records when it is
  complete, else the index. A summary without the field (older runs, pending runs) is
  complete.

Resume rebuilds its results from the episode folders (:func:`recorded_results`), which are
the truth even when a crash tore the index or the summary; :class:`IndexTail` follows a
live index cheaply (each poll parses only what was appended since the last).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from agentcanvas.errors import RunError
from agentcanvas.eval.config import EpisodeResult
from agentcanvas.eval.store import RunDir
from agentcanvas.fileio import (
    append_jsonl_bytes,
    atomic_write_bytes,
    encode_jsonl_line,
    parse_jsonl_line,
    read_json,
)

__all__ = [
    "IndexRead",
    "IndexTail",
    "append_line",
    "append_record",
    "episode_records",
    "index_line",
    "read_index",
    "recorded_results",
    "start_index",
    "summary_is_complete",
]

log = logging.getLogger(__name__)


def start_index(run_dir: RunDir, results: Iterable[EpisodeResult]) -> None:
    """Write the index afresh, holding ``results`` sorted by index (none: an empty file)."""
    path = run_dir.episodes_index_path
    ordered = sorted(results, key=lambda r: r.index)
    atomic_write_bytes(path, b"".join(encode_jsonl_line(path, _record(r)) for r in ordered))


def append_record(run_dir: RunDir, result: EpisodeResult) -> None:
    """Append one episode's record to the index (one ``write``; no fsync, see module doc)."""
    append_line(run_dir, index_line(run_dir, _record(result)))


def append_line(run_dir: RunDir, line: bytes) -> None:
    """Append a record `index_line` encoded (the same as `append_record`)."""
    append_jsonl_bytes(run_dir.episodes_index_path, line)


def index_line(run_dir: RunDir, record: Mapping[str, Any]) -> bytes:
    """The index line of ``record`` (``EpisodeResult.model_dump(mode="json")``)."""
    return encode_jsonl_line(run_dir.episodes_index_path, record)


def _record(result: EpisodeResult) -> dict[str, Any]:
    return result.model_dump(mode="json")


def _valid_index(record: Mapping[str, Any]) -> int | None:
    index = record.get("index")
    if isinstance(index, bool) or not isinstance(index, int) or index < 0:
        return None
    return index


@dataclass(frozen=True)
class IndexRead:
    """What :func:`read_index` found: records sorted by index (last line per index wins)."""

    records: tuple[dict[str, Any], ...]
    torn_lines: int


def read_index(run_dir: RunDir) -> IndexRead:
    """Read the whole index once; a missing index holds no records."""
    tail = IndexTail(run_dir.episodes_index_path)
    return IndexRead(tuple(tail.records()), tail.torn_lines)


@dataclass
class IndexTail:
    """Follows one index as it grows: each :meth:`poll` parses only the appended bytes.

    A line still being written (no newline yet) waits for the next poll; a replaced file
    (a resumed run starts its index afresh) or a shorter one is read again from the start.
    """

    path: Path
    torn_lines: int = 0
    _offset: int = 0
    _inode: int | None = None
    _by_index: dict[int, dict[str, Any]] = field(default_factory=dict)
    _sorted: list[dict[str, Any]] | None = None

    def poll(self) -> list[dict[str, Any]]:
        """The records appended since the last poll, in the order they were appended."""
        try:
            stat = os.stat(self.path)
        except FileNotFoundError:
            self._reset(None)
            return []
        except OSError as exc:
            raise RunError(f"cannot read {str(self.path)!r}: {exc.strerror or exc}") from exc
        if stat.st_ino != self._inode or stat.st_size < self._offset:
            self._reset(stat.st_ino)
        if stat.st_size == self._offset:
            return []
        chunk = self._read_complete_lines(stat.st_size)
        fresh = []
        for raw in chunk.split(b"\n"):
            if not raw.strip():
                continue
            record = parse_jsonl_line(raw)
            index = None if record is None else _valid_index(record)
            if record is None or index is None:
                self.torn_lines += 1
                continue
            self._by_index[index] = record
            fresh.append(record)
        if fresh:
            self._sorted = None
        return fresh

    def records(self) -> list[dict[str, Any]]:
        """Every record so far, sorted by index (polls first); do not mutate the list."""
        self.poll()
        if self._sorted is None:
            self._sorted = [self._by_index[i] for i in sorted(self._by_index)]
        return self._sorted

    def _reset(self, inode: int | None) -> None:
        self._inode, self._offset, self.torn_lines = inode, 0, 0
        self._by_index, self._sorted = {}, None

    def _read_complete_lines(self, size: int) -> bytes:
        try:
            with self.path.open("rb") as handle:
                handle.seek(self._offset)
                data = handle.read(size - self._offset)
        except OSError as exc:
            raise RunError(f"cannot read {str(self.path)!r}: {exc.strerror or exc}") from exc
        end = data.rfind(b"\n") + 1
        self._offset += end
        return data[:end]


def summary_is_complete(summary: Mapping[str, Any]) -> bool:
    """Whether ``summary["episodes"]`` holds every record (the run ended; older formats)."""
    return summary.get("episodes_complete", True) is not False


def episode_records(run_dir: RunDir, summary: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The run's episode records sorted by index: the summary's when complete, else the
    index's (a live run, or one a crash stopped before its final summary)."""
    if summary_is_complete(summary):
        return list(summary.get("episodes", []))
    return list(read_index(run_dir).records)


def recorded_results(run_dir: RunDir) -> list[EpisodeResult]:
    """Every episode.json of the run, sorted by index: what resume starts from.

    An episode folder without a readable, valid episode.json was in flight (or torn) and is
    left out, so a resume runs it again.
    """
    if not run_dir.episodes_dir.is_dir():
        return []
    results = []
    for folder in run_dir.episodes_dir.iterdir():
        index = _folder_index(folder.name)
        if index is None:
            continue
        path = run_dir.episode_json_path(index)
        if not path.exists():
            continue
        try:
            result = EpisodeResult.model_validate(read_json(path))
        except (RunError, ValidationError) as exc:
            log.warning("episode %d: unusable episode.json, it will run again: %s", index, exc)
            continue
        if result.index == index:
            results.append(result)
    return sorted(results, key=lambda r: r.index)


def _folder_index(name: str) -> int | None:
    digits = name[2:]
    if not name.startswith("ep") or not digits.isdigit() or not digits.isascii():
        return None
    return int(digits)
