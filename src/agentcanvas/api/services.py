"""ProcessServices: the per-process singletons of a backend (registry, scheduler, sockets).

Each process has its own — an eval subprocess shares nothing with the backend — so the
backend pushes subprocess progress to its WebSocket clients itself (JobScheduler hooks).
It lives in the api layer it serves (it was ``agentcanvas/state.py``, which imported the
api from below): the run cache and the progress relay it holds are api modules.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentcanvas import jsontext
from agentcanvas.background import TaskOwner
from agentcanvas.eval.events import LiveEvent
from agentcanvas.scheduler.job_scheduler import JobScheduler
from agentcanvas.server.registry import WorkspaceComponentRegistry

from .idempotency import SubmitKeys
from .progress import ProgressRelay
from .runs import RunCache
from .shared_loads import SharedLoads
from .ws_clients import WebSocketClient

log = logging.getLogger(__name__)


class ExecutionGuard:
    """Held while canvas Play runs in the backend; admission is refused meanwhile."""

    def __init__(self) -> None:
        self._lock = asyncio.Lock()
        self.holder: str | None = None

    def held(self) -> bool:
        return self._lock.locked()

    async def __aenter__(self) -> ExecutionGuard:
        await self._lock.acquire()
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.holder = None
        self._lock.release()


@dataclass
class ProcessServices:
    """What a backend process owns."""

    workspace: Path
    registry: WorkspaceComponentRegistry
    scheduler: JobScheduler
    guard: ExecutionGuard = field(default_factory=ExecutionGuard)
    ws_connections: set[WebSocketClient] = field(default_factory=set)
    pending_unloads: set[str] = field(default_factory=set)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    token: str | None = None
    runs: RunCache = field(init=False)
    progress: ProgressRelay = field(init=False)
    submit_keys: SubmitKeys = field(init=False)
    """The Idempotency-Key of each keyed start, by the run it created."""
    loads: SharedLoads = field(init=False)
    """The shared node sets of queued runs, started off the requests (closed by the lifespan)."""
    loops: TaskOwner = field(default_factory=lambda: TaskOwner("backend loop"))
    """The scheduler's ticker and the progress relay (started and closed by the lifespan)."""
    inprocess: TaskOwner = field(default_factory=lambda: TaskOwner("in-process run"))
    """Runs started with ``via_subprocess: false``, by run id."""

    def __post_init__(self) -> None:
        self.runs = RunCache(self.scheduler.runs_dir, self.scheduler.unwritten)
        self.progress = ProgressRelay(self.scheduler.runs_dir, self.broadcast)
        self.submit_keys = SubmitKeys(self.scheduler.runs_dir)
        self.loads = SharedLoads(
            self.registry, self.scheduler, self.registry.release_shared_nodesets, self.request_tick
        )

    def broadcast(self, event: LiveEvent) -> None:
        """Queue ``event`` to every WebSocket client (never blocks the caller)."""
        if not self.ws_connections:
            return
        text = jsontext.dumps(event.wire(), default=str)
        for client in list(self.ws_connections):
            if not client.offer(text):  # a stalled client is dropped, never the scheduler
                self.ws_connections.discard(client)
                log.warning("dropped a WebSocket client that stopped reading")

    def relay_progress(self, run_id: str, summary: dict[str, Any]) -> None:
        """Subprocess-path status changes (summary.json) pushed to WebSocket clients; the
        per-episode events come from :class:`~agentcanvas.api.progress.ProgressRelay`."""
        self.progress.on_summary(run_id, summary)

    def request_tick(self) -> None:
        self.wake.set()
