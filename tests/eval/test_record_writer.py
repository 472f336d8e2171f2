"""GroupCommitWriter (eval/record_writer.py) on a real run folder: a record is acknowledged
only after a sync that covered its episode.json, and a group whose sync fails acknowledges
nothing and leaves no episode.json behind (resume would take it for a finished episode).

The sync is observed by wrapping the writer's own: ``FilesystemSync.sync`` where syncfs is
used, ``sync_folder`` elsewhere — a SIGKILL test cannot show this, the page cache survives
it."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest

import agentcanvas.eval.record_writer as record_writer
from agentcanvas.errors import DiskFullError, RunError
from agentcanvas.eval.config import EpisodeResult
from agentcanvas.eval.record_writer import GroupCommitWriter, PendingRecord
from agentcanvas.eval.store import RunDir
from agentcanvas.fileio import encode_json

pytestmark = pytest.mark.asyncio

EPISODES = 40


def _record(index: int, nbytes: int = 0) -> PendingRecord:
    """Episode ``index``'s record, its episode.json padded (with JSON's own whitespace) so
    that the record counts ``nbytes`` against the queue's bytes when that is more."""
    result = EpisodeResult(index=index, episode_index=index, seed=index, status="completed")
    body = encode_json(Path("episode.json"), result.model_dump(mode="json"))
    line = body + b"\n"
    padding = b" " * max(0, nbytes - len(body) - len(line))
    return PendingRecord(result, body + padding, line, None)


def _on_disk(run_dir: RunDir) -> set[int]:
    return {int(p.parent.name[2:]) for p in run_dir.episodes_dir.glob("ep*/episode.json")}


class Journal:
    """What happened, in order: ('sync', indices on disk when it ran) and ('ack', indices)."""

    def __init__(self, run_dir: RunDir) -> None:
        self.run_dir = run_dir
        self.events: list[tuple[str, frozenset[int]]] = []
        self.disk_full: list[DiskFullError] = []
        self.fail_sync = False  # the next syncs raise a full disk

    def synced(self) -> None:
        self.events.append(("sync", frozenset(_on_disk(self.run_dir))))

    def committed(self, group: list[PendingRecord], loop: asyncio.AbstractEventLoop) -> None:
        self.events.append(("ack", frozenset(r.result.index for r in group)))


@pytest.fixture
def journal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Journal:
    run_dir = RunDir(tmp_path / "run")
    run_dir.create()
    journal = Journal(run_dir)

    def observed(original: Any) -> Any:
        def sync(*args: Any) -> None:
            if journal.fail_sync:
                raise DiskFullError(f"No space left on device: {run_dir.episodes_dir}")
            original(*args)
            journal.synced()

        return sync

    if record_writer.HAS_SYNCFS:
        sync_class = record_writer.FilesystemSync
        monkeypatch.setattr(sync_class, "sync", observed(sync_class.sync))
    else:
        monkeypatch.setattr(record_writer, "sync_folder", observed(record_writer.sync_folder))
    return journal


def _writer(journal: Journal) -> GroupCommitWriter:
    return GroupCommitWriter(journal.run_dir, journal.committed, journal.disk_full.append)


async def test_each_record_is_acknowledged_after_a_sync_that_covered_it(journal: Journal) -> None:
    writer = _writer(journal)
    for index in range(EPISODES):
        await writer.submit(_record(index))
        if index % 7 == 0:
            await asyncio.sleep(0)  # let groups of several sizes form
    await writer.drain()
    acked: set[int] = set()
    last_sync: frozenset[int] = frozenset()
    for kind, indices in journal.events:
        if kind == "sync":
            last_sync = indices
        else:
            assert indices <= last_sync, (sorted(indices - last_sync), journal.events)
            acked |= indices
    assert acked == set(range(EPISODES)) == _on_disk(journal.run_dir)


