"""How often a run's live aggregates are recomputed: a cost that stays flat per episode.

A refresh recomputes every aggregate from all results so far (O(results); the final summary
must not depend on completion order, so they are never accumulated). :func:`pace_refreshes`
runs one after new results arrive, at least ``min_interval_s`` apart, within a time budget
that grows by ``duty`` of the wall time (so refreshes take at most that share of it) and
holds at most ``burst_s`` — a one-off slow refresh (the first, which imports the statistics
code; a moment of load) spends the burst instead of stalling the view for cost / duty — and
no more than ``cpu_per_result_s`` per result that came in since the last one, unless
``max_interval_s`` have passed, so a slow run's view still moves; meanwhile new results only
rewrite the summary's counts. Whatever the rate, the head spends a bounded share of its time
and, at high rates, a bounded amount per episode on them.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

__all__ = ["LIVE_PACING", "Pacing", "pace_refreshes"]


@dataclass(frozen=True)
class Pacing:
    """The limits of :func:`pace_refreshes` (seconds, or a share of the wall time)."""

    min_interval_s: float = 0.25  # refreshed at most this often
    duty: float = 0.03  # taking at most this share of the run's wall time, in the long run
    burst_s: float = 1.0  # of which this much may be spent at once
    cpu_per_result_s: float = 0.0001  # and at most this per new result
    max_interval_s: float = 0.5  # unless this long has passed: a slow run's view moves


LIVE_PACING = Pacing()


async def pace_refreshes(
    refresh: Callable[[], Awaitable[None]],
    save_counts: Callable[[], Awaitable[None]],
    new_results: asyncio.Event,
    stored: Callable[[], int],
    pacing: Pacing = LIVE_PACING,
) -> None:
    """Run ``refresh`` after ``new_results`` is set, paced as the module says; ``stored``
    counts the results so far. Between two refreshes, new results get ``save_counts`` (the
    summary with its counts, at most every ``min_interval_s``), so the live summary still
    follows every result within a moment. Until cancelled (its caller owns the task)."""
    budget, last = pacing.burst_s, time.monotonic()
    while True:
        await new_results.wait()
        new_results.clear()
        started, before = time.monotonic(), stored()
        budget = min(pacing.burst_s, budget + (started - last) * pacing.duty)
        await refresh()
        last = time.monotonic()
        cost = last - started
        budget -= cost
        # until the budget is back to zero, and at least min_interval_s after the start
        await asyncio.sleep(max(pacing.min_interval_s - cost, -budget / pacing.duty, 0.0))
        worth = before + cost / pacing.cpu_per_result_s
        deadline = started + pacing.max_interval_s
        while stored() < worth and (left := deadline - time.monotonic()) > 0:
            try:
                async with asyncio.timeout(left):
                    await new_results.wait()
            except TimeoutError:
                break
            new_results.clear()
            await save_counts()
            await asyncio.sleep(pacing.min_interval_s)
        if stored() != before:  # what came in meanwhile is refreshed next (nothing: no work)
            new_results.set()
