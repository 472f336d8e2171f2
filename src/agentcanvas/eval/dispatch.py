"""WorkStealingDispatcher: which episode a worker runs next (plain synchronous code).

Each worker starts on its own contiguous chunk (numpy ``array_split``, as
:func:`agentcanvas.eval.worker_pool.partition_contiguous` makes them), taken from its head, so
task switches stay as few as fixed chunks give. A worker whose chunk is empty takes the last
episode of the longest remaining chunk (ties: the lowest worker id), one at a time, so work
moves only where it is left. Every index is handed out exactly once.

Which worker runs an episode never changes its result: seeds come from the episode's
identity and per-episode state is reset by the panel's episode call and evicted when the
episode ends. The per-worker stats (episodes, task switches, steals) depend on timing; they
go into the run summary, outside the per-episode records that invariance compares.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence

from agentcanvas.errors import StateError
from agentcanvas.eval.config import WorkerStats


class WorkStealingDispatcher:
    """Hands out episode indices: own chunk from its head, then steals from the longest tail."""

    def __init__(
        self,
        chunks: Sequence[Sequence[int]],
        tasks: Mapping[int, str] | None = None,
        *,
        steal: bool = True,
    ) -> None:
        """``tasks``: each index's task (for the task-switch count); ``steal=False``: fixed
        contiguous chunks, each worker only ever gets its own (what the dispatch used to be)."""
        seen = [i for chunk in chunks for i in chunk]
        if len(set(seen)) != len(seen):
            raise StateError("dispatcher chunks repeat an episode index")
        self._chunks = [deque(chunk) for chunk in chunks]
        self._tasks = dict(tasks or {})
        self._steal = steal
        self._last_task: list[str | None] = [None] * len(chunks)
        self.stats = [WorkerStats(worker_id=k) for k in range(len(chunks))]

    @property
    def remaining(self) -> int:
        """Episodes not handed out yet."""
        return sum(len(chunk) for chunk in self._chunks)

    def next_for(self, worker_id: int) -> int | None:
        """The next episode index for ``worker_id``, or None when every one is handed out."""
        if not 0 <= worker_id < len(self._chunks):
            raise StateError(f"no worker {worker_id} (dispatcher has {len(self._chunks)})")
        own = self._chunks[worker_id]
        if own:
            return self._hand_out(worker_id, own.popleft(), stolen=False)
        victim = self._longest_chunk() if self._steal else None
        if victim is None:
            return None
        return self._hand_out(worker_id, self._chunks[victim].pop(), stolen=True)

    def _longest_chunk(self) -> int | None:
        """The worker whose chunk has the most episodes left (lowest id on a tie)."""
        longest = max(range(len(self._chunks)), key=lambda k: len(self._chunks[k]), default=None)
        if longest is None or not self._chunks[longest]:
            return None
        return longest

    def _hand_out(self, worker_id: int, index: int, *, stolen: bool) -> int:
        stats = self.stats[worker_id]
        task = self._tasks.get(index)
        previous = self._last_task[worker_id]
        if stats.episodes and task != previous:
            stats.task_switches += 1
        self._last_task[worker_id] = task
        stats.episodes += 1
        stats.steals += stolen
        return index


class InOrderDispatcher(WorkStealingDispatcher):
    """Hands out episodes in one given order, to whichever worker asks first: a run with a
    stop rule decides on the plan-order prefix of finished episodes (``eval.stopping``), so
    its episodes start in that order and the prefix keeps up with the work."""

    def __init__(self, order: Sequence[int], tasks: Mapping[int, str] | None = None) -> None:
        super().__init__([order], tasks)
        self._queue = self._chunks[0]

    def with_workers(self, worker_count: int) -> InOrderDispatcher:
        """Stats for ``worker_count`` workers (they all draw from the one queue)."""
        self._last_task = [None] * worker_count
        self.stats = [WorkerStats(worker_id=k) for k in range(worker_count)]
        return self

    def next_for(self, worker_id: int) -> int | None:
        if worker_id < 0:
            raise StateError(f"no worker {worker_id}")
        while worker_id >= len(self.stats):  # a slot that joined later (an elastic cluster)
            self._last_task.append(None)
            self.stats.append(WorkerStats(worker_id=len(self.stats)))
        if not self._queue:
            return None
        return self._hand_out(worker_id, self._queue.popleft(), stolen=False)
