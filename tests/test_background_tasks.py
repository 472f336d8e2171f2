"""TaskOwner: failures logged (never lost), close cancels newest first and waits, names unique."""

from __future__ import annotations

import asyncio
import logging

import pytest

from agentcanvas.background import TaskOwner


async def test_a_failing_task_is_logged_and_forgotten(caplog: pytest.LogCaptureFixture) -> None:
    owner = TaskOwner("test")

    async def fail() -> None:
        raise ValueError("the disk is full")

    task = owner.start(fail(), name="writer")
    with caplog.at_level(logging.ERROR, logger="agentcanvas.background"):
        await asyncio.wait([task])
        await asyncio.sleep(0)  # the done callback runs on the next loop pass
    assert len(owner) == 0 and owner.get("writer") is None
    [record] = [r for r in caplog.records if r.name == "agentcanvas.background"]
    assert "test:writer failed" in record.getMessage()
    assert record.exc_info is not None and "the disk is full" in str(record.exc_info[1])


async def test_close_cancels_newest_first_and_waits_for_cleanup() -> None:
    owner = TaskOwner("test")
    order: list[str] = []
    started = {name: asyncio.Event() for name in ("first", "second")}

    async def holds(name: str) -> None:
        try:
            started[name].set()
            await asyncio.Event().wait()
        finally:
            await asyncio.sleep(0.01)  # cleanup that itself awaits
            order.append(name)

    first = owner.start(holds("first"), name="first")
    second = owner.start(holds("second"), name="second")
    await asyncio.wait_for(asyncio.gather(*(e.wait() for e in started.values())), 5.0)

    await owner.aclose(timeout_s=5.0)

    assert first.cancelled() and second.cancelled()
    assert order == ["second", "first"]
    with pytest.raises(RuntimeError, match="closed"):
        owner.start(holds("third"), name="third")


async def test_close_logs_a_task_that_outlives_its_deadline(
    caplog: pytest.LogCaptureFixture,
) -> None:
    owner = TaskOwner("test")
    release = asyncio.Event()
    entered = asyncio.Event()

    async def stubborn() -> None:
        while not release.is_set():
            try:
                entered.set()
                await release.wait()
            except asyncio.CancelledError:
                continue  # refuses to stop: what the deadline is for

    task = owner.start(stubborn(), name="stubborn")
    await asyncio.wait_for(entered.wait(), 5.0)
    with caplog.at_level(logging.ERROR, logger="agentcanvas.background"):
        await owner.aclose(timeout_s=0.05)
    assert any("did not stop within" in r.getMessage() for r in caplog.records)
    assert not task.done()
    release.set()
    await asyncio.wait_for(task, 5.0)


async def test_a_name_runs_once_at_a_time() -> None:
    owner = TaskOwner("test")
    gate = asyncio.Event()
    task = owner.start(gate.wait(), name="run")
    with pytest.raises(RuntimeError, match="already runs"):
        owner.start(gate.wait(), name="run")
    gate.set()
    await task
    await asyncio.sleep(0)
    owner.start(gate.wait(), name="run")  # free again once the first ended
    await owner.aclose(timeout_s=1.0)
