"""pace_refreshes (eval/live_pacing.py) on a real event loop with real time, its limits scaled
down: a slow first refresh does not stall the live view, a steadily costly one keeps to its
share of the wall time, a slow run's view moves every max_interval_s, and a fast run's
refreshes are paid for by the results that came in."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import Callable

import pytest

from agentcanvas.eval.live_pacing import Pacing, pace_refreshes

pytestmark = pytest.mark.asyncio

SCALED = Pacing(
    min_interval_s=0.01, duty=0.05, burst_s=0.3, cpu_per_result_s=0.001, max_interval_s=0.05
)


class Run:
    """Results arriving every ``every_s`` for ``for_s``; refreshes timed and counted."""

    def __init__(self, costs: Callable[[int], float]) -> None:
        self.costs = costs
        self.results = 0
        self.refreshes: list[tuple[float, float]] = []  # (start, cost)
        self.counts_saved = 0
        self.new = asyncio.Event()

    async def refresh(self) -> None:
        began = time.monotonic()
        time.sleep(self.costs(len(self.refreshes)))  # the refresh's own work, blocking
        self.refreshes.append((began, time.monotonic() - began))

    async def save_counts(self) -> None:
        self.counts_saved += 1

    async def go(self, every_s: float, for_s: float, pacing: Pacing = SCALED) -> float:
        pacer = asyncio.create_task(
            pace_refreshes(self.refresh, self.save_counts, self.new, lambda: self.results, pacing)
        )
        began = time.monotonic()
        try:
            while time.monotonic() - began < for_s:
                self.results += 1
                self.new.set()
                await asyncio.sleep(every_s)
        finally:
            pacer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await pacer
        return time.monotonic() - began


def _gaps(starts: list[float]) -> list[float]:
    return [b - a for a, b in itertools.pairwise(starts)]


async def test_a_slow_first_refresh_spends_the_burst_instead_of_stalling_the_view() -> None:
    run = Run(lambda k: 0.2 if k == 0 else 0.001)  # the first imports the statistics code
    await run.go(every_s=0.02, for_s=1.0)
    starts = [start for start, _ in run.refreshes]
    # Without the burst the view would wait cost / duty = 4 s after the first refresh.
    assert len(starts) >= 8, starts
    assert max(_gaps(starts)) < 0.2 + 0.15, _gaps(starts)


async def test_a_costly_refresh_keeps_to_its_share_of_the_wall_time() -> None:
    run = Run(lambda k: 0.02)
    pacing = Pacing(
        min_interval_s=0.01, duty=0.1, burst_s=0.0, cpu_per_result_s=1e-6, max_interval_s=0.05
    )
    wall = await run.go(every_s=0.005, for_s=1.5, pacing=pacing)
    spent = sum(cost for _, cost in run.refreshes)
    assert len(run.refreshes) >= 3
    assert spent / wall <= pacing.duty + 0.02 + 0.02 / wall, (spent, wall)  # one refresh over


async def test_a_slow_run_is_refreshed_at_least_every_max_interval() -> None:
    run = Run(lambda k: 0.001)  # 1 ms would be worth 1 result at 1 ms per result: never less
    await run.go(every_s=0.03, for_s=0.6)
    gaps = _gaps([start for start, _ in run.refreshes])
    assert gaps and max(gaps) < SCALED.max_interval_s + 0.06, gaps


async def test_a_fast_run_refreshes_once_per_results_worth_and_saves_counts_between() -> None:
    run = Run(lambda k: 0.01)  # worth 10 results at 1 ms a result
    slow = Pacing(
        min_interval_s=0.01, duty=1.0, burst_s=0.0, cpu_per_result_s=0.001, max_interval_s=10.0
    )
    await run.go(every_s=0.001, for_s=0.5, pacing=slow)
    assert len(run.refreshes) >= 2
    assert run.results / len(run.refreshes) >= 8  # each refresh paid for by ~10 new results
    assert run.counts_saved >= 1  # the counts followed the results between refreshes
