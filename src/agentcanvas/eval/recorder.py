"""RunRecorder: what a run writes, apart from whoever runs its episodes.

Both engines' workers hand each finished episode to :meth:`RunRecorder.record` with its own
files (``eval.episode_log.EpisodeFiles``); it returns once the run's writer has admitted
them, and waits while the writer is behind (backpressure: a worker that waits takes no new
episode). What an episode costs the head does not grow with the run: the writer thread
(:mod:`agentcanvas.eval.record_writer`) writes the episodes of a group and makes their
episode.json durable together (a group commit); then, per group, their records are appended
to ``episodes.jsonl`` in one write (see :mod:`agentcanvas.eval.records`), the counts updated
in place, the events sent, and summary.json rewritten atomically (without fsync: recover
rebuilds it) — bounded: counts, status counts and the latest aggregates, no per-episode
records — at most every LIVE_SAVE_MIN_INTERVAL_S, and again by the live aggregates' refresh
that follows new results, so a skipped rewrite is made up within a moment. That rewrite is
the live progress channel (with the events). An episode counts, is announced and is in the
index only once its episode.json is durable: it is *acknowledged*.

Live aggregates are recomputed by one task the runner owns (:meth:`live_summary`), off the
recording path, from a snapshot of the results, as often as their cost allows
(:mod:`agentcanvas.eval.live_pacing`: flat per episode at any rate);
``episodes_aggregated`` says how many results they cover — the first that many lines of the
index. When the run ends the final summary is written once, complete: every record sorted by
index and every aggregate recomputed from the results sorted by index (never accumulated in
completion order), hence bit-identical at any worker count and equal to what
:func:`agentcanvas.eval.records.recorded_results` rebuilds from the episode folders.

The stop rule (``eval.stopping.PrefixWatcher``) is asked after each stored result, under the
same lock: when it decides, results past the plan-order prefix leave the records and the run
is told to stop (``stop_run``). A full disk stops the run too, ``aborted`` and resumable.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agentcanvas.errors import DiskFullError
from agentcanvas.eval import health, metrics, records
from agentcanvas.eval.config import DeterminismInfo, EpisodeResult, EvalRun
from agentcanvas.eval.episode import EpisodeSpec
from agentcanvas.eval.episode_log import EpisodeFiles
from agentcanvas.eval.events import EvalComplete, EvalEpisodeDone, EvalProgress, LiveEvent
from agentcanvas.eval.live_pacing import pace_refreshes
from agentcanvas.eval.record_writer import GroupCommitWriter, PendingRecord
from agentcanvas.eval.run_context import RunContext
from agentcanvas.eval.run_state import TERMINAL_RUN_STATUSES, RunStatus
from agentcanvas.eval.stopping import PrefixWatcher, keep_apart, load_baseline
from agentcanvas.fileio import atomic_write_json, encode_json

__all__ = ["LIVE_SAVE_MIN_INTERVAL_S", "RunRecorder"]

LIVE_SAVE_MIN_INTERVAL_S = 0.2  # a recording rewrites the live summary.json at most this often
log = logging.getLogger(__name__)

StopRun = Callable[[bool], None]
"""Tells the run to stop after the episodes in flight; True: aborted (resumable)."""


@dataclass(frozen=True)
class _EncodedRecord:
    """An episode's record as its files get it: episode.json and its line in the index."""

    episode_json: bytes
    index_line: bytes


