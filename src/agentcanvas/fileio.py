"""Atomic file I/O: the bottom of the house (every layer may use it, it uses none of them).

Every rewrite is atomic: a temp file in the same folder, fdatasync, ``os.replace``, fsync of
the folder, so a reader sees the old file or the new one, never half of one (``durable=False``
skips both syncs, for files rebuilt from durable ones). JSON is written
without NaN/Infinity (which strict JSON parsers reject): non-finite floats become ``null``.
JSONL logs are append-only and their reader skips a torn or garbled line instead of failing.
Filesystem errors are translated into :class:`~agentcanvas.errors.RunError` naming the file;
a full disk (or a spent quota) into its subclass :class:`~agentcanvas.errors.DiskFullError`,
which also names the disk and its free space (:func:`write_error`).
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import random
import shutil
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import msgspec

from agentcanvas import jsontext
from agentcanvas.errors import DiskFullError, RunError

__all__ = [
    "DISK_FULL_ERRNOS",
    "HAS_SYNCFS",
    "FilesystemSync",
    "JsonlRead",
    "append_jsonl",
    "append_jsonl_bytes",
    "atomic_write_bytes",
    "atomic_write_json",
    "disk_of",
    "durable_replace",
    "encode_json",
    "encode_jsonl_line",
    "make_dirs",
    "parse_jsonl_line",
    "read_json",
    "read_jsonl",
    "sync_folder",
    "write_error",
    "write_temp",
]


_datasync = getattr(os, "fdatasync", os.fsync)  # macOS has no fdatasync
DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


def disk_of(path: Path) -> tuple[Path, int]:
    """The mount point holding ``path`` (or its nearest existing parent) and its free bytes
    (-1 when it cannot be measured)."""
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    mount = probe.resolve()
    while not os.path.ismount(mount) and mount != mount.parent:
        mount = mount.parent
    try:
        free = shutil.disk_usage(probe).free
    except OSError:
        free = -1
    return mount, free


def write_error(path: Path, exc: OSError, verb: str = "write") -> RunError:
    """The RunError for a failed write of ``path``: a DiskFullError naming the disk and its
    free space when the disk is full (or the quota spent)."""
    if exc.errno in DISK_FULL_ERRNOS:
        mount, free = disk_of(path)
        space = f"{free} bytes free" if free >= 0 else "free space unknown"
        return DiskFullError(
            f"disk full: cannot {verb} {str(path)!r}: {exc.strerror or exc} (the disk "
            f"mounted at {str(mount)!r} has {space}); free space there, then resume the run"
        )
    return RunError(f"cannot {verb} {str(path)!r}: {exc.strerror or exc}")


_LINES = msgspec.json.Encoder()  # plain JSON values, non-finite floats as null


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# Temp-file names: random enough (O_EXCL catches the rest), without a getrandom(2) per file
# (a recording makes one or two an episode); seeded from os.urandom, again in a forked child.
_TEMP_NAMES = random.Random()
os.register_at_fork(after_in_child=_TEMP_NAMES.seed)


def _create_temp(path: Path) -> tuple[int, Path]:
    # os.open with mode 0o666 lets the umask decide permissions (mkstemp would force 0600).
    while True:
        tmp = path.with_name(f".{path.name}.{_TEMP_NAMES.getrandbits(48):012x}.tmp")
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
        raise write_error(path, exc) from exc
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
            raise write_error(path, exc) from exc
        raise


def write_temp(path: Path, data: bytes) -> tuple[int, Path]:
    """``data`` in a new temp file beside ``path``, left open and unsynced: the first half
    of an atomic write whose syncs a caller gathers (`durable_replace` is the second)."""
    try:
        fd, tmp = _create_temp(path)
    except OSError as exc:
        raise write_error(path, exc) from exc
    try:
        _write_all(fd, data)
    except OSError as exc:
        os.close(fd)
        tmp.unlink(missing_ok=True)
        raise write_error(path, exc) from exc
    return fd, tmp


def durable_replace(fd: int, tmp: Path, path: Path, *, sync: bool = True) -> None:
    """Sync and close the temp file `write_temp` made, then rename it over ``path``; the
    caller syncs ``path``'s folder (once for many such files). ``sync=False``: the caller
    syncs the whole filesystem afterwards (`sync_filesystem`)."""
    try:
        try:
            if sync:
                _datasync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise write_error(path, exc) from exc


def _load_syncfs() -> Callable[[int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        syncfs = ctypes.CDLL(None, use_errno=True).syncfs
    except (OSError, AttributeError):
        return None
    syncfs.argtypes, syncfs.restype = [ctypes.c_int], ctypes.c_int
    return cast(Callable[[int], int], syncfs)


def _reports_writeback_errors() -> bool:
    """Linux 5.8 and newer: syncfs(2) returns a writeback error of the filesystem that
    happened since the descriptor was opened; before, it returned 0 whatever failed."""
    try:
        major, minor = (int(part) for part in os.uname().release.split(".")[:2])
    except ValueError:
        return False
    return (major, minor) >= (5, 8)


_syncfs = _load_syncfs() if _reports_writeback_errors() else None
HAS_SYNCFS = _syncfs is not None
"""Whether `FilesystemSync` can make many files durable with one call (Linux's syncfs, from
the kernel on which it reports write errors)."""


class FilesystemSync:
    """Everything written to ``folder``'s filesystem made durable by one syncfs(2) each time:
    the group commit of many files, whose one-by-one fsyncs cost the writer far more CPU (one
    journal commit each). The descriptor is held from before the first write it must cover:
    the kernel reports a writeback error to a descriptor only if it happened after the
    descriptor was opened. Only where HAS_SYNCFS; RunError (DiskFullError) naming the folder."""

    def __init__(self, folder: Path) -> None:
        if _syncfs is None:
            raise RunError("FilesystemSync needs syncfs(2): check HAS_SYNCFS first")
        self.folder = folder
        try:
            self._fd: int | None = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        except OSError as exc:
            raise write_error(folder, exc, "sync") from exc

    def sync(self) -> None:
        if _syncfs is None or self._fd is None:
            raise RunError(f"sync of {self.folder} after its FilesystemSync was closed")
        if _syncfs(self._fd) != 0:
            err = ctypes.get_errno()
            raise write_error(self.folder, OSError(err, os.strerror(err)), "sync")

    def close(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)


def sync_folder(folder: Path) -> None:
    """fsync ``folder`` (the names of files created or renamed in it); RunError naming it."""
    try:
        _fsync_dir(folder)
    except OSError as exc:
        raise write_error(folder, exc, "sync") from exc


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
    atomic_write_bytes(path, encode_json(path, obj), durable=durable)


def encode_json(path: Path, obj: Any) -> bytes:
    """The text `atomic_write_json` writes for ``obj`` (indented, with its newline);
    ``path`` names the file in errors. For a caller that encodes in one place and writes
    in another (`atomic_write_bytes`)."""
    if type(obj) is dict:  # the same text as the strict path, from C (see encode_jsonl_line)
        try:
            return msgspec.json.format(_LINES.encode(obj), indent=1) + b"\n"
        except (TypeError, OverflowError, msgspec.EncodeError):
            pass
    return (_dumps(path, obj, indent=1) + "\n").encode("utf-8")


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
    """``record`` as one strict-JSON line (with its newline); ``path`` names it in errors.

    Plain records (str keys; str, int, float, bool, None, lists and dicts) take msgspec's
    encoder, which writes the same compact UTF-8 text ``jsontext`` does (a non-finite float
    as ``null`` too) about five times faster: a firing log writes a line per node firing.
    Anything else (a Mapping that is no dict, an int past 64 bits, a value JSON cannot hold)
    takes the strict path, which converts or names what it refuses."""
    if type(record) is dict:
        try:
            return _LINES.encode(record) + b"\n"
        except (TypeError, OverflowError, msgspec.EncodeError):
            pass
    return (_dumps(path, record, indent=None) + "\n").encode("utf-8")


def append_jsonl(path: Path, record: Mapping[str, Any]) -> None:
    """Append ``record`` as one JSON line to ``path`` (created if missing).

    The line goes to the kernel in one ``write`` (no user-space buffer left behind). If the
    file ends in a torn line from a crashed writer, a newline is written first so the new
    record does not fuse with it. Non-finite floats are written as null.
    """
    append_jsonl_bytes(path, encode_jsonl_line(path, record))


def append_jsonl_bytes(path: Path, line: bytes) -> None:
    """`append_jsonl` of a line encoded already (`encode_jsonl_line`)."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o666)
    except OSError as exc:
        raise write_error(path, exc, "append to") from exc
    try:
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            line = b"\n" + line
        _write_all(fd, line)
    except OSError as exc:
        raise write_error(path, exc, "append to") from exc
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


def make_dirs(folder: Path) -> None:
    """``mkdir -p``; RunError naming the folder when it fails."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise write_error(folder, exc, "create") from exc
