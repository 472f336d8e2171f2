"""CancelEvent: the run's cancel flag, an asyncio.Event whose callbacks cut the episodes in
flight short (`episode._run_guarded`) without a task waiting on it per episode."""

from __future__ import annotations

import asyncio

import pytest

from agentcanvas.eval.episode import CancelEvent

pytestmark = pytest.mark.asyncio


async def test_callbacks_run_once_when_it_is_set_and_not_after_removal() -> None:
    event = CancelEvent()
    calls: list[str] = []
    remove_a = event.on_set(lambda: calls.append("a"))
    event.on_set(lambda: calls.append("b"))
    remove_a()
    event.set()
    event.set()  # already set: nobody is called again
    assert calls == ["b"] and event.is_set()
    event.on_set(lambda: calls.append("late"))  # set already: the caller checks is_set
    assert calls == ["b"]
    event.clear()
    event.set()
    assert sorted(calls) == ["b", "b", "late"]


async def test_it_still_wakes_what_waits_on_it() -> None:
    event = CancelEvent()
    waiter = asyncio.ensure_future(event.wait())
    await asyncio.sleep(0)
    event.set()
    assert await asyncio.wait_for(waiter, 1.0) is True


async def test_a_callback_may_remove_itself_while_the_event_is_being_set() -> None:
    event = CancelEvent()
    calls: list[int] = []
    removers: list[object] = []

    def once() -> None:
        calls.append(1)
        remover = removers[0]
        assert callable(remover)
        remover()

    removers.append(event.on_set(once))
    event.on_set(lambda: calls.append(2))
    event.set()
    assert sorted(calls) == [1, 2]