class RunRecorder:
    """A run's results by index, their files, the index, the counts, aggregates and summary.

    ``start`` → ``save_live`` → (``record`` per episode, ``live_summary`` beside) →
    ``drain`` → ``close_live`` → a final status (``run.move_to``) → ``finish``; ``save`` at
    any time.
    """

    def __init__(
        self,
        context: RunContext,
        specs: Sequence[EpisodeSpec],
        rules: metrics.MetricRules,
        stop_run: StopRun,
    ) -> None:
        config, run_dir = context.config, context.run_dir
        self.run_dir = run_dir
        self.graph_name = context.graph.name
        self.broadcast = context.broadcast or _no_broadcast
        self._stop_run = stop_run
        self._specs_total = len(specs)
        self._results: dict[int, EpisodeResult] = {}
        # Held by a recording thread while it stores a result, appends its index line and
        # rewrites the live summary, by the live aggregates' snapshot and install, and by
        # every save: a summary on disk pairs its aggregates with their count, the index
        # lines come in the order the results were stored, and a save on the loop never sees
        # a result half stored. Reentrant: a recording saves while it holds it.
        self._state_lock = threading.RLock()
        self._live_closed = False  # set when the workers are done: no live refresh after
        self.disk_full: DiskFullError | None = None  # the first write that found no space
        self._last_word = False  # the bounded summary of a disk-full end is written
        self._status_counts: dict[str, int] = {}
        self._timeouts: set[int] = set()
        self._new_results = asyncio.Event()
        self._saved_live_at = -float("inf")  # monotonic time of the last live summary.json
        self._stored = 0  # results stored so far (a resumed one counts too)
        self._final_for: int | None = None  # _stored when the complete summary was made
        self._episodes_json: list[dict[str, Any]] = []  # the complete summary's records
        baseline = load_baseline(run_dir.root.parent, config)
        self.stop = PrefixWatcher(specs, config, baseline)  # also the live interval of any run
        self.run = _summary(context, len(specs), rules)
        self.writer = GroupCommitWriter(run_dir, self._store_group, self._on_disk_full)
        self._open(context)

    def _open(self, context: RunContext) -> None:
        """The results resumed from, the folder, its frozen graph and its index afresh."""
        for result in context.previous:
            self._store(result)
            self.stop.observe(result)
        self.run_dir.create()
        atomic_write_json(self.run_dir.graph_path, context.graph.model_dump(mode="json"))
        records.start_index(self.run_dir, self._results.values())

    @property
    def results(self) -> Mapping[int, EpisodeResult]:
        """The results stored so far, by index (do not hold on to it across awaits)."""
        return self._results

    def all_finished(self) -> bool:
        """Whether every planned episode has a result that did not end cancelled."""
        return all(
            i in self._results and self._results[i].status != "cancelled"
            for i in range(self._specs_total)
        )

    # -- the run's start and end ---------------------------------------------------------------

    def start(self) -> None:
        """The run is running: its start time, and the disk space its last word needs."""
        self.run.move_to(RunStatus.RUNNING)
        self.run.episodes_complete = False
        self.run.timings["started_at"] = time.time()
        if not self.run_dir.reserve_space():
            log.warning("run %s: no disk space to reserve for its last word", self.run.run_id)

    def save_live(self) -> None:
        """The first live summary: counts of the resumed results; their aggregates follow."""
        self._refresh_progress()
        self._new_results.set()
        self.save()

    def close_live(self) -> None:
        """The workers are done: a refresh already in its thread must not install older
        aggregates over the final summary; from here on it finds the live part closed."""
        with self._state_lock:
            self._live_closed = True

    async def finish(self) -> EvalRun:
        """The run has its final status: its stop report, end time, the complete summary
        (in a thread) and the ``eval_complete`` event."""
        if self.run.status == RunStatus.COMPLETED:
            self.run.stop = self.stop.final()
        self.run.timings["finished_at"] = time.time()
        await asyncio.to_thread(self.save)
        self.broadcast(EvalComplete(run_id=self.run.run_id, status=self.run.status))
        return self.run

    def end_for_full_disk(self, exc: DiskFullError) -> None:
        """A write the run could not recover from found the disk full: ``aborted``."""
        self.disk_full = self.disk_full or exc
        self.run.move_to(RunStatus.ABORTED, str(self.disk_full))

    # -- one episode ---------------------------------------------------------------------------

    async def record(self, result: EpisodeResult, files: EpisodeFiles | None = None) -> None:
        """Admit ``result`` with its ``files`` to the run's writer; returns once admitted,
        waiting while the writer's queue is full (the backpressure on the workers).

        The record is encoded here; the writer thread writes the group it lands in and
        commits it (:mod:`agentcanvas.eval.record_writer`), then :meth:`_store_group` stores
        and announces it. A full disk leaves the episode missing (a resume runs it) and
        stops the run."""
        encoded = self._encode(result)
        pending = PendingRecord(result, encoded.episode_json, encoded.index_line, files)
        await self.writer.submit(pending)

    async def drain(self) -> None:
        """Until every admitted record is written, stored and announced."""
        await self.writer.drain()

    def _encode(self, result: EpisodeResult) -> _EncodedRecord:
        """The bytes of ``result``'s episode.json and of its index line."""
        record = result.model_dump(mode="json")
        episode = {**record, "run_id": self.run.run_id, "graph_name": self.graph_name}
        path = self.run_dir.episode_json_path(result.index)
        return _EncodedRecord(encode_json(path, episode), records.index_line(self.run_dir, record))

    def _store_group(self, group: list[PendingRecord], loop: asyncio.AbstractEventLoop) -> None:
        """A committed group (the writer thread; every episode.json durable): under the state
        lock each result is stored — or kept apart, past a stop rule's decision — its index
        line appended (the group's in one write), the counts updated; then the events, in
        the order the results were stored, each with its own counts, in one hop to the loop."""
        lines, events = bytearray(), []
        announce = self.broadcast is not _no_broadcast  # nobody listens: no events to build
        try:
            with self._state_lock:
                for pending in group:
                    result = pending.result
                    if self.stop.past_stop(result.index):  # in flight when the rule decided
                        self._keep_apart(result.index)
                        continue
                    self._store(result)
                    lines += pending.index_line
                    if announce:
                        done = len(self._results) - self._status_counts.get("cancelled", 0)
                        events.append((result, done, health.error_count(self._status_counts)))
                    if self.stop.observe(result) is not None and self.stop.decided:
                        records.append_line(self.run_dir, bytes(lines))
                        lines.clear()
                        self._stop_at_decision(loop)
                self._persist(bytes(lines))
        finally:  # what was stored is announced, also when a save failed (a full disk)
            if events:
                loop.call_soon_threadsafe(self._announce_all, events)
            loop.call_soon_threadsafe(self._new_results.set)

    def _store(self, result: EpisodeResult) -> None:
        """Keep ``result`` by index and update the counts in place (O(1) per episode)."""
        replaced = self._results.get(result.index)
        if replaced is not None:
            self._status_counts[replaced.status] -= 1
            self._timeouts.discard(replaced.index)
        self._results[result.index] = result
        self._stored += 1
        self._status_counts[result.status] = self._status_counts.get(result.status, 0) + 1
        if result.status == "timeout":
            self._timeouts.add(result.index)

    def _unstore(self, index: int) -> None:
        """Take a stored result out of the run (the counts follow)."""
        result = self._results.pop(index)
        self._status_counts[result.status] -= 1
        self._timeouts.discard(index)
        self._stored += 1  # the complete summary is made again

    def _persist(self, index_line: bytes) -> None:
        """Index lines (their episode.json files are durable), then the bounded summary — at most
        every LIVE_SAVE_MIN_INTERVAL_S: each rewrite creates a file, which costs a worker
        more CPU than a short episode's own work on some filesystems. The live aggregates'
        refresh, which follows every new result, saves what this one skipped."""
        if index_line:
            records.append_line(self.run_dir, index_line)
        self._refresh_progress()
        now = time.monotonic()
        if now - self._saved_live_at >= LIVE_SAVE_MIN_INTERVAL_S:
            self._saved_live_at = now
            self.save()

    def _stop_at_decision(self, loop: asyncio.AbstractEventLoop) -> None:
        """The stop rule decided on the plan-order prefix (state lock held): episodes past it
        that finished already leave the records (their folders go to ``past_stop/``, the
        index is rewritten without them), those in flight end and follow them; no episode
        starts any more. The run's records are then the prefix, the same at any W."""
        for index in [i for i in self._results if self.stop.past_stop(i)]:
            self._unstore(index)
            self._keep_apart(index)
        records.start_index(self.run_dir, self._results.values())
        self._refresh_progress()
        self.run.stop = self.stop.final()
        decision = self.run.stop.decision if self.run.stop else ""
        log.info("run %s: %s after %d episodes", self.run.run_id, decision, self.stop.prefix)
        loop.call_soon_threadsafe(self._stop_run, False)

    def _keep_apart(self, index: int) -> None:
        """Move episode ``index``'s folder to ``past_stop/`` (it finished past the decision)."""
        keep_apart(self.run_dir, index)
        self.stop.kept_apart += 1

    def _on_disk_full(self, exc: DiskFullError) -> None:
        """A write found the disk full: the run stops after the episodes in flight and ends
        ``aborted`` naming the disk (on the loop). An episode whose record could not be
        written is left missing: a resume, once space is freed, runs it again."""
        if self.disk_full is None:
            self.disk_full = exc
            log.error("run %s stops: %s", self.run.run_id, exc)
        self._stop_run(True)

    def _announce_all(self, events: list[tuple[EpisodeResult, int, int]]) -> None:
        """A group's events (on the loop), each with the counts its recording left."""
        for result, episodes_done, errors in events:
            self._announce(result, episodes_done, errors)

    def _announce(self, result: EpisodeResult, episodes_done: int, errors: int) -> None:
        """The episode's events (on the loop), with the counts its recording left."""
        self.broadcast(EvalEpisodeDone(run_id=self.run.run_id, episode=result))
        success = self.run.aggregate_metrics.get("success")
        self.broadcast(
            EvalProgress(
                run_id=self.run.run_id,
                episodes_done=episodes_done,
                episodes_total=self.run.episodes_total,
                success_rate=None if success is None else success.mean,
                success_n=None if success is None else success.n,
                error_count=errors,
                success_cs=[cs.lo, cs.hi] if (cs := self.run.live_interval) else None,
                success_cs_n=cs.n if cs else None,
            )
        )

    # -- the live summary ----------------------------------------------------------------------

    async def live_summary(self) -> None:
        """Refresh the summary's aggregates while the run goes, as often as their cost allows
        (:mod:`agentcanvas.eval.live_pacing`; until cancelled: the runner owns this task).

        Computed in a thread from a snapshot taken under the state lock (every result in it
        is already in the index), and installed under the lock, so a summary on disk always
        pairs its aggregates with their ``episodes_aggregated``.
        """
        await pace_refreshes(
            lambda: self._in_thread(self._refresh_aggregates),
            lambda: self._in_thread(self._save_counts),
            self._new_results,
            lambda: self._stored,
        )

    async def _in_thread(self, write: Callable[[], None]) -> None:
        try:
            await asyncio.to_thread(write)
        except DiskFullError as exc:
            self._on_disk_full(exc)

    def _save_counts(self) -> None:
        """The live summary with the latest counts and the aggregates it has (a thread)."""
        with self._state_lock:
            if not self._live_closed:
                self.save()

    def _refresh_aggregates(self) -> None:
        """Aggregates of the results stored so far, then the summary with them (a thread)."""
        with self._state_lock:
            snapshot = list(self._results.values())
        overall, by_task = _aggregates(snapshot, self.run.metric_rules)
        with self._state_lock:
            if self._live_closed:  # the run's end took over: its summary is complete
                return
            self.run.aggregate_metrics, self.run.aggregate_by_task = overall, by_task
            self.run.episodes_aggregated = len(snapshot)
            self.run.live_interval = self.stop.live()
            self.save()  # these aggregates, the latest counts

    def _refresh_progress(self) -> None:
        """Counts and the determinism verdict from the in-place counters (no per-record work)."""
        self.run.episodes_done = len(self._results) - self._status_counts.get("cancelled", 0)
        self.run.status_counts = {k: v for k, v in sorted(self._status_counts.items()) if v}
        reasons = [r for r in self.run.determinism.reasons if not r.startswith("wall-clock")]
        if self._timeouts:
            reasons.append(f"wall-clock timeouts decided episodes {sorted(self._timeouts)}")
        self.run.determinism.reasons = reasons
        # A timeout is timing, which no audit vouches for: it caps the level at unverified.
        self.run.determinism.timeouts = sorted(self._timeouts)
        self.run.determinism.settle()

    # -- summary.json --------------------------------------------------------------------------

    def _complete(self) -> None:
        """The final summary: every record and every aggregate from the results sorted by
        index, once (again only if results came in since)."""
        if self._final_for == self._stored:
            return
        ordered = [self._results[i] for i in sorted(self._results)]
        self._refresh_progress()
        self.run.episodes = ordered
        self.run.status_counts = metrics.status_counts(ordered)
        self.run.aggregate_metrics, self.run.aggregate_by_task = _aggregates(
            ordered, self.run.metric_rules
        )
        self.run.episodes_aggregated = len(ordered)
        self.run.live_interval = self.stop.live()
        if self.run.stop is not None:
            self.run.stop.kept_apart = self.stop.kept_apart
        self.run.episodes_complete = True
        self._episodes_json = [r.model_dump(mode="json") for r in ordered]
        self._final_for = self._stored

    def save(self) -> None:
        """Write summary.json: complete once the run's status is terminal, else bounded.

        A live save on a full disk raises DiskFullError (its caller, on the loop, stops the
        run). The final one falls back to `_write_last_word`."""
        with self._state_lock:  # the runner saves in a thread, finalise again, recordings too
            final = self.run.status in TERMINAL_RUN_STATUSES
            if final and self.disk_full is not None:
                self._write_last_word()
                return
            if final:
                self._complete()
            try:
                # Only the final summary must survive a machine crash: a live one is
                # progress, rebuilt from the (durable) episode folders by recover.
                self._write_summary(durable=final)
            except DiskFullError as exc:
                if not final:
                    raise
                self.disk_full = exc
                self._write_last_word()

    def _write_summary(self, durable: bool) -> None:
        episodes = self._episodes_json if self.run.episodes_complete else []
        records.write_summary(self.run_dir, self.run, episodes, durable)

    def _write_last_word(self) -> None:
        """The disk is full: the run ends ``aborted`` with the reason, in a bounded summary
        (no per-episode records: a resume rebuilds them from the episode folders) written
        in the space the run reserved; once. DiskFullError when even that does not fit
        (the caller says so; the backend keeps the state until the disk can take it)."""
        if self._last_word:
            return
        self.run.move_to(RunStatus.ABORTED, str(self.disk_full))
        self._complete()  # every aggregate, in memory: only the records are left out
        self.run.episodes_complete = False
        self.run_dir.release_reserve()
        self._write_summary(durable=True)
        self._last_word = True


def _summary(context: RunContext, total: int, rules: metrics.MetricRules) -> EvalRun:
    return EvalRun(
        run_id=context.run_id,
        graph_name=context.graph.name,
        config=context.config,
        episodes_total=total,
        metric_rules=rules,
        determinism=context.determinism or DeterminismInfo(),
    )


def _aggregates(
    results: Sequence[EpisodeResult], rules: metrics.MetricRules
) -> tuple[dict[str, metrics.MetricAggregate], dict[str, dict[str, metrics.MetricAggregate]]]:
    """Overall and per-task aggregates (the metrics module sorts by index first)."""
    return metrics.aggregate_metrics(results, rules), metrics.aggregate_by_task(results, rules)


def _no_broadcast(event: LiveEvent) -> None:
    """The broadcast of a run nobody watches live."""
