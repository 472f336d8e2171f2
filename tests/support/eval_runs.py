"""Watching a BatchEvalRunner run from outside while it runs."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from agentcanvas.fileio import read_jsonl


async def wait_for_firings(path: Path, n_records: int, deadline_s: float, poll_s: float) -> None:
    """Wait until the episode log at ``path`` holds ``n_records`` node firings."""
    deadline = time.monotonic() + deadline_s
    while not (path.exists() and len(read_jsonl(path).records) >= n_records):
        if time.monotonic() > deadline:
            raise AssertionError(f"{path} never reached {n_records} firings")
        await asyncio.sleep(poll_s)
