"""run_blocking: blocking node code on daemon threads that a caller may abandon."""

from __future__ import annotations

import asyncio
import threading

import pytest

from agentcanvas.nodes.blocking import run_blocking

DEADLINE_S = 10.0  # a broken pool fails the test instead of hanging it


def test_results_and_exceptions_come_back() -> None:
    async def go() -> None:
        assert await run_blocking(lambda a, b: a + b, 2, 3) == 5
        with pytest.raises(ZeroDivisionError):
            await run_blocking(lambda: 1 / 0)

    asyncio.run(asyncio.wait_for(go(), DEADLINE_S))


def test_an_abandoned_call_keeps_its_thread_but_not_the_caller() -> None:
    release, returned = threading.Event(), threading.Event()
    stuck_in: list[threading.Thread] = []

    def stuck() -> None:
        stuck_in.append(threading.current_thread())
        release.wait(DEADLINE_S)
        returned.set()

    async def go() -> str:
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.05):
                await run_blocking(stuck)
        # The stuck call still holds its thread; the next call gets another one.
        return await run_blocking(lambda: threading.current_thread().name)

    try:
        other = asyncio.run(asyncio.wait_for(go(), DEADLINE_S))
        (thread,) = stuck_in
        assert thread.daemon and thread.is_alive()  # interpreter exit will not wait for it
        assert other != thread.name
    finally:
        release.set()
    # It returns after its loop closed; its answer is dropped and the thread serves again.
    assert returned.wait(DEADLINE_S)
    assert asyncio.run(asyncio.wait_for(run_blocking(lambda: 7), DEADLINE_S)) == 7
