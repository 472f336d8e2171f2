"""EnvWorkerPool: N worker slots over N tagged env servers, with pinned leases.

Each slot is a WorkerHandle carrying ``env_panel_overrides`` and ``server_url_overrides`` for
its own tagged servers (``env_x#k``). Episodes are split into contiguous chunks (numpy
``array_split``); worker k holds slot k (``acquire_specific``) and starts on chunk k, which
bounds task switches per simulator process, then steals from the others' tails
(:mod:`agentcanvas.eval.dispatch`). At worker_count = 1 it is the same path with one slot.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import numpy as np

from agentcanvas.errors import StateError
from agentcanvas.nodes.base import NodeSetHandle
from agentcanvas.server.fleet import server_key
from agentcanvas.server.registry import WorkspaceComponentRegistry


@dataclass
class WorkerHandle:
    """One worker slot: which tagged servers it routes to."""

    worker_id: int
    env_nodeset: str | None
    replicated: list[str]
    env_panel_overrides: dict[str, NodeSetHandle] = field(default_factory=dict)
    server_url_overrides: dict[str, str] = field(default_factory=dict)
    restarts: int = 0

    @property
    def env(self) -> NodeSetHandle | None:
        return self.env_panel_overrides.get(self.env_nodeset) if self.env_nodeset else None

    def server_keys(self) -> list[str]:
        return [server_key(n, self.worker_id) for n in self.replicated]


def partition_contiguous(indices: Sequence[int], n_chunks: int) -> list[list[int]]:
    """Contiguous chunks as numpy ``array_split`` distributes them (first chunks larger)."""
    return [list(map(int, c)) for c in np.array_split(np.asarray(indices, dtype=int), n_chunks)]


class EnvWorkerPool:
    """Async context manager owning the worker slots of one run."""

    def __init__(
        self,
        registry: WorkspaceComponentRegistry,
        worker_count: int,
        env_nodeset: str | None,
        replicated: Sequence[str],
    ) -> None:
        self._registry = registry
        self.worker_count = worker_count
        self.env_nodeset = env_nodeset
        self.replicated = list(replicated)
        self.handles: list[WorkerHandle] = []
        self._locks: list[asyncio.Lock] = []

    async def __aenter__(self) -> EnvWorkerPool:
        self.handles = [
            self._wire(WorkerHandle(k, self.env_nodeset, self.replicated))
            for k in range(self.worker_count)
        ]
        self._locks = [asyncio.Lock() for _ in self.handles]
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.handles, self._locks = [], []

    def _wire(self, handle: WorkerHandle) -> WorkerHandle:
        for nodeset in self.replicated:
            key = server_key(nodeset, handle.worker_id)
            url = self._registry.get_server_url(nodeset, handle.worker_id)
            if url is None:
                raise StateError(f"server {key} is not running; ensure_nodesets_for_graph first")
            handle.server_url_overrides[nodeset] = url
            handle.env_panel_overrides[nodeset] = self._registry.get_env_panel(key)
        return handle

    @asynccontextmanager
    async def acquire_specific(self, worker_id: int) -> AsyncIterator[WorkerHandle]:
        """Lease exactly slot ``worker_id`` (pinned), waiting until it is free."""
        if not 0 <= worker_id < len(self.handles):
            raise StateError(f"no worker slot {worker_id} (pool has {len(self.handles)})")
        async with self._locks[worker_id]:
            yield self.handles[worker_id]

    def servers_alive(self, handle: WorkerHandle) -> bool:
        return all(self._registry.server_alive(key) for key in handle.server_keys())

    async def dead_servers(self, handle: WorkerHandle, timeout_s: float | None = None) -> list[str]:
        """This slot's servers that have exited or no longer answer ``/health``.

        A SIGKILLed server resets its connections a moment before its exit can be seen, so
        an exit check alone, made right after the error, can miss the death behind it.
        """
        dead = []
        for key in handle.server_keys():
            if not self._registry.server_alive(key) or not await self._answers(key, timeout_s):
                dead.append(key)
        return dead

    async def _answers(self, key: str, timeout_s: float | None = None) -> bool:
        return await self._registry.server_answers(key, timeout_s)

    async def restart(
        self, handle: WorkerHandle, keys: Sequence[str] | None = None, *, kill: bool = False
    ) -> None:
        """Restart this slot's dead servers (``keys``; default: those that exited), re-wire;
        ``kill``: SIGKILL them at once (they exited or do not answer: no grace to give)."""
        if keys is None:
            keys = [k for k in handle.server_keys() if not self._registry.server_alive(k)]
        for key in keys:
            await self._registry.restart_server(key, kill=kill)
        handle.env_panel_overrides.clear()
        handle.server_url_overrides.clear()
        self._wire(handle)
        handle.restarts += 1
