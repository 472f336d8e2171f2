"""How often a run's live aggregates are recomputed: a cost that stays flat per episode.

A refresh recomputes every aggregate from all results so far (O(results); the final summary
must not depend on completion order, so they are never accumulated). :func:`pace_refreshes`
runs one after new results arrive, at most LIVE_AGGREGATE_DUTY of the wall time, at least
LIVE_AGGREGATE_MIN_INTERVAL_S apart, and no more than LIVE_AGGREGATE_CPU_PER_RESULT_S per
result that came in since the last one — unless LIVE_AGGREGATE_MAX_INTERVAL_S have passed,
so a slow run's view still moves; meanwhile new results only rewrite the summary's counts.
Whatever the rate, the head spends a bounded share of its time and a bounded amount per
episode on them.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Final

__all__ = [
    "LIVE_AGGREGATE_CPU_PER_RESULT_S",
    "LIVE_AGGREGATE_DUTY",
    "LIVE_AGGREGATE_MAX_INTERVAL_S",
    "LIVE_AGGREGATE_MIN_INTERVAL_S",
    "pace_refreshes",
]

LIVE_AGGREGATE_MIN_INTERVAL_S: Final = 0.25  # refreshed at most this often
LIVE_AGGREGATE_DUTY: Final = 0.03  # taking at most this share of the run's wall time
LIVE_AGGREGATE_CPU_PER_RESULT_S: Final = 0.0001  # and at most this per new result
LIVE_AGGREGATE_MAX_INTERVAL_S: Final = 0.5  # unless this long has passed: a slow run moves


async def pace_refreshes(
    refresh: Callable[[], Awaitable[None]],
    save_counts: Callable[[], Awaitable[None]],
    new_results: asyncio.Event,
    stored: Callable[[], int],
) -> None:
    """Run ``refresh`` after ``new_results`` is set, paced as the module says; ``stored``
    counts the results so far. Between two refreshes, new results get ``save_counts`` (the
    summary with its counts, at most every LIVE_AGGREGATE_MIN_INTERVAL_S), so the live
    summary still follows every result within a moment. Until cancelled (its caller owns
    the task)."""
    while True:
        await new_results.wait()
        new_results.clear()
        started, before = time.monotonic(), stored()
        await refresh()
        cost = time.monotonic() - started
        period = max(LIVE_AGGREGATE_MIN_INTERVAL_S, cost / LIVE_AGGREGATE_DUTY)
        await asyncio.sleep(period - cost)
        worth = before + cost / LIVE_AGGREGATE_CPU_PER_RESULT_S
        deadline = started + LIVE_AGGREGATE_MAX_INTERVAL_S
        while stored() < worth and (left := deadline - time.monotonic()) > 0:
            try:
                async with asyncio.timeout(left):
                    await new_results.wait()
            except TimeoutError:
                break
            new_results.clear()
            await save_counts()
            await asyncio.sleep(LIVE_AGGREGATE_MIN_INTERVAL_S)
        new_results.set()  # what came in meanwhile is refreshed next
