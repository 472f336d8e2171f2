"""CancelEvent: the run's cancel flag, an asyncio.Event whose callbacks cut the episodes in
flight short (`episode._run_guarded`) without a task waiting on it per episode; the outcomes
of `_run_guarded`; and a worker's hand-over of a finished episode (`local_workers._Recording`)
when the worker fails."""

from __future__ import annotations

import asyncio
from typing import cast

import pytest

from agentcanvas.eval.episode import CancelEvent, EpisodeOptions, _run_guarded
from agentcanvas.eval.episode_log import EpisodeLog
from agentcanvas.eval.local_workers import _handed_over, _Recording
from agentcanvas.graph.executor import EpisodeContext
from agentcanvas.graph.loop_runner import LoopRunner
from agentcanvas.graph.model import Graph

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


class _Loop:
    """A stand-in LoopRunner: ``run`` naps ``nap_s``; cancelled, it takes ``unwind_s`` to
    unwind (a node's cleanup) and then raises ``unwind_error`` (or the cancel)."""

    def __init__(
        self,
        nap_s: float,
        unwind_s: float = 0.0,
        unwind_error: BaseException | None = None,
        raises: BaseException | None = None,
    ) -> None:
        self.nap_s, self.unwind_s = nap_s, unwind_s
        self.unwind_error, self.raises = unwind_error, raises

    async def run(self, graph: object, episode: object, step_budget_override: int) -> str:
        try:
            await asyncio.sleep(self.nap_s)
        except asyncio.CancelledError:
            await asyncio.shield(asyncio.sleep(self.unwind_s))
            if self.unwind_error is not None:
                raise self.unwind_error from None
            raise
        if self.raises is not None:
            raise self.raises
        return "ran"


async def _guarded(
    loop: _Loop, cancel: CancelEvent | None, timeout_s: float = 5.0
) -> tuple[object, object]:
    options = EpisodeOptions(per_step_timeout_s=1.0, episode_timeout_s=timeout_s, cancel=cancel)
    runner = cast(LoopRunner, loop)
    return await _run_guarded(runner, cast(Graph, None), EpisodeContext(), 1, options)


async def test_the_loop_s_result_its_failure_the_timeout_and_the_cancel() -> None:
    assert await _guarded(_Loop(0.0), CancelEvent()) == (None, "ran")
    with pytest.raises(TimeoutError):  # the loop's own, not the episode's
        await _guarded(_Loop(0.0, raises=TimeoutError()), CancelEvent())
    assert await _guarded(_Loop(10.0), None, timeout_s=0.05) == ("timeout", None)
    early = CancelEvent()
    early.set()
    assert await _guarded(_Loop(10.0), early) == ("cancelled", None)
    later = CancelEvent()
    asyncio.get_running_loop().call_later(0.05, later.set)
    assert await _guarded(_Loop(10.0), later) == ("cancelled", None)
    assert later._callbacks == set()  # removed on the way out


async def test_a_cancel_while_a_timed_out_loop_unwinds_is_a_timeout_and_raises_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The episode's timeout fired; its loop takes 0.2 s to unwind; the run is cancelled in
    between (another worker spent the error budget): that episode stays a timeout, and
    whoever set the event is not hurt (nor is a callback's failure logged)."""
    cancel = CancelEvent()
    asyncio.get_running_loop().call_later(0.15, cancel.set)
    assert await _guarded(_Loop(10.0, unwind_s=0.2), cancel, timeout_s=0.05) == ("timeout", None)
    assert cancel.is_set()
    assert not [r for r in caplog.records if r.levelname == "ERROR"]


async def test_a_failing_callback_is_logged_and_the_others_still_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    event = CancelEvent()
    calls: list[str] = []

    def fails() -> None:
        raise RuntimeError("boom")

    event.on_set(fails)
    event.on_set(lambda: calls.append("ran"))
    event.set()
    assert calls == ["ran"] and "a cancel callback failed" in caplog.text


async def test_a_loop_that_fails_while_it_unwinds_after_its_timeout_is_a_timeout() -> None:
    loop = _Loop(10.0, unwind_error=RuntimeError("cleanup failed"))
    assert await _guarded(loop, None, timeout_s=0.05) == ("timeout", None)


class _Log:
    def __init__(self) -> None:
        self.discarded = 0

    def discard(self) -> None:
        self.discarded += 1


async def test_a_hand_over_dropped_before_it_started_discards_its_log() -> None:
    """The worker fails before its last episode's hand-over ran at all (its task never
    started): the log of that record, never admitted, is discarded all the same."""
    started: list[bool] = []

    async def hand_over() -> None:
        started.append(True)

    log = _Log()
    recording = _Recording(asyncio.ensure_future(hand_over()), cast(EpisodeLog, log))
    await recording.drop()
    assert started == [] and log.discarded == 1


async def test_a_hand_over_that_failed_is_retrieved_and_one_that_succeeded_is_kept() -> None:
    async def fails() -> None:
        raise OSError("disk")

    async def admitted() -> None:
        return None

    failed_log, kept_log = _Log(), _Log()
    failed = _Recording(asyncio.ensure_future(fails()), cast(EpisodeLog, failed_log))
    kept = _Recording(asyncio.ensure_future(admitted()), cast(EpisodeLog, kept_log))
    await asyncio.sleep(0)
    with pytest.raises(OSError):
        await _handed_over(failed)
    await failed.drop()  # done with its failure: retrieved, no "never retrieved" warning
    await _handed_over(kept)
    await kept.drop()
    assert kept_log.discarded == 0  # admitted: the writer owns it