async def test_a_group_whose_sync_fails_acknowledges_nothing_and_leaves_no_record(
    journal: Journal,
) -> None:
    writer = _writer(journal)
    await writer.submit(_record(0))
    await writer.drain()  # one record written and acknowledged
    journal.fail_sync = True
    for index in range(1, 6):
        await writer.submit(_record(index))
    await writer.drain()
    acked = {i for kind, group in journal.events if kind == "ack" for i in group}
    assert acked == {0} == _on_disk(journal.run_dir)  # the failed group's files are gone
    assert journal.disk_full, "the full disk was not reported to the run"


async def test_a_sync_error_other_than_a_full_disk_fails_the_run(
    journal: Journal, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: Any) -> None:
        raise RunError("cannot sync: Input/output error")

    if record_writer.HAS_SYNCFS:
        monkeypatch.setattr(record_writer.FilesystemSync, "sync", broken)
    else:
        monkeypatch.setattr(record_writer, "sync_folder", broken)
    writer = _writer(journal)
    await writer.submit(_record(0))
    with pytest.raises(RunError, match="Input/output error"):
        await writer.drain()
    assert journal.events == [] and _on_disk(journal.run_dir) == set()


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
async def test_a_writer_thread_that_dies_fails_drain_instead_of_hanging_it(
    journal: Journal, monkeypatch: pytest.MonkeyPatch
) -> None:
    def dies(self: GroupCommitWriter, group: list[PendingRecord]) -> bool:
        raise MemoryError("the writer thread dies")  # escapes the thread: nothing settles

    monkeypatch.setattr(GroupCommitWriter, "_settle", dies)
    writer = _writer(journal)
    await writer.submit(_record(0))
    with pytest.raises(RunError, match=r"ended with 1 record\(s\) unwritten"):
        await asyncio.wait_for(writer.drain(), 10 * record_writer.WATCH_S)
    assert journal.events == []


