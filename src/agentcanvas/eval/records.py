"""Per-episode records of a run: the append-only ``episodes.jsonl`` index and its readers.

Where a run's per-episode records live (a flat cost per episode at any run size):

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

Every read of a record file validates it against its typed model: :func:`read_summary`
(``EvalRun``), :func:`read_episode` (``EpisodeResult``, at most :data:`MAX_RECORD_BYTES`
read), and the index keeps only lines that are valid records (the rest count as torn). A
file off its model is a :class:`~agentcanvas.errors.DamagedRunError` naming the file and
the field, so a tampered run folder answers a 4xx and never breaks another run's reads.

Resume rebuilds its results from the episode folders (:func:`recorded_results`), which are
the truth even when a crash tore the index or the summary; :class:`IndexTail` follows a
live index cheaply (each poll parses only what was appended since the last).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from pydantic import BaseModel, ValidationError

from agentcanvas.errors import DamagedRunError, RunError
from agentcanvas.eval.config import EpisodeResult, EvalRun
from agentcanvas.eval.store import RunDir
from agentcanvas.fileio import (
    append_jsonl_bytes,
    atomic_write_bytes,
    atomic_write_json,
    encode_jsonl_line,
    parse_jsonl_line,
    read_json,
)

__all__ = [
    "MAX_RECORD_BYTES",
    "IndexRead",
    "IndexTail",
    "append_line",
    "append_record",
    "episode_records",
    "field_problem",
    "index_line",
    "model_problem",
    "read_episode",
    "read_index",
    "read_json_object",
    "read_summary",
    "recorded_results",
    "start_index",
    "summary_is_complete",
    "summary_problem",
    "write_summary",
]

log = logging.getLogger(__name__)

MAX_RECORD_BYTES: Final = 4 * 1024 * 1024
"""An episode.json larger than this is damaged and not read (a record is a few kB)."""


# -- validating readers ------------------------------------------------------------------------


MAX_PROBLEMS_SHOWN: Final = 3
KEY_FIELDS: Final = frozenset({"run_id", "index"})
"""Fields a reader may not do without; any other field a file leaves out is tolerated (older
formats, records written by hand), but a field present with the wrong type is damage. A
``status`` (or ``end_reason``) word this version does not know is a word still (readers
compare it), not damage."""


def _counts(error: Mapping[str, Any]) -> bool:
    loc = error["loc"]
    if error["type"] == "missing":
        return bool(loc) and loc[-1] in KEY_FIELDS
    if error["type"] in ("literal_error", "enum") and loc and loc[-1] in ("status", "end_reason"):
        return not isinstance(error.get("input"), str)
    return True


def field_problem(exc: ValidationError) -> str:
    """``field 'a.b': message`` of the first few errors, ``; ``-joined (and how many more)."""
    return _joined([dict(e) for e in exc.errors()])


def _joined(errors: list[dict[str, Any]]) -> str:
    if not errors:
        return "does not fit its model"
    shown = []
    for error in errors[:MAX_PROBLEMS_SHOWN]:
        where = ".".join(str(p) for p in error["loc"]) or "(the whole file)"
        shown.append(f"field {where!r}: {error['msg']}")
    more = len(errors) - MAX_PROBLEMS_SHOWN
    return "; ".join(shown) + (f" (and {more} more)" if more > 0 else "")


def model_problem(model: type[BaseModel], data: Mapping[str, Any]) -> str | None:
    """Why ``data`` does not fit ``model`` (``field 'status': ...``), or None when it does;
    a missing field counts only when it is one of KEY_FIELDS (see there)."""
    try:
        model.model_validate(data)
    except ValidationError as exc:
        errors = [dict(e) for e in exc.errors() if _counts(e)]
        return _joined(errors) if errors else None
    return None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def read_json_object(path: Path, name: str, limit: int | None = None) -> dict[str, Any]:
    """The JSON object in ``path``; DamagedRunError naming ``name`` when it is missing,
    unreadable, larger than ``limit`` bytes (not read then), not strict JSON or no object."""
    try:
        with path.open("rb") as handle:
            data = handle.read() if limit is None else handle.read(limit + 1)
    except FileNotFoundError as exc:
        raise DamagedRunError(f"{name}: missing") from exc
    except OSError as exc:
        raise DamagedRunError(f"{name}: cannot be read: {exc.strerror or exc}") from exc
    if limit is not None and len(data) > limit:
        raise DamagedRunError(f"{name}: larger than {limit} bytes, not read")
    try:
        value = json.loads(data, parse_constant=_no_constant)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, UnicodeDecodeError
        raise DamagedRunError(f"{name}: not valid JSON: {str(exc)[:200]}") from exc
    if not isinstance(value, dict):
        raise DamagedRunError(f"{name}: expected a JSON object, got {type(value).__name__}")
    return value


def summary_problem(fields: Mapping[str, Any]) -> str | None:
    """Why a summary's fields do not fit ``EvalRun`` (``field 'status': ...``), or None."""
    return model_problem(EvalRun, fields)


def read_summary(path: Path, name: str = "summary.json") -> dict[str, Any]:
    """summary.json as written (extra keys kept), validated against ``EvalRun``;
    DamagedRunError naming ``name`` and the field when it is off the model."""
    data = read_json_object(path, name)
    problem = summary_problem(data)
    if problem is not None:
        raise DamagedRunError(f"{name}: {problem}")
    return data


def read_episode(path: Path, name: str = "episode.json") -> dict[str, Any]:
    """One episode.json (at most MAX_RECORD_BYTES), validated against ``EpisodeResult``."""
    data = read_json_object(path, name, MAX_RECORD_BYTES)
    problem = model_problem(EpisodeResult, data)
    if problem is not None:
        raise DamagedRunError(f"{name}: {problem}")
    return data


def _valid_record(record: Mapping[str, Any]) -> bool:
    return model_problem(EpisodeResult, record) is None


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
            if record is None or index is None or not _valid_record(record):
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


def write_summary(
    run_dir: RunDir, run: EvalRun, episodes: list[dict[str, Any]], durable: bool
) -> None:
    """summary.json of ``run`` (atomic; fsync'd when ``durable``) with ``episodes`` (the
    records already dumped, or ``[]``) in its place among the fields in EvalRun's order;
    computed fields (``health``) last, as ``model_dump`` puts them."""
    data = run.model_dump(mode="json", exclude={"episodes"})
    fields = [*EvalRun.model_fields, *EvalRun.model_computed_fields]
    names = [name for name in fields if name == "episodes" or name in data]
    ordered = {name: episodes if name == "episodes" else data[name] for name in names}
    atomic_write_json(run_dir.summary_path, ordered, durable=durable)


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
