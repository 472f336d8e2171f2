"""Run-folder persistence: the run dir layout and run ids (DESIGN § 4, seed § 6.2).

::

    outputs/eval_runs/{run_id}/
      spec.json  shared_urls.json  summary.json  graph.json  stdout.log  stderr.log  _DONE
      episodes.jsonl                       (per-episode records, appended; see eval.records)
      episodes/ep{idx:04d}/  log.jsonl  assets/  episode.json

``assets/`` exists when the episode saved any (frames): an empty folder per episode would
cost a file creation each, which on some filesystems costs more CPU than a short episode
(issue 13). Files are written with the atomic helpers of :mod:`agentcanvas.fileio`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Final

from agentcanvas.errors import RunError, UnsafeNameError
from agentcanvas.fileio import atomic_write_bytes, make_dirs
from agentcanvas.paths import check_name

__all__ = ["RunDir", "new_run_id"]

_MAX_RUN_ID_SUFFIX: Final = 10_000


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
            raise RunError(f"cannot create run folder under {str(runs_dir)!r}: {exc}") from exc
        return run_id
    raise RunError(f"no free run id for {stamp} under {str(runs_dir)!r}")
