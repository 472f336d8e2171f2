"""WorkStealingDispatcher: contiguous starts, steals from the tail of the longest chunk."""

from __future__ import annotations

import random

import pytest

from agentcanvas.errors import StateError
from agentcanvas.eval.dispatch import WorkStealingDispatcher
from agentcanvas.eval.worker_pool import partition_contiguous


def drain(dispatcher: WorkStealingDispatcher, worker_id: int) -> list[int]:
    taken = []
    while (index := dispatcher.next_for(worker_id)) is not None:
        taken.append(index)
    return taken


def test_each_worker_starts_on_the_head_of_its_own_chunk() -> None:
    dispatcher = WorkStealingDispatcher(partition_contiguous(range(10), 3))
    assert [dispatcher.next_for(k) for k in (2, 0, 1)] == [7, 0, 4]
    assert [dispatcher.next_for(k) for k in (0, 1, 2)] == [1, 5, 8]
    assert all(s.steals == 0 for s in dispatcher.stats)


def test_an_idle_worker_steals_the_last_episode_of_the_longest_remaining_chunk() -> None:
    dispatcher = WorkStealingDispatcher([[0, 1], [2, 3, 4, 5], [6, 7, 8]])
    assert [dispatcher.next_for(1), dispatcher.next_for(2)] == [2, 6]  # busy on their heads
    # Chunk 1 has 3 left, chunk 2 has 2: 5; then a tie (2, 2) goes to chunk 1: 4; and so on.
    assert drain(dispatcher, 0) == [0, 1, 5, 4, 8, 3, 7]
    assert drain(dispatcher, 1) == drain(dispatcher, 2) == []
    assert dispatcher.remaining == 0
    assert [(s.episodes, s.steals) for s in dispatcher.stats] == [(7, 5), (1, 0), (1, 0)]


def test_a_tie_goes_to_the_lowest_worker_id() -> None:
    dispatcher = WorkStealingDispatcher([[], [1, 2], [3, 4]])
    assert dispatcher.next_for(0) == 2
    assert dispatcher.next_for(0) == 4  # now chunk 2 is the longest


@pytest.mark.parametrize("workers", [1, 2, 3, 4, 8])
def test_every_index_is_handed_out_exactly_once_in_any_interleaving(workers: int) -> None:
    indices = list(range(3, 40))
    rng = random.Random(workers)
    dispatcher = WorkStealingDispatcher(partition_contiguous(indices, workers))
    handed: list[int] = []
    active = list(range(workers))
    while active:
        worker = rng.choice(active)
        index = dispatcher.next_for(worker)
        if index is None:
            active.remove(worker)
        else:
            handed.append(index)
    assert sorted(handed) == indices
    assert sum(s.episodes for s in dispatcher.stats) == len(indices)
    assert dispatcher.next_for(0) is None and dispatcher.remaining == 0


def test_task_switches_count_changes_of_task_on_one_worker() -> None:
    tasks = {i: "a" if i < 4 else "b" for i in range(8)}
    dispatcher = WorkStealingDispatcher([[0, 1, 2], [3, 4, 5, 6, 7]], tasks)
    assert dispatcher.next_for(1) == 3  # its first episode is no switch
    assert drain(dispatcher, 0) == [0, 1, 2, 7, 6, 5, 4]  # a a a | b b b b: one switch
    assert drain(dispatcher, 1) == []
    stats = dispatcher.stats
    assert [(s.worker_id, s.episodes, s.task_switches, s.steals) for s in stats] == [
        (0, 7, 1, 4),
        (1, 1, 0, 0),
    ]


def test_one_worker_runs_its_chunk_in_order_with_no_steals() -> None:
    tasks = {i: "ab"[i // 3] for i in range(6)}
    dispatcher = WorkStealingDispatcher(partition_contiguous(range(6), 1), tasks)
    assert drain(dispatcher, 0) == [0, 1, 2, 3, 4, 5]
    assert dispatcher.stats[0].model_dump() == {
        "worker_id": 0,
        "episodes": 6,
        "task_switches": 1,
        "steals": 0,
    }


def test_bad_input_is_refused() -> None:
    with pytest.raises(StateError, match="repeat"):
        WorkStealingDispatcher([[0, 1], [1, 2]])
    dispatcher = WorkStealingDispatcher([[0], [1]])
    with pytest.raises(StateError, match="no worker 2"):
        dispatcher.next_for(2)


def test_without_stealing_each_worker_only_gets_its_own_chunk() -> None:
    dispatcher = WorkStealingDispatcher([[0, 1], [2, 3, 4]], steal=False)
    assert drain(dispatcher, 0) == [0, 1]
    assert dispatcher.remaining == 3
    assert drain(dispatcher, 1) == [2, 3, 4]
    assert [s.steals for s in dispatcher.stats] == [0, 0]
