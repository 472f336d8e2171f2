"""A by-hand node-set server's record of itself (``serve-nodeset --record-dir``): where it
is written, what it says, and how it is written and removed. Apart from the server so that
``agentcanvas servers`` reads records without importing the server's web stack."""

from __future__ import annotations

import contextlib
import os
from datetime import UTC, datetime
from pathlib import Path

import psutil
from pydantic import BaseModel, Field

from agentcanvas.errors import AgentCanvasError
from agentcanvas.fileio import atomic_write_json, read_json

__all__ = ["ServerRecordFile", "record_path", "remove_record", "write_record"]


def record_path(record_dir: Path, nodeset: str, tag: int | None) -> Path:
    """``<record_dir>/<nodeset>[_<tag>].json``: where a by-hand server records itself."""
    return record_dir / (f"{nodeset}.json" if tag is None else f"{nodeset}_{tag}.json")


class ServerRecordFile(BaseModel):
    """What a by-hand server (``--record-dir``) writes about itself while it runs."""

    version: int = 1
    pid: int
    url: str
    nodeset: str
    tag: int | None
    started_at: datetime = Field(description="When the process started (its create time).")


def write_record(record_dir: Path, nodeset: str, tag: int | None, url: str) -> Path:
    """Record this server atomically; returns the file."""
    record_dir.mkdir(parents=True, exist_ok=True)
    path = record_path(record_dir, nodeset, tag)
    started_at = datetime.fromtimestamp(psutil.Process().create_time(), UTC)
    record = ServerRecordFile(
        pid=os.getpid(), url=url, nodeset=nodeset, tag=tag, started_at=started_at
    )
    atomic_write_json(path, record.model_dump(mode="json"))
    return path


def remove_record(path: Path) -> None:
    """Remove this server's record, unless another server has since taken the file."""
    with contextlib.suppress(OSError, AgentCanvasError):
        if read_json(path).get("pid") == os.getpid():
            path.unlink()
