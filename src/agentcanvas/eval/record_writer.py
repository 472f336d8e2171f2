"""GroupCommitWriter: episode records written by one thread, in groups, durable before they count.

The run's recorder hands each finished episode here (:meth:`GroupCommitWriter.submit`): its
record already encoded and its own files (``EpisodeFiles``). ``submit`` returns once the
record is *admitted* — queued, at most MAX_PENDING records or MAX_PENDING_BYTES in all; a
full queue makes ``submit`` wait, so the workers that await it take no new episode until the
head has caught up (backpressure: nothing is dropped, memory stays bounded). Waiting submits
are admitted in the order they came, and none is passed by a later one: a large record (an
episode with frames) waiting for bytes to free is not starved by small ones that would fit.

One thread writes. Its commits start at most every COMMIT_INTERVAL_S: the records admitted
in between gather into one group, unless MAX_GROUP of them are waiting, a submit waits for
space, or the run drains (its end: what is queued is committed at once). It takes every
admitted record (at most MAX_GROUP) at once and writes each episode's files and its
episode.json (a temp file renamed into place), then *commits* the group: one syncfs(2) of
the run folder's filesystem (Linux 5.8 and newer), which makes every file, rename and
folder of the group durable at once — one fsync per file costs the head a journal commit
per episode; elsewhere one fdatasync per episode.json before its rename and one fsync per
folder (the episode's log and frames are not synced there). Only then does it hand the
group to ``on_committed`` (the recorder: results stored, index lines appended in one write,
counts, events): an episode is *acknowledged* — counted, announced, in the index — only
once its episode.json is durable. While a group commits the next one gathers, so groups
grow with the load. A record that could not be written or synced (a full disk, an I/O
error) is left missing, its episode.json removed: resume runs it again.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from agentcanvas.errors import DiskFullError, RunError
from agentcanvas.eval.config import EpisodeResult
from agentcanvas.eval.episode_log import EpisodeFiles
from agentcanvas.eval.store import RunDir
from agentcanvas.fileio import (
    HAS_SYNCFS,
    FilesystemSync,
    durable_replace,
    sync_folder,
    write_temp,
)

__all__ = [
    "COMMIT_INTERVAL_S",
    "LINGER_S",
    "MAX_GROUP",
    "MAX_PENDING",
    "MAX_PENDING_BYTES",
    "WATCH_S",
    "GroupCommitWriter",
    "PendingRecord",
]

log = logging.getLogger(__name__)

MAX_PENDING: Final = 256  # records admitted and not yet committed
MAX_PENDING_BYTES: Final = 256 * 1024**2  # their bytes (logs, frames): memory stays bounded
MAX_GROUP: Final = 128  # records committed together at most
LINGER_S: Final = 0.5  # an idle writer thread waits this long for more before it ends
# Commits start at most this often. A syncfs costs the head about 0.2 ms of CPU and the
# kernel a journal commit: at a few episodes a second that is nothing, at hundreds (short
# episodes, one worker) one per episode cost about 5 % of the wall time here
# (bench/episode_ab.py). An episode is acknowledged at most this much later than it would
# be without it.
COMMIT_INTERVAL_S: Final = 0.02
WATCH_S: Final = 1.0  # a waiting submit or drain checks this often that the writer lives


@dataclass
class PendingRecord:
    """One admitted episode: its result, its encoded record and index line, its own files."""

    result: EpisodeResult
    episode_json: bytes
    index_line: bytes
    files: EpisodeFiles | None

    @property
    def nbytes(self) -> int:
        own = self.files.nbytes if self.files is not None else 0
        return len(self.episode_json) + len(self.index_line) + own


Committed = Callable[[list[PendingRecord], asyncio.AbstractEventLoop], None]
"""Called in the writer thread with a group whose episode.json files are durable, and the
loop its records came from."""


class GroupCommitWriter:
    """A run's record writer: a bounded admission queue and the thread that drains it.

    The thread starts with the first record and ends after LINGER_S without any; its owner
    awaits :meth:`drain` before the run's final summary (every admitted record written)."""

    def __init__(
        self,
        run_dir: RunDir,
        on_committed: Committed,
        on_disk_full: Callable[[DiskFullError], None],
    ) -> None:
        self.run_dir = run_dir
        self._on_committed, self._on_disk_full = on_committed, on_disk_full
        self._queue: deque[PendingRecord] = deque()
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pending = 0  # admitted, not yet settled (on the loop only)
        self._pending_bytes = 0
        self._settled = asyncio.Event()  # set whenever records settle (space may be free)
        self._waiters: deque[tuple[int, asyncio.Future[None]]] = deque()  # submits, in order
        self._failure: BaseException | None = None  # a write error other than a full disk
        self._sync: FilesystemSync | None = None  # the writer thread's, held while it runs
        self._next_commit = 0.0  # time.monotonic() before which no commit starts
        self._hurry = False  # the run drains: commit what is queued without waiting
        self.groups = 0  # commits made (the bench reports records per commit)

    @property
    def pending(self) -> int:
        """Records admitted and not yet committed (or dropped)."""
        return self._pending

    def full(self, nbytes: int = 0) -> bool:
        """Whether a record of ``nbytes`` must wait for space (one always fits an empty queue)."""
        if not self._pending:
            return False
        return self._pending >= MAX_PENDING or self._pending_bytes + nbytes > MAX_PENDING_BYTES

    async def submit(self, record: PendingRecord) -> None:
        """Admit ``record`` once there is space and every submit that waited before it is
        admitted (waiting is the backpressure); a write error of an earlier record is raised
        here."""
        self._raise_failure()
        nbytes = record.nbytes
        if self._waiters or self.full(nbytes):
            await self._wait_turn(nbytes)  # returns with the record's space reserved
        else:
            self._reserve(nbytes)
        try:
            self._raise_failure()
        except BaseException:
            self._unreserve(nbytes)
            raise
        self._loop = asyncio.get_running_loop()
        with self._cond:
            self._queue.append(record)
            if self._thread is not None:
                if len(self._queue) == 1 or len(self._queue) >= MAX_GROUP:  # else it gathers
                    self._cond.notify()
                return
            name = f"record-writer:{self.run_dir.root.name}"
            thread = threading.Thread(target=self._run, name=name, daemon=True)
            try:
                thread.start()
            except RuntimeError as exc:  # no thread to be had: the record is not admitted
                self._queue.pop()
                self._unreserve(nbytes)
                raise RunError(f"the run's record writer could not start: {exc}") from exc
            self._thread = thread

    async def _wait_turn(self, nbytes: int) -> None:
        """Wait in line until :meth:`_admit_waiters` reserves this record's space; RunError
        when the writer is gone meanwhile. A submit cancelled in line leaves it, giving back
        the space when it had been granted."""
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (nbytes, turn)
        self._waiters.append(entry)
        with self._cond:
            self._cond.notify()  # a writer gathering commits now: the queue is full
        try:
            while not turn.done():
                await asyncio.wait({turn}, timeout=WATCH_S)
                if not turn.done():
                    await asyncio.sleep(0)  # a release the thread has already sent runs first
                    if not turn.done():
                        self._check_writer()
        except BaseException:
            if turn.done():
                self._unreserve(nbytes)
            else:
                self._waiters.remove(entry)
                turn.cancel()
                self._admit_waiters()  # the next in line may fit now
            raise

    def _reserve(self, nbytes: int) -> None:
        self._pending += 1
        self._pending_bytes += nbytes

    def _unreserve(self, nbytes: int) -> None:
        """Give back the space of a record that was not queued after all."""
        self._pending -= 1
        self._pending_bytes -= nbytes
        self._admit_waiters()

    def _admit_waiters(self) -> None:
        """Reserve space for the waiting submits, first come first, while the first fits."""
        while self._waiters:
            nbytes, turn = self._waiters[0]
            if self.full(nbytes):
                return
            self._waiters.popleft()
            self._reserve(nbytes)
            turn.set_result(None)

    async def drain(self) -> None:
        """Until every admitted record is committed (or dropped); raises a write error."""
        with self._cond:
            self._hurry = True  # the run ends: no more gathering
            self._cond.notify()
        while self._pending:
            await self._wait_settled()
        self._raise_failure()

    async def _wait_settled(self) -> None:
        """Until records settle; RunError when none can, the writer thread being gone with
        records still admitted (it died, or the loop it reports to was closed)."""
        self._settled.clear()
        while True:
            try:
                async with asyncio.timeout(WATCH_S):
                    await self._settled.wait()
                return
            except TimeoutError:
                await asyncio.sleep(0)  # a release the thread has already sent runs first
                if self._settled.is_set():
                    return
                self._check_writer()

    def _check_writer(self) -> None:
        """RunError when the writer thread is gone with records still admitted (it died, or
        the loop it reports to was closed): none of them can settle."""
        with self._cond:
            gone = self._thread is None or not self._thread.is_alive()
        if gone and self._pending:
            raise RunError(
                f"the record writer of {self.run_dir.root} ended with "
                f"{self._pending} record(s) unwritten"
            ) from None

    def _raise_failure(self) -> None:
        if self._failure is not None:
            failure, self._failure = self._failure, None
            raise failure

    # -- the writer thread ---------------------------------------------------------------------

    def _run(self) -> None:
        try:
            while True:
                with self._cond:
                    if not self._queue:
                        self._cond.wait(LINGER_S)
                    if not self._queue:
                        self._close_sync()  # before a new thread can open its own
                        self._thread = None  # a submit from here on starts a new thread
                        return
                    self._gather()
                    count = min(MAX_GROUP, len(self._queue))
                    group = [self._queue.popleft() for _ in range(count)]
                if not self._settle(group):
                    log.warning("run %s ended without its records: writer stopped", self.run_dir)
                    with self._cond:
                        self._close_sync()
                        self._thread = None
                    return
        finally:  # a thread that died keeps its place (no other starts): nothing to race
            self._close_sync()

    def _close_sync(self) -> None:
        if self._sync is not None:
            self._sync.close()
            self._sync = None

    def _gather(self) -> None:
        """Under the lock, with records queued: wait until the next commit may start
        (COMMIT_INTERVAL_S after the last one started) while more records gather, unless a
        group's worth is queued, a submit waits for space (the queue is full: the workers
        wait, so gathering would only slow them), or the run drains."""
        while not self._hurry and not self._waiters and len(self._queue) < MAX_GROUP:
            wait = self._next_commit - time.monotonic()
            if wait <= 0:
                break
            self._cond.wait(wait)
        self._next_commit = time.monotonic() + COMMIT_INTERVAL_S

    def _settle(self, group: list[PendingRecord]) -> bool:
        """Commit ``group``, then tell the loop its records are settled (written or not);
        False when the loop is closed (the run ended without waiting: nothing to report to,
        and what is unwritten is run again by a resume)."""
        nbytes = sum(r.nbytes for r in group)
        loop = self._loop
        assert loop is not None  # set by the submit that queued the group
        if loop.is_closed():
            return False
        try:
            self._commit(group, loop)
        except DiskFullError as exc:
            loop.call_soon_threadsafe(self._on_disk_full, exc)
        except Exception as exc:  # the run fails with it: raised by the next submit or drain
            if loop.is_closed():
                return False
            log.exception("recording of episodes %s failed", [r.result.index for r in group])
            self._failure = exc
        try:
            loop.call_soon_threadsafe(self._release, len(group), nbytes)
        except RuntimeError:  # closed meanwhile
            return False
        return True

    def _commit(self, group: list[PendingRecord], loop: asyncio.AbstractEventLoop) -> None:
        """Write the group's files, make its episode.json files durable, then hand it on."""
        written: list[tuple[PendingRecord, int, Path]] = []
        try:
            if HAS_SYNCFS and self._sync is None:  # before the writes its syncs must cover
                self._sync = FilesystemSync(self.run_dir.episodes_dir)
            for record in group:
                written.append(self._write(record))
        except BaseException:
            _abandon(written)
            for record in group[len(written) :]:  # their files are never written
                if record.files is not None:
                    record.files.discard()
            raise
        renamed: list[Path] = []
        try:
            for k, (record, fd, temp) in enumerate(written):
                path = self.run_dir.episode_json_path(record.result.index)
                try:
                    durable_replace(fd, temp, path, sync=not HAS_SYNCFS)
                except BaseException:
                    _abandon(written[k + 1 :])
                    raise
                renamed.append(path)
            self._make_durable(renamed)
        except BaseException:
            # Not acknowledged, so not left to look finished: resume would take an
            # episode.json whose data may never have reached the disk for a recorded one.
            for path in renamed:
                path.unlink(missing_ok=True)
            raise
        self._on_committed(group, loop)

    def _make_durable(self, renamed: list[Path]) -> None:
        """One syncfs for the group (every file, rename and folder in it), or one fsync per
        folder where episode.json files were renamed in."""
        if self._sync is not None:
            self._sync.sync()
            return
        for folder in sorted({self.run_dir.episodes_dir, *(p.parent for p in renamed)}):
            sync_folder(folder)

    def _write(self, record: PendingRecord) -> tuple[PendingRecord, int, Path]:
        """The episode's folder, its own files, then its episode.json as an open temp file."""
        index = record.result.index
        self.run_dir.create_episode(index)
        if record.files is not None:
            record.files.write_rest()
        fd, temp = write_temp(self.run_dir.episode_json_path(index), record.episode_json)
        return record, fd, temp

    def _release(self, n: int, nbytes: int) -> None:
        """On the loop: ``n`` records settled; waiting submits and drains look again."""
        self._pending -= n
        self._pending_bytes -= nbytes
        self.groups += 1
        self._settled.set()
        self._admit_waiters()


def _abandon(written: list[tuple[PendingRecord, int, Path]]) -> None:
    """Close and remove the temp files of records whose group failed."""
    for _, fd, temp in written:
        os.close(fd)
        temp.unlink(missing_ok=True)
