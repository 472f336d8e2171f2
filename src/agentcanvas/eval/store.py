"""Run-folder persistence: the run dir layout and atomic file I/O (DESIGN § 4, seed § 6.2).

::

    outputs/eval_runs/{run_id}/
      spec.json  shared_urls.json  summary.json  graph.json  stdout.log  stderr.log  _DONE
      episodes.jsonl                       (per-episode records, appended; see eval.records)
      episodes/ep{idx:04d}/  log.jsonl  assets/  episode.json

Every rewrite is atomic: a temp file in the same folder, fdatasync, ``os.replace``, fsync of
the folder, so a reader sees the old file or the new one, never half of one (the live summary
of a running eval skips both syncs: recover rebuilds it from the episode folders). JSON is written
without NaN/Infinity (which strict JSON parsers reject): non-finite floats become ``null``.
JSONL logs are append-only and their reader skips a torn or garbled line instead of failing.
Filesystem errors are translated into :class:`~agentcanvas.errors.RunError` naming the file.
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Final

from agentcanvas import jsontext
from agentcanvas.errors import RunError, UnsafeNameError
from agentcanvas.paths import check_name

__all__ = [
    "JsonlRead",
    "RunDir",
    "append_jsonl",
    "atomic_write_bytes",
    "atomic_write_json",
    "encode_jsonl_line",
    "new_run_id",
    "parse_jsonl_line",
    "read_json",
    "read_jsonl",
]

_MAX_RUN_ID_SUFFIX: Final = 10_000


_datasync = getattr(os, "fdatasync", os.fsync)  # macOS has no fdatasync


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _create_temp(path: Path) -> tuple[int, Path]:
    # os.open with mode 0o666 lets the umask decide permissions (mkstemp would force 0600).
    while True:
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), tmp
        except FileExistsError:
            continue


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def atomic_write_bytes(path: Path, data: bytes, *, durable: bool = True) -> None:
    """Replace ``path`` with ``data`` atomically and durably; the folder must exist.

    ``durable=False`` skips both fsyncs: still atomic for readers and across a crash of the
    writer, but a machine crash may lose it. Only for files rebuilt from durable ones (the
    live summary of a running eval, rebuilt from its episode folders by recover).
    """
    try:
        fd, tmp = _create_temp(path)
    except OSError as exc:
        raise RunError(f"cannot write {str(path)!r}: {exc.strerror or exc}") from exc
    try:
        try:
            _write_all(fd, data)
            if durable:  # the data and the size that reads need; the rename is synced below
                _datasync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        if durable:
            _fsync_dir(path.parent)
    except BaseException as exc:
        tmp.unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise RunError(f"cannot write {str(path)!r}: {exc.strerror or exc}") from exc
        raise


def _dumps(path: Path, obj: Any, *, indent: int | None) -> str:
    try:
        text = jsontext.dumps(obj, indent=indent, ensure_ascii=False, compact=indent is None)
    except (TypeError, ValueError) as exc:
        raise RunError(f"cannot encode JSON for {str(path)!r}: {exc}") from exc
    return text


def atomic_write_json(path: Path, obj: Any, *, durable: bool = True) -> None:
    """Write ``obj`` as JSON to ``path`` atomically; non-finite floats are written as null.

    Keys keep their insertion order. Only plain JSON types (dict, list, tuple, str, int,
    float, bool, None) are accepted; dump pydantic models with ``model_dump(mode="json")``.
    """
    data = (_dumps(path, obj, indent=1) + "\n").encode("utf-8")
    atomic_write_bytes(path, data, durable=durable)


def read_json(path: Path) -> Any:
    """Parse the JSON file at ``path``; RunError naming the file when missing or corrupt."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise RunError(f"cannot read {str(path)!r}: {exc.strerror or exc}") from exc
    try:
        return json.loads(data)
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError
        raise RunError(f"{str(path)!r} is not valid JSON: {exc}") from exc


def encode_jsonl_line(path: Path, record: Mapping[str, Any]) -> bytes:
    """``record`` as one strict-JSON line (with its newline); ``path`` names it in errors."""
    return (_dumps(path, record, indent=None) + "\n").encode("utf-8")


def append_jsonl(path: Path, record: Mapping[str, Any]) -> None:
    """Append ``record`` as one JSON line to ``path`` (created if missing).

    The line goes to the kernel in one ``write`` (no user-space buffer left behind). If the
    file ends in a torn line from a crashed writer, a newline is written first so the new
    record does not fuse with it. Non-finite floats are written as null.
    """
    line = encode_jsonl_line(path, record)
    try:
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o666)
    except OSError as exc:
        raise RunError(f"cannot append to {str(path)!r}: {exc.strerror or exc}") from exc
    try:
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            line = b"\n" + line
        _write_all(fd, line)
    except OSError as exc:
        raise RunError(f"cannot append to {str(path)!r}: {exc.strerror or exc}") from exc
    finally:
        os.close(fd)


@dataclass(frozen=True)
class JsonlRead:
    """What :func:`read_jsonl` found: the parsed records and how many lines were unusable."""

    records: tuple[dict[str, Any], ...]
    torn_lines: int


