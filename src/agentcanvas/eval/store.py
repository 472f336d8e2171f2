"""Run-folder persistence: the run dir layout and run ids (DESIGN § 4, seed § 6.2).

::

    outputs/eval_runs/{run_id}/
      spec.json  shared_urls.json  summary.json  graph.json  stdout.log  stderr.log  _DONE
      _RESERVE                             (space held while the run is written; see below)
      episodes.jsonl                       (per-episode records, appended; see eval.records)
      episodes/ep{idx:04d}/  log.jsonl  assets/  episode.json
      past_stop/ep{idx:04d}/               (a stop rule's: episodes finished past its decision)

``assets/`` exists when the episode saved any (frames): an empty folder per episode would
cost a file creation each, which on some filesystems costs more CPU than a short episode
. Files are written with the atomic helpers of :mod:`agentcanvas.fileio`.

``_STORAGE_CHECK`` (Ray runs) holds a random token: a worker actor that reads the same token
at the same path sees this folder (one machine, or storage every node mounts alike) and
stages its episodes' logs here itself, which the head renames into place when it records
them (`cluster.shared_folder`), instead of sending them to the head.

``_RESERVE`` is disk space held while a run is written (:meth:`RunDir.reserve_space`): when
the disk fills up, the run gives it back (:meth:`RunDir.release_reserve`) and so can still
write its last word, ``aborted`` with the reason, on a disk that had no byte left.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Final

from agentcanvas.errors import DiskFullError, RunError, UnsafeNameError
from agentcanvas.fileio import (
    DISK_FULL_ERRNOS,
    atomic_write_bytes,
    disk_of,
    make_dirs,
    write_error,
)
from agentcanvas.paths import check_name

__all__ = ["MIN_FREE_BYTES", "RESERVE_BYTES", "RunDir", "check_disk_space", "new_run_id"]

_MAX_RUN_ID_SUFFIX: Final = 10_000
RESERVE_BYTES: Final = 1024 * 1024
"""Space a run holds back (``_RESERVE``): what its final bounded summary needs, many times."""
MIN_FREE_BYTES: Final = 4 * RESERVE_BYTES
"""Free space below which no run is submitted, resumed or started: its reserve and first
records would not fit."""


def check_disk_space(runs_dir: Path, action: str, need: int = MIN_FREE_BYTES) -> None:
    """DiskFullError naming the disk and its free space when the disk holding ``runs_dir``
    has less than ``need`` bytes free (``action``: what is refused, e.g. "submit a run")."""
    mount, free = disk_of(runs_dir)
    if 0 <= free < need:
        raise DiskFullError(
            f"disk full: cannot {action}: the disk mounted at {str(mount)!r} (outputs folder "
            f"{str(runs_dir)!r}) has {free} bytes free, a run needs {need}; free space there "
            "and try again"
        )


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
    def reserve_path(self) -> Path:
        """``_RESERVE``: disk space held for the run's last word on a full disk."""
        return self.root / "_RESERVE"

    @property
    def storage_check_path(self) -> Path:
        """``_STORAGE_CHECK``: the token by which a Ray worker tells it sees this folder."""
        return self.root / "_STORAGE_CHECK"

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
        make_dirs(self.episodes_dir)

    def create_episode(self, idx: int) -> Path:
        """Create ``episodes/ep{idx:04d}/`` (and parents); return it. Its ``assets/`` is made
        by whoever saves the first asset (`nodes.assets.save_frame`)."""
        folder = self.episode_dir(idx)
        make_dirs(folder)
        return folder

    def touch_done(self) -> None:
        """Create the ``_DONE`` marker atomically (idempotent)."""
        atomic_write_bytes(self.done_path, b"")

    def is_done(self) -> bool:
        """Whether the ``_DONE`` marker exists."""
        return self.done_path.exists()

    def reserve_space(self, size: int = RESERVE_BYTES) -> bool:
        """Hold ``size`` bytes of disk in ``_RESERVE`` (allocated, not sparse); False when the
        disk cannot give them (the run goes on without). Other errors are RunErrors."""
        try:
            fd = os.open(self.reserve_path, os.O_WRONLY | os.O_CREAT, 0o666)
        except OSError as exc:
            if exc.errno in DISK_FULL_ERRNOS:
                return False
            raise write_error(self.reserve_path, exc) from exc
        try:
            _allocate(fd, size)
        except OSError as exc:
            os.close(fd)
            self.reserve_path.unlink(missing_ok=True)
            if exc.errno in DISK_FULL_ERRNOS:
                return False
            raise write_error(self.reserve_path, exc) from exc
        os.close(fd)
        return True

    def release_reserve(self) -> bool:
        """Give the held space back; whether there was any."""
        try:
            self.reserve_path.unlink()
        except FileNotFoundError:
            return False
        except OSError:  # a folder in its place (tampered): nothing held
            return False
        return True


def _allocate(fd: int, size: int) -> None:
    """Blocks for ``size`` bytes of ``fd``: posix_fallocate, else zeros written."""
    try:
        os.posix_fallocate(fd, 0, size)
        return
    except OSError as exc:
        if exc.errno in DISK_FULL_ERRNOS:
            raise
    chunk = bytes(64 * 1024)
    written = 0
    while written < size:
        written += os.write(fd, chunk[: size - written])


def new_run_id(runs_dir: Path, now: datetime | None = None) -> str:
    """Reserve a fresh run id under ``runs_dir`` and create its folder.

    The id is the local time to the second, ``YYYYmmdd_HHMMSS``, with a suffix ``_1``,
    ``_2``, … when taken. The folder is claimed with ``os.mkdir``, which fails if it exists,
    so two threads or processes can never receive the same id.
    """
    stamp = (now or datetime.now()).strftime("%Y%m%d_%H%M%S")
    make_dirs(runs_dir)
    for suffix in range(_MAX_RUN_ID_SUFFIX):
        run_id = check_name("run_id", stamp if suffix == 0 else f"{stamp}_{suffix}")
        try:
            os.mkdir(runs_dir / run_id)
        except FileExistsError:
            continue
        except OSError as exc:
            raise write_error(runs_dir / run_id, exc, "create run folder") from exc
        return run_id
    raise RunError(f"no free run id for {stamp} under {str(runs_dir)!r}")
