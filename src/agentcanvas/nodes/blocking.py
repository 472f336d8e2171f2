"""Blocking node-set code off the event loop, on threads that never hold the process.

``asyncio.to_thread`` uses the loop's default executor, whose threads are joined when the
loop closes and again at interpreter exit: one node function that never returns keeps
``agentcanvas eval`` or ``play`` alive for ever after its episode timed out. A thread cannot
be killed, so blocking calls run here instead, on daemon threads that the interpreter
abandons at exit. A call whose caller gave up (a deadline, a cancelled run) keeps its thread
until it returns; later calls get other threads.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["run_blocking"]

T = TypeVar("T")
_Work = Callable[[], None]


class _DaemonThreads:
    """A pool of daemon threads that grows when every thread is busy (or stuck)."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._work: queue.SimpleQueue[_Work] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._idle = 0
        self._started = 0

    def submit(self, work: _Work) -> None:
        with self._lock:
            if self._idle > 0:
                self._idle -= 1  # that idle thread takes this work
            else:
                self._started += 1
                thread = threading.Thread(
                    target=self._serve, name=f"{self._name}-{self._started}", daemon=True
                )
                thread.start()
        self._work.put(work)

    def _serve(self) -> None:
        while True:
            self._work.get()()
            with self._lock:
                self._idle += 1


_POOL = _DaemonThreads("agentcanvas-blocking")


def _settle(future: asyncio.Future[Any], outcome: tuple[bool, Any]) -> None:
    if future.done():  # the caller gave up (deadline, cancellation)
        return
    ok, value = outcome
    if ok:
        future.set_result(value)
    else:
        future.set_exception(value)


async def run_blocking(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` on a daemon thread; cancelling the await abandons the thread."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()
    context = contextvars.copy_context()

    def work() -> None:
        try:
            outcome: tuple[bool, Any] = (True, context.run(fn, *args))
        except BaseException as exc:  # handed to the awaiting task, re-raised there
            outcome = (False, exc)
        # A closed loop raises RuntimeError: nobody waits for this answer any more.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(_settle, future, outcome)

    _POOL.submit(work)
    return await future