def parse_jsonl_line(raw: bytes) -> dict[str, Any] | None:
    """One JSONL line as a record, or None when it is torn or garbled (not a JSON object)."""
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    # Records are JSON objects, so a torn prefix of one can never parse as a valid record.
    return value if isinstance(value, dict) else None


def read_jsonl(path: Path) -> JsonlRead:
    """Read a JSONL file, skipping and counting torn or garbled lines (never raises for them).

    Blank lines are ignored. A missing or unreadable file is a RunError naming the file.
    """
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise RunError(f"cannot read {str(path)!r}: {exc.strerror or exc}") from exc
    records: list[dict[str, Any]] = []
    torn = 0
    for raw in data.split(b"\n"):
        if not raw.strip():
            continue
        parsed = parse_jsonl_line(raw)
        if parsed is None:
            torn += 1
        else:
            records.append(parsed)
    return JsonlRead(records=tuple(records), torn_lines=torn)


@dataclass(frozen=True)
class RunDir:
    """The on-disk layout of one run folder; paths only, plus a few file-level operations."""

    root: Path

    @property
    def spec_path(self) -> Path:
        """``spec.json``: the input contract written before the run is spawned."""
        return self.root / "spec.json"

    @property
    def shared_urls_path(self) -> Path:
        """``shared_urls.json``: URLs of the shared servers the run borrows."""
        return self.root / "shared_urls.json"

    @property
    def summary_path(self) -> Path:
        """``summary.json``: the run summary, rewritten on every episode boundary."""
        return self.root / "summary.json"

    @property
    def episodes_index_path(self) -> Path:
        """``episodes.jsonl``: every episode record, appended as each episode ends."""
        return self.root / "episodes.jsonl"

    @property
    def graph_path(self) -> Path:
        """``graph.json``: the graph frozen when the run started."""
        return self.root / "graph.json"

    @property
    def stdout_path(self) -> Path:
        """``stdout.log``: the run process's standard output."""
        return self.root / "stdout.log"

    @property
    def stderr_path(self) -> Path:
        """``stderr.log``: the run process's standard error."""
        return self.root / "stderr.log"

    @property
    def done_path(self) -> Path:
        """``_DONE``: the terminal marker; present once the run has finished for good."""
        return self.root / "_DONE"

    @property
    def episodes_dir(self) -> Path:
        """``episodes/``: one self-contained sub-folder per episode."""
        return self.root / "episodes"

    def episode_dir(self, idx: int) -> Path:
        """``episodes/ep{idx:04d}``; UnsafeNameError unless ``idx`` is an int >= 0."""
        if isinstance(idx, bool) or not isinstance(idx, int) or idx < 0:
            raise UnsafeNameError(f"episode index must be an int >= 0, got {idx!r}")
        return self.episodes_dir / f"ep{idx:04d}"

    def episode_log_path(self, idx: int) -> Path:
        """``episodes/ep{idx:04d}/log.jsonl``: the episode's node-firing log."""
        return self.episode_dir(idx) / "log.jsonl"

    def episode_assets_dir(self, idx: int) -> Path:
        """``episodes/ep{idx:04d}/assets/``: the episode's artefacts (images)."""
        return self.episode_dir(idx) / "assets"

    def episode_json_path(self, idx: int) -> Path:
        """``episodes/ep{idx:04d}/episode.json``: the self-describing episode record."""
        return self.episode_dir(idx) / "episode.json"

    def create(self) -> None:
        """Create the run folder and its ``episodes/`` folder (no error if they exist)."""
        _mkdirs(self.episodes_dir)

    def create_episode(self, idx: int) -> Path:
        """Create ``episodes/ep{idx:04d}/assets/`` (and parents); return the episode folder."""
        _mkdirs(self.episode_assets_dir(idx))
        return self.episode_dir(idx)

    def touch_done(self) -> None:
        """Create the ``_DONE`` marker atomically (idempotent)."""
        atomic_write_bytes(self.done_path, b"")

    def is_done(self) -> bool:
        """Whether the ``_DONE`` marker exists."""
        return self.done_path.exists()


def _mkdirs(folder: Path) -> None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RunError(f"cannot create {str(folder)!r}: {exc.strerror or exc}") from exc


def new_run_id(runs_dir: Path, now: datetime | None = None) -> str:
    """Reserve a fresh run id under ``runs_dir`` and create its folder.

    The id is the local time to the second, ``YYYYmmdd_HHMMSS``, with a suffix ``_1``,
    ``_2``, … when taken. The folder is claimed with ``os.mkdir``, which fails if it exists,
    so two threads or processes can never receive the same id.
    """
    stamp = (now or datetime.now()).strftime("%Y%m%d_%H%M%S")
    _mkdirs(runs_dir)
    for suffix in range(_MAX_RUN_ID_SUFFIX):
        run_id = check_name("run_id", stamp if suffix == 0 else f"{stamp}_{suffix}")
        try:
            os.mkdir(runs_dir / run_id)
        except FileExistsError:
            continue
        except OSError as exc:
            raise RunError(f"cannot create run folder under {str(runs_dir)!r}: {exc}") from exc
        return run_id
    raise RunError(f"no free run id for {stamp} under {str(runs_dir)!r}")
