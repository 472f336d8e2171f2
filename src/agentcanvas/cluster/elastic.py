"""RetryingWork: which episode a Ray worker runs next, with lost episodes handed out again.

Episode indices come from the WorkStealingDispatcher (own chunk first, then steals). An
episode whose worker was lost (actor or node gone, or silent past its deadline) goes back
on a retry queue with its attempt count, and the next worker that asks takes it first; its
seed comes from its identity, so the retry scores what the first attempt would have. A
batch that stopped early gives its unrun episodes back, at the same attempt. A worker that
asks while nothing is left to hand out but episodes are still in flight waits: one of them
may come back for a retry.
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass

from agentcanvas.eval.dispatch import WorkStealingDispatcher


@dataclass(frozen=True)
class Assignment:
    """An episode index and which attempt at it this is (1 = first)."""

    index: int
    attempt: int


class RetryingWork:
    """The dispatcher plus a retry queue and an in-flight count (one event loop, no locks)."""

    def __init__(self, dispatcher: WorkStealingDispatcher) -> None:
        self.dispatcher = dispatcher
        self.retry: deque[Assignment] = deque()
        self.in_flight = 0
        self._changed = asyncio.Event()

    @property
    def remaining(self) -> int:
        """Episodes not handed out yet (retries included)."""
        return len(self.retry) + self.dispatcher.remaining

    def finished(self) -> bool:
        """Nothing left to hand out and nothing in flight."""
        return self.remaining == 0 and self.in_flight == 0

    def take(self, worker_id: int) -> Assignment | None:
        """A retry first, else the dispatcher's next; None when there is none right now."""
        if self.retry:
            item = self.retry.popleft()
        else:
            index = self.dispatcher.next_for(worker_id)
            if index is None:
                return None
            item = Assignment(index, 1)
        self.in_flight += 1
        return item

    def give_back(self, items: list[Assignment]) -> None:
        """Assignments taken but not run (their batch stopped early): handed out again
        before anything else, in their order, at the same attempt."""
        self.in_flight -= len(items)
        self.retry.extendleft(reversed(items))
        self._changed.set()

    def done(self, item: Assignment, lost: bool, max_attempts: int) -> bool:
        """The assignment ended; a lost one is queued again while attempts remain.

        Returns whether it was queued for a retry."""
        self.in_flight -= 1
        again = lost and item.attempt < max_attempts
        if again:
            self.retry.append(Assignment(item.index, item.attempt + 1))
        self._changed.set()
        return again

    async def wait_for_change(self, timeout_s: float) -> None:
        """Until an assignment ends (or ``timeout_s``): a retry may have been queued."""
        self._changed.clear()
        try:
            async with asyncio.timeout(timeout_s):
                await self._changed.wait()
        except TimeoutError:
            return
