"""TaskOwner: the owner of background tasks that outlive the call that starts them.

A request handler that starts an in-process run, or a lifespan that starts the scheduler's
ticker, cannot hold an ``asyncio.TaskGroup`` open for the task's life, and a TaskGroup's
rule (one failure cancels the others) is wrong for independent runs. A TaskOwner keeps each
task by name until it ends, logs the exception of one that fails (never lost, never
propagated into its siblings), and on :meth:`aclose` cancels what is left, newest first,
and waits for it with a deadline. Whoever creates the owner closes it; nothing else here
depends on agentcanvas.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["TaskOwner"]

T = TypeVar("T")
log = logging.getLogger(__name__)


class TaskOwner:
    """Named background tasks with one owner: started, failures logged, closed in order."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._tasks: dict[str, asyncio.Task[Any]] = {}
        self._closed = False

    def start(self, coro: Coroutine[Any, Any, T], name: str) -> asyncio.Task[T]:
        """Run ``coro`` as the task ``name`` (unique among the running ones)."""
        if self._closed or name in self._tasks:
            coro.close()  # never started: no "was never awaited" warning
            why = "closed" if self._closed else f"already runs a task {name!r}"
            raise RuntimeError(f"{self.name}: {why}")
        task = asyncio.create_task(coro, name=f"{self.name}:{name}")
        self._tasks[name] = task
        task.add_done_callback(lambda done: self._ended(name, done))
        return task

    def get(self, name: str) -> asyncio.Task[Any] | None:
        """The running task ``name``, if any."""
        return self._tasks.get(name)

    def __len__(self) -> int:
        return len(self._tasks)

    def _ended(self, name: str, task: asyncio.Task[Any]) -> None:
        if self._tasks.get(name) is task:
            del self._tasks[name]
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            log.error("%s failed", task.get_name(), exc_info=exc)

    async def aclose(self, timeout_s: float) -> None:
        """Refuse new tasks, cancel the running ones newest first, and wait up to
        ``timeout_s`` for all of them to end (their ``finally`` blocks run); a task still
        running after that is logged."""
        self._closed = True
        tasks = list(self._tasks.values())
        for task in reversed(tasks):
            task.cancel()
        if not tasks:
            return
        _, pending = await asyncio.wait(tasks, timeout=timeout_s)
        for task in pending:
            log.error("%s did not stop within %.1f s", task.get_name(), timeout_s)