async def test_waiting_submits_are_admitted_in_the_order_they_came(
    journal: Journal, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A large record (frames, say) that does not fit beside the queued ones waits; the small
    ones that come after it wait behind it although they would fit, so it is not starved."""
    monkeypatch.setattr(record_writer, "MAX_PENDING_BYTES", 10_000)
    writer = _writer(journal)
    sizes = [2_000] * 4 + [5_000] + [800] * 6  # the 5th does not fit beside the first four
    assert sum(sizes[:4]) + sizes[5] <= record_writer.MAX_PENDING_BYTES  # the 6th would
    assert [_record(i, n).nbytes for i, n in enumerate(sizes)] == sizes
    admitted: list[int] = []

    async def send(index: int) -> None:
        await writer.submit(_record(index, sizes[index]))
        admitted.append(index)

    await asyncio.gather(*(send(index) for index in range(len(sizes))))
    await writer.drain()
    assert admitted == list(range(len(sizes)))
    assert _on_disk(journal.run_dir) == set(range(len(sizes)))


async def test_a_submit_cancelled_while_it_waits_leaves_the_line(
    journal: Journal, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(record_writer, "MAX_PENDING_BYTES", 10_000)
    gate = threading.Event()  # the writer commits nothing until the line has formed
    settle = GroupCommitWriter._settle

    def held(self: GroupCommitWriter, group: list[PendingRecord]) -> bool:
        gate.wait(30.0)
        return settle(self, group)

    monkeypatch.setattr(GroupCommitWriter, "_settle", held)
    writer = _writer(journal)
    await writer.submit(_record(0, 6_000))
    big = asyncio.create_task(writer.submit(_record(1, 6_000)))  # waits: 12,000 > 10,000
    small = asyncio.create_task(writer.submit(_record(2, 800)))  # waits behind it
    await asyncio.sleep(0.05)
    assert not big.done() and not small.done()
    big.cancel()
    gate.set()
    await asyncio.gather(small, return_exceptions=True)
    assert small.result() is None  # admitted: the line moved on without the cancelled one
    await writer.drain()
    assert writer.pending == 0 and _on_disk(journal.run_dir) == {0, 2}


# -- the commit cadence: one sync per COMMIT_INTERVAL_S at most ----------------------------------


def _acked(journal: Journal) -> set[int]:
    return {i for kind, group in journal.events if kind == "ack" for i in group}


async def _until_acked(journal: Journal, indices: set[int], within_s: float = 5.0) -> None:
    async with asyncio.timeout(within_s):
        while not indices <= _acked(journal):
            await asyncio.sleep(0.005)


async def _one_committed(journal: Journal) -> GroupCommitWriter:
    """A writer whose first record is committed (at once: none came before it), so that the
    next commit waits for the interval."""
    writer = _writer(journal)
    await writer.submit(_record(0))
    await _until_acked(journal, {0})
    return writer


async def test_records_that_come_within_the_interval_share_a_commit(journal: Journal) -> None:
    """Twenty records 2 ms apart: without the cadence each would have its own sync (one
    takes well under 2 ms here); with it they gather, a commit per COMMIT_INTERVAL_S."""
    assert record_writer.COMMIT_INTERVAL_S >= 0.01  # the gap below is well inside it
    writer = _writer(journal)
    for index in range(20):
        await writer.submit(_record(index))
        await asyncio.sleep(0.002)
    await _until_acked(journal, set(range(20)))  # without drain: the cadence alone commits
    commits = sum(kind == "ack" for kind, _ in journal.events)  # (syncs: one per folder
    assert commits <= 6, journal.events  # where syncfs is not to be had)
    await writer.drain()
    assert _acked(journal) == set(range(20)) == _on_disk(journal.run_dir)


async def test_a_drain_commits_what_is_queued_without_waiting(
    journal: Journal, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(record_writer, "COMMIT_INTERVAL_S", 600.0)
    writer = await _one_committed(journal)
    await writer.submit(_record(1))  # would wait 600 s for the next commit
    await asyncio.sleep(0.05)
    assert _acked(journal) == {0}  # gathering
    await asyncio.wait_for(writer.drain(), 5.0)
    assert _acked(journal) == {0, 1} == _on_disk(journal.run_dir)


async def test_a_full_group_is_committed_without_waiting(
    journal: Journal, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(record_writer, "COMMIT_INTERVAL_S", 600.0)
    monkeypatch.setattr(record_writer, "MAX_GROUP", 4)
    writer = await _one_committed(journal)
    for index in range(1, 5):  # a group's worth: no wait for the interval
        await writer.submit(_record(index))
    await _until_acked(journal, {1, 2, 3, 4})
    await writer.drain()


async def test_a_submit_waiting_for_room_is_not_kept_waiting_by_the_interval(
    journal: Journal, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full queue holds the workers back: the writer commits at once, not at the next
    interval."""
    monkeypatch.setattr(record_writer, "COMMIT_INTERVAL_S", 600.0)
    monkeypatch.setattr(record_writer, "MAX_PENDING", 2)
    writer = await _one_committed(journal)
    await asyncio.sleep(0.05)  # its room given back
    await writer.submit(_record(1))
    await asyncio.sleep(0.05)  # the writer gathers: its next commit 600 s away
    await writer.submit(_record(2))  # the queue is full now
    await asyncio.wait_for(writer.submit(_record(3)), 5.0)  # waits for room, then gets it
    await writer.drain()
    assert _acked(journal) == {0, 1, 2, 3}


async def test_a_record_reaches_an_idle_writer_at_once(
    journal: Journal, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer thread waiting for work (up to LINGER_S) is woken by the next record."""
    monkeypatch.setattr(record_writer, "COMMIT_INTERVAL_S", 0.0)
    monkeypatch.setattr(record_writer, "LINGER_S", 600.0)
    writer = await _one_committed(journal)
    await asyncio.sleep(0.05)  # the thread waits for more
    await writer.submit(_record(1))
    await _until_acked(journal, {1})
    await writer.drain()
