"""BatchEvalRunner: one graph × many episodes on N workers, bit-identical at any N.

Results are keyed by episode index. Which worker runs which episode is decided by a
:class:`~agentcanvas.eval.dispatch.WorkStealingDispatcher` (own contiguous chunk first, then
the tail of the longest remaining chunk); its per-worker stats are the summary's ``workers``.
What an episode boundary costs does not grow with the
run (issue 13): the episode's episode.json is written, its record appended to
``episodes.jsonl`` (see :mod:`agentcanvas.eval.records`), the counts updated in place, and
summary.json rewritten atomically (without fsync: recover rebuilds it) — bounded: counts,
status counts and the latest aggregates, no per-episode records — at most every
LIVE_SAVE_MIN_INTERVAL_S, and again by the live aggregates' refresh that follows every new
result, so a skipped rewrite is made up within a moment. That rewrite is the live progress
channel (with the events).

Live aggregates are recomputed by one owned task, off the recording path, from a snapshot of
the results, as often as their cost allows (at most LIVE_AGGREGATE_DUTY of the wall time,
at least LIVE_AGGREGATE_MIN_INTERVAL_S apart); ``episodes_aggregated`` says how many results
they cover — the first that many lines of the index. When the run ends the final summary is
written once, complete: every record sorted by index and every aggregate recomputed from the
results sorted by index (never accumulated in completion order), hence bit-identical at any
worker count and equal to what :func:`agentcanvas.eval.records.recorded_results` rebuilds
from the episode folders.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from agentcanvas.errors import ConfigError, DiskFullError, RunError, ServerDiedError, ServerError
from agentcanvas.eval import health, media, metrics, records
from agentcanvas.eval.config import (
    DeterminismInfo,
    EpisodeResult,
    EvalConfig,
    EvalRun,
)
from agentcanvas.eval.determinism import finish_determinism, start_determinism
from agentcanvas.eval.dispatch import InOrderDispatcher, WorkStealingDispatcher
from agentcanvas.eval.episode import (
    EpisodeOptions,
    EpisodeSpec,
    EpisodeWiring,
    run_episode,
)
from agentcanvas.eval.events import (
    Broadcast,
    EvalComplete,
    EvalEpisodeDone,
    EvalProgress,
    LiveEvent,
)
from agentcanvas.eval.run_state import TERMINAL_RUN_STATUSES, RunStatus
from agentcanvas.eval.seeding import episode_seed
from agentcanvas.eval.stopping import KEPT_APART_FOLDER, PrefixWatcher, load_baseline
from agentcanvas.eval.store import RunDir
from agentcanvas.eval.worker_pool import EnvWorkerPool, WorkerHandle, partition_contiguous
from agentcanvas.fileio import (
    atomic_write_bytes,
    atomic_write_json,
    encode_json,
    encode_jsonl_line,
    make_dirs,
    write_error,
)
from agentcanvas.graph.executor import ExecutionPrinciples, opening_firing
from agentcanvas.graph.model import Graph
from agentcanvas.nodes.handles import AttachesClients, HealthChecked
from agentcanvas.server.registry import WorkspaceComponentRegistry

LIVE_AGGREGATE_MIN_INTERVAL_S = 0.25  # live aggregates are refreshed at most this often
LIVE_AGGREGATE_DUTY = 0.03  # and take at most this share of the run's wall time
LIVE_SAVE_MIN_INTERVAL_S = 0.2  # a recording rewrites the live summary.json at most this often
log = logging.getLogger(__name__)
RETRYABLE = ("error", "exception", "timeout")
HEALTH_AFTER_FAILURE_S = 1.0  # the health check that decides whether a server is dead
MAX_RECORDINGS_IN_FLIGHT = 2  # per worker: episodes written while the next ones run


def episode_tasks(config: EvalConfig, graph: Graph) -> list[str]:
    """Tasks of the run: the config's, else the graph's env tasks, else its panel task."""
    return list(config.tasks) if config.tasks else graph.default_tasks()


def plan_episodes(config: EvalConfig, graph: Graph, run_key: str) -> list[EpisodeSpec]:
    """Index i ↦ (task = tasks[i // n], episode_index = start + i % n), seed from identity."""
    specs = []
    n = config.episode_count
    for position, task in enumerate(episode_tasks(config, graph)):
        for offset in range(n):
            index = position * n + offset
            ep_index = config.start_index + offset
            seed = episode_seed(config.seed, task, ep_index)
            specs.append(EpisodeSpec(index, task, ep_index, seed, key=f"{run_key}:{index}"))
    return specs


@dataclass(frozen=True)
class _EncodedRecord:
    """An episode's record as its files get it: episode.json and its line in the index."""

    episode_json: bytes
    index_line: bytes


class _EpisodeLog:
    """One episode's node firings for its log.jsonl, encoded as they happen and written in
    batches: at most FLUSH_AFTER_S after a firing (a timer on the event loop, so the lines
    before a node that hangs are on disk at once, for whoever watches the episode), when
    FLUSH_BYTES have gathered, and the rest in the recording thread, before the episode's
    episode.json — no ``write`` on the episode's path for a short episode, where there was
    one per firing (issue 13: a write per firing cost more than the firing). The first write
    creates the episode's folder and truncates what an earlier attempt (a retry, a resume)
    left."""

    FLUSH_AFTER_S: ClassVar[float] = 0.01
    FLUSH_BYTES: ClassVar[int] = 256 * 1024

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lines = bytearray()
        self._fd: int | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._failure: RunError | None = None

    def record(self, entry: dict[str, Any]) -> None:
        if isinstance(self._failure, DiskFullError):  # the record's write reports it, and
            return  # the episode is left missing (resume runs it): no error of its own
        if self._failure is not None:  # a timed flush failed: the episode learns it here
            raise self._failure
        self._lines += encode_jsonl_line(self.path, entry)
        if len(self._lines) >= self.FLUSH_BYTES:
            try:
                self._flush()
            except DiskFullError as exc:
                self._failure = exc
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self.FLUSH_AFTER_S, self._timed)

    def _timed(self) -> None:
        self._timer = None
        try:
            self._flush()
        except RunError as exc:
            self._failure = exc

    def _flush(self) -> None:
        if not self._lines:
            return
        line = memoryview(bytes(self._lines))
        self._lines.clear()
        try:
            if self._fd is None:
                make_dirs(self.path.parent)
                flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_TRUNC
                self._fd = os.open(self.path, flags, 0o666)
            while line:
                line = line[os.write(self._fd, line) :]
        except OSError as exc:
            raise write_error(self.path, exc, "append to") from exc

    def finish(self) -> None:
        """The episode ended (on the loop's thread): no timed flush any more; from here on
        only `write_rest` touches the log, in the recording thread."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def write_rest(self) -> None:
        """Write what is left and close (the recording thread, after `finish`); an episode
        that fired nothing leaves no log (nor the one an earlier attempt left)."""
        try:
            if self._failure is not None:
                raise self._failure
            if self._lines:
                self._flush()
            elif self._fd is None:
                self.path.unlink(missing_ok=True)
        finally:
            self.discard()

    def discard(self) -> None:
        """Drop what is not written yet (an attempt that is retried) and close."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._lines.clear()
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)


class BatchEvalRunner:
    """Runs a frozen graph over the planned episodes with an EnvWorkerPool."""

    # Dispatch policy: idle workers steal from the longest remaining chunk. False gives
    # fixed contiguous chunks (bench/scaling.py measures both); results are the same.
    work_stealing: ClassVar[bool] = True

    def __init__(
        self,
        registry: WorkspaceComponentRegistry,
        graph: Graph,
        config: EvalConfig,
        run_dir: RunDir,
        *,
        run_id: str,
        broadcast: Broadcast | None = None,
        determinism: DeterminismInfo | None = None,
        previous: Sequence[EpisodeResult] = (),
    ) -> None:
        self.registry = registry
        self.graph = graph.model_copy(deep=True)  # frozen at construction
        self.config = config
        self.run_dir = run_dir
        self.broadcast = broadcast or _no_broadcast
        _require_replicated_env(registry, self.graph)
        self.specs = plan_episodes(config, self.graph, run_id)
        env = self.graph.env
        self._opening = opening_firing(self.graph, env.nodeset, registry) if env else None
        self.results: dict[int, EpisodeResult] = {}
        # Held by a recording thread while it stores a result, appends its index line and
        # rewrites the live summary, by the live aggregates' snapshot and install, and by
        # every save: a summary on disk pairs its aggregates with their count, the index
        # lines come in the order the results were stored, and a save on the loop never sees
        # a result half stored. Reentrant: a recording saves while it holds it.
        self._state_lock = threading.RLock()
        self._live_closed = False  # set when the workers are done: no live refresh after
        self.cancel_event = asyncio.Event()
        self.aborted = False
        self.stop_reason: str | None = None  # set when the error budget (max_errors) is spent
        self.disk_full: DiskFullError | None = None  # the first write that found no space
        self._last_word = False  # the bounded summary of a disk-full end is written
        self._errors = sum(r.status in health.ERROR_STATUSES for r in previous)
        self._status_counts: dict[str, int] = {}
        self._timeouts: set[int] = set()
        self._new_results = asyncio.Event()
        self._saved_live_at = -float("inf")  # monotonic time of the last live summary.json
        self._logs: dict[int, _EpisodeLog] = {}  # finished logs, written with their records
        self._stored = 0  # results stored so far (a resumed one counts too)
        self._final_for: int | None = None  # _stored when the complete summary was made
        self._episodes_json: list[dict[str, Any]] = []  # the complete summary's records
        self.stop = PrefixWatcher(
            self.specs, config, load_baseline(run_dir.root.parent, config)
        )  # the stop rule, and the live interval of any run
        for result in previous:
            self._store(result)
            self.stop.observe(result)
        self.run = EvalRun(
            run_id=run_id,
            graph_name=graph.name,
            config=config,
            episodes_total=len(self.specs),
            metric_rules=metric_rules(registry, self.graph, config),
            determinism=determinism or DeterminismInfo(),
        )
        run_dir.create()
        atomic_write_json(run_dir.graph_path, self.graph.model_dump(mode="json"))
        records.start_index(run_dir, self.results.values())

    def cancel(self, aborted: bool = False) -> None:
        """Stop after the episodes in flight; ``aborted`` when our parent died (resumable)."""
        self.aborted = self.aborted or aborted
        self.cancel_event.set()

    async def execute(self) -> EvalRun:
        """Run the missing episodes on ``worker_count`` workers; returns the final summary.

        A full disk stops the run after the episodes in flight (`_on_disk_full`): it ends
        ``aborted`` with the reason, resumable once space is freed."""
        todo = [s.index for s in self.specs if s.index not in self.results]
        self.run.move_to(RunStatus.RUNNING)
        self.run.episodes_complete = False
        self.run.timings["started_at"] = time.time()
        if not self.run_dir.reserve_space():
            log.warning("run %s: no disk space to reserve for its last word", self.run.run_id)
        # Before the first episode: a --certify run has its shared servers recompute every
        # batched row of it alone.
        await start_determinism(
            self.registry, self.graph, self.run.run_id, self.config.certify, self.run.determinism
        )
        self._refresh_progress()
        self._new_results.set()  # resumed results: aggregates before the first boundary
        self.save()
        tasks = {s.index: s.task for s in self.specs}
        dispatcher: WorkStealingDispatcher
        if self.stop.rule is not None:  # decided on the plan-order prefix: started in order
            in_order = sorted(todo, key=self.stop.position.__getitem__)
            dispatcher = InOrderDispatcher(in_order, tasks).with_workers(self.config.worker_count)
        else:
            dispatcher = WorkStealingDispatcher(
                partition_contiguous(todo, self.config.worker_count),
                tasks,
                steal=self.work_stealing,
            )
        self.run.workers = dispatcher.stats  # updated in place as episodes are handed out
        try:
            async with asyncio.TaskGroup() as group:
                aggregator = group.create_task(self._live_aggregates())
                await self._run_workers(dispatcher)  # its failure aborts the group with it
                aggregator.cancel()  # the final summary recomputes every aggregate
        finally:
            # A refresh already in its thread must not install older aggregates over the
            # final summary: from here on it finds the live part closed.
            with self._state_lock:
                self._live_closed = True
        await self._finish_determinism()
        finished = all(
            i in self.results and self.results[i].status != "cancelled"
            for i in range(len(self.specs))
        )
        if self.stop_reason is not None:
            self.run.move_to(RunStatus.FAILED, self.stop_reason)
        elif self.disk_full is not None:
            self.run.move_to(RunStatus.ABORTED, str(self.disk_full))
        elif self.stop.decided:  # the stop rule ended it: completed, with its decision
            self.run.move_to(RunStatus.COMPLETED)
        elif self.cancel_event.is_set() and not finished:
            self.run.move_to(RunStatus.ABORTED if self.aborted else RunStatus.CANCELLED)
        else:  # also when cancelled after its last episode finished
            self.run.move_to(RunStatus.COMPLETED)
        if self.run.status == RunStatus.COMPLETED:
            self.run.stop = self.stop.final()
        self.run.timings["finished_at"] = time.time()
        await asyncio.to_thread(self.save)
        self.broadcast(EvalComplete(run_id=self.run.run_id, status=self.run.status))
        return self.run

    async def _run_workers(self, dispatcher: WorkStealingDispatcher) -> None:
        """Run the dispatched episodes on this host's worker slots (the Ray engine's runner
        overrides this with its actors)."""
        env_ns = self.graph.env.nodeset if self.graph.env else None
        replicated = self.registry.replicated_in(self.graph)
        pool = EnvWorkerPool(self.registry, self.config.worker_count, env_ns, replicated)
        async with pool, asyncio.TaskGroup() as group:
            workers = [
                group.create_task(self._worker(pool, worker_id, dispatcher))
                for worker_id in range(self.config.worker_count)
            ]
            if workers:  # a worker's failure aborts the group (and this wait) with it
                await asyncio.wait(workers)

    async def _finish_determinism(self) -> None:
        """What the shared servers' batch audit found while this run used them."""
        await finish_determinism(self.registry, self.graph, self.run.run_id, self.run.determinism)

    async def _worker(
        self, pool: EnvWorkerPool, worker_id: int, dispatcher: WorkStealingDispatcher
    ) -> None:
        client = f"{self.run.run_id}/w{worker_id}"
        shared = [self.registry.bound(n) for n in self.registry.shared_in(self.graph)]
        async with pool.acquire_specific(worker_id) as handle:
            await _set_attached(shared, client, attach=True)
            # Owned by this worker: awaited in turn (at most MAX_RECORDINGS_IN_FLIGHT) and in
            # ``finally``, shielded so that cancelling the worker never cuts a record in half.
            recording: list[asyncio.Task[None]] = []
            try:
                # Cancelled: episodes not started yet are left missing, never written one
                # by one as "cancelled" records (the run's summary counts them).
                while not self.cancel_event.is_set() and (
                    (index := dispatcher.next_for(worker_id)) is not None
                ):
                    spec = self.specs[index]
                    result = await self._run_one_episode(pool, handle, spec, client)
                    # Counted now, not when its files are written: past the budget no
                    # further episode may start while recordings are still in flight.
                    self._spend_error_budget(result)
                    if len(recording) >= MAX_RECORDINGS_IN_FLIGHT:
                        await asyncio.shield(recording.pop(0))
                    # Persisting this episode overlaps the simulation of the next ones (its
                    # fsyncs may take longer than an episode: they overlap each other too).
                    recording.append(
                        asyncio.create_task(
                            self._persist_result(result), name=f"{client}:record {result.index}"
                        )
                    )
                    if result.status == "timeout" and not self.cancel_event.is_set():
                        await self._replace_servers(pool, handle)
            finally:
                for pending in recording:
                    await asyncio.shield(pending)
                await asyncio.shield(_set_attached(shared, client, attach=False))

    async def _run_one_episode(
        self, pool: EnvWorkerPool, handle: WorkerHandle, spec: EpisodeSpec, client: str = ""
    ) -> EpisodeResult:
        """Run, and when the worker's server died, restart it and retry with the same seed."""
        attempt = 1
        while True:
            try:
                result = await self._attempt(handle, spec, client)
            except ServerDiedError as exc:  # died while the episode was set on its panel
                result = EpisodeResult(
                    index=spec.index,
                    task=spec.task,
                    episode_index=spec.episode_index,
                    seed=spec.seed,
                    status="exception",
                    error=f"{type(exc).__name__}: {exc}",
                )
            result.attempts = attempt
            if self.cancel_event.is_set() and result.status in RETRYABLE:
                result.status, result.error = "cancelled", "cancelled with the run"
            if self.cancel_event.is_set() or result.status not in RETRYABLE:
                return result
            await self._require_shared()  # a lost shared server ends the run, resumable
            if attempt >= self.config.max_attempts:
                return result
            try:
                # A live server answers /health in milliseconds; one that cannot within
                # this (a stopped process) is killed at once: it could not use a grace period.
                health_s = min(HEALTH_AFTER_FAILURE_S, self.config.per_step_timeout_s)
                dead = await pool.dead_servers(handle, health_s)
                if not dead:
                    return result  # the episode failed on its own: no retry
                await pool.restart(handle, dead, kill=True)
            except Exception as exc:  # the run goes on; this episode keeps its failure
                result.error = f"{result.error}; server restart failed: {exc}"
                return result
            attempt += 1

    async def _attempt(
        self, handle: WorkerHandle, spec: EpisodeSpec, client: str = ""
    ) -> EpisodeResult:
        if self.cancel_event.is_set():
            return EpisodeResult(
                index=spec.index,
                task=spec.task,
                episode_index=spec.episode_index,
                seed=spec.seed,
                status="cancelled",
                error="cancelled with the run",
            )
        wiring = EpisodeWiring(
            resolver=self.registry,
            env=handle.env,
            env_panel_overrides=handle.env_panel_overrides,
            server_url_overrides=handle.server_url_overrides,
            principles=ExecutionPrinciples(suppress_nav_events=True),
            client=client,
        )
        options = EpisodeOptions(
            step_budget_override=self.config.step_budget,
            per_step_timeout_s=self.config.per_step_timeout_s,
            episode_timeout_s=self.config.episode_timeout_s,
            render=media.renders(self.config),
            log=(episode_log := self._new_log(spec.index)),
            asset_dir=str(self.run_dir.episode_assets_dir(spec.index))
            if media.renders(self.config)
            else "",
            cancel=self.cancel_event,
            opening=self._opening,
        )
        try:
            result = await run_episode(self.graph, spec, wiring, options)
        except BaseException:
            if episode_log is not None:
                episode_log.discard()  # no record will be written for this attempt
            raise
        if episode_log is not None:
            episode_log.finish()  # its last lines go with its record (_write_episode)
            previous = self._logs.get(spec.index)
            if previous is not None:  # an earlier attempt's, retried: never written
                previous.discard()
            self._logs[spec.index] = episode_log
        if options.render:  # without frames there is nothing to discard: no thread hop
            assets = self.run_dir.episode_assets_dir(spec.index)  # before episode.json: final
            await asyncio.to_thread(media.discard_unwanted_frames, self.config, result, assets)
        return result

    def _new_log(self, index: int) -> _EpisodeLog | None:
        """The attempt's firing log: it starts afresh (its folder is made when it is first
        written)."""
        if not self.config.record_log:
            return None
        return _EpisodeLog(self.run_dir.episode_log_path(index))

    async def _require_shared(self) -> None:
        """ServerDiedError naming the server and its URL when a shared server is gone."""
        for name in self.registry.shared_in(self.graph):
            handle = self.registry.bound(name)
            if not isinstance(handle, HealthChecked):
                continue
            try:
                await handle.health()
            except ServerDiedError as exc:
                raise ServerDiedError(f"shared {exc}") from exc
            except ServerError:  # slow or odd, not gone: the episode keeps its own failure
                continue

    async def _replace_servers(self, pool: EnvWorkerPool, handle: WorkerHandle) -> None:
        """After a timeout a call may still run inside the worker's simulator; it must never
        touch the next episode, so the worker gets fresh servers."""
        try:
            await pool.restart(handle, handle.server_keys())
        except Exception:  # later episodes on this slot record their own failures
            log.exception("could not replace the servers of worker %d", handle.worker_id)

    async def _record(self, result: EpisodeResult) -> None:
        """Count ``result`` against the error budget, then persist it."""
        self._spend_error_budget(result)
        await self._persist_result(result)

    async def _persist_result(self, result: EpisodeResult) -> None:
        # One hop to a thread (a hop costs ~0.15 ms of CPU on a small machine: issue 13):
        # in-flight episodes keep running while it writes. The record is encoded first,
        # here, so that the thread runs little Python between its syscalls: a thread that
        # holds the GIL when the loop comes back from a socket call makes the loop wait
        # (issue 13: a send on the loop took 100 µs on average, 50-75 µs once the thread no
        # longer encoded; its own CPU is ~30 µs).
        encoded = self._encode(result)
        loop = asyncio.get_running_loop()
        try:
            await asyncio.to_thread(self._record_in_thread, result, encoded, loop)
        except DiskFullError as exc:  # its record (or the index line after it) is not written
            self._on_disk_full(exc)
        self._new_results.set()

    def _on_disk_full(self, exc: DiskFullError) -> None:
        """A write found the disk full: the run stops after the episodes in flight and ends
        ``aborted`` naming the disk (on the loop). An episode whose record could not be
        written is left missing: a resume, once space is freed, runs it again."""
        if self.disk_full is None:
            self.disk_full = exc
            log.error("run %s stops: %s", self.run.run_id, exc)
        self.cancel(aborted=True)

    def _encode(self, result: EpisodeResult) -> _EncodedRecord:
        """The bytes of ``result``'s episode.json and of its index line."""
        record = result.model_dump(mode="json")
        episode = {**record, "run_id": self.run.run_id, "graph_name": self.graph.name}
        path = self.run_dir.episode_json_path(result.index)
        return _EncodedRecord(encode_json(path, episode), records.index_line(self.run_dir, record))

    def _announce(self, result: EpisodeResult, episodes_done: int) -> None:
        """The episode's events (on the loop), with the count its recording left."""
        self.broadcast(EvalEpisodeDone(run_id=self.run.run_id, episode=result))
        self.broadcast(
            EvalProgress(
                run_id=self.run.run_id,
                episodes_done=episodes_done,
                episodes_total=self.run.episodes_total,
                success_rate=_mean(self.run, "success"),
                success_n=_scored(self.run, "success"),
                error_count=self._errors,
                success_cs=[cs.lo, cs.hi] if (cs := self.run.live_interval) else None,
                success_cs_n=cs.n if cs else None,
            )
        )

    def _spend_error_budget(self, result: EpisodeResult) -> None:
        """Count an error episode; past ``max_errors`` the run stops (status ``failed``)."""
        self._errors += result.status in health.ERROR_STATUSES
        reason = health.error_budget_exceeded(self.config.max_errors, self._errors, len(self.specs))
        if reason is not None and self.stop_reason is None:
            self.stop_reason = reason
            self.cancel_event.set()  # episodes in flight end as cancelled

    def _store(self, result: EpisodeResult) -> None:
        """Keep ``result`` by index and update the counts in place (O(1) per episode)."""
        replaced = self.results.get(result.index)
        if replaced is not None:
            self._status_counts[replaced.status] -= 1
            self._timeouts.discard(replaced.index)
        self.results[result.index] = result
        self._stored += 1
        self._status_counts[result.status] = self._status_counts.get(result.status, 0) + 1
        if result.status == "timeout":
            self._timeouts.add(result.index)

    def _record_in_thread(
        self, result: EpisodeResult, encoded: _EncodedRecord, loop: asyncio.AbstractEventLoop
    ) -> None:
        """The episode's own files first, durable, outside the lock: other workers' (and this
        worker's next) episodes write theirs meanwhile, and their fsyncs share commits; then,
        under the state lock, the result is stored and persisted, and its events are queued
        on the loop — in the order the results were stored, each with its own count."""
        self._write_episode(result.index, encoded.episode_json)
        with self._state_lock:
            if self.stop.past_stop(result.index):  # in flight when the rule decided
                self._keep_apart(result.index)
                return
            self._store(result)
            self._persist(encoded.index_line)
            if self.stop.observe(result) is not None and self.stop.decided:
                self._stop_at_decision(loop)
            if self.broadcast is not _no_broadcast:  # nobody listens: no events to build
                loop.call_soon_threadsafe(self._announce, result, self.run.episodes_done)

    def _stop_at_decision(self, loop: asyncio.AbstractEventLoop) -> None:
        """The stop rule decided on the plan-order prefix (state lock held): episodes past it
        that finished already leave the records (their folders go to ``past_stop/``, the
        index is rewritten without them), those in flight end and follow them; no episode
        starts any more. The run's records are then the prefix, the same at any W."""
        for index in [i for i in self.results if self.stop.past_stop(i)]:
            self._unstore(index)
            self._keep_apart(index)
        records.start_index(self.run_dir, self.results.values())
        self._refresh_progress()
        self.run.stop = self.stop.final()
        log.info(
            "run %s: %s after %d episodes",
            self.run.run_id,
            self.run.stop.decision if self.run.stop else "",
            self.stop.prefix,
        )
        loop.call_soon_threadsafe(self.cancel_event.set)

    def _keep_apart(self, index: int) -> None:
        """Move episode ``index``'s folder to ``past_stop/`` (it finished past the decision)."""
        source = self.run_dir.episode_dir(index)
        target = self.run_dir.root / KEPT_APART_FOLDER / source.name
        make_dirs(target.parent)
        if target.exists():
            shutil.rmtree(target)
        if source.exists():
            os.replace(source, target)
        self.stop.kept_apart += 1

    def _unstore(self, index: int) -> None:
        """Take a stored result out of the run (the counts follow)."""
        result = self.results.pop(index)
        self._status_counts[result.status] -= 1
        self._timeouts.discard(index)
        self._stored += 1  # the complete summary is made again

    def _write_episode(self, index: int, episode_json: bytes) -> None:
        """Make the episode's folder, write the rest of its log, then its episode.json (the
        durable record) before anything else mentions the episode."""
        self.run_dir.create_episode(index)
        episode_log = self._logs.pop(index, None)
        if episode_log is not None:
            episode_log.write_rest()
        atomic_write_bytes(self.run_dir.episode_json_path(index), episode_json)

    def _persist(self, index_line: bytes) -> None:
        """Its index line (episode.json is on disk), then the bounded summary — at most
        every LIVE_SAVE_MIN_INTERVAL_S: each rewrite creates a file, which costs a worker
        more CPU than a short episode's own work on some filesystems (issue 13). The live
        aggregates' refresh, which follows every new result, saves what this one skipped."""
        records.append_line(self.run_dir, index_line)
        self._refresh_progress()
        now = time.monotonic()
        if now - self._saved_live_at >= LIVE_SAVE_MIN_INTERVAL_S:
            self._saved_live_at = now
            self.save()

    async def _live_aggregates(self) -> None:
        """Refresh the summary's aggregates while the run goes, as often as their cost allows.

        Computed in a thread from a snapshot taken under the state lock (every result in it
        is already in the index), and installed under the lock, so a summary on disk always
        pairs its aggregates with their ``episodes_aggregated``.
        """
        while True:
            await self._new_results.wait()
            self._new_results.clear()
            started = time.monotonic()
            try:
                await asyncio.to_thread(self._refresh_aggregates)
            except DiskFullError as exc:
                self._on_disk_full(exc)
            cost = time.monotonic() - started
            period = max(LIVE_AGGREGATE_MIN_INTERVAL_S, cost / LIVE_AGGREGATE_DUTY)
            await asyncio.sleep(period - cost)

    def _refresh_aggregates(self) -> None:
        """Aggregates of the results stored so far, then the summary with them (a thread)."""
        with self._state_lock:
            snapshot = list(self.results.values())
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
        self.run.episodes_done = len(self.results) - self._status_counts.get("cancelled", 0)
        self.run.status_counts = {k: v for k, v in sorted(self._status_counts.items()) if v}
        reasons = [r for r in self.run.determinism.reasons if not r.startswith("wall-clock")]
        if self._timeouts:
            reasons.append(f"wall-clock timeouts decided episodes {sorted(self._timeouts)}")
        self.run.determinism.reasons = reasons
        # A timeout is timing, which no audit vouches for: it caps the level at unverified.
        self.run.determinism.timeouts = sorted(self._timeouts)
        self.run.determinism.settle()

    def _complete(self) -> None:
        """The final summary: every record and every aggregate from the results sorted by
        index, once (again only if results came in since)."""
        if self._final_for == self._stored:
            return
        ordered = [self.results[i] for i in sorted(self.results)]
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
        with self._state_lock:  # execute saves in a thread, finalise again, recordings too
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
        data = self.run.model_dump(mode="json", exclude={"episodes"})
        episodes = self._episodes_json if self.run.episodes_complete else []
        path = self.run_dir.summary_path
        atomic_write_json(path, _in_field_order(data, episodes), durable=durable)

    def _write_last_word(self) -> None:
        """The disk is full: the run ends ``aborted`` with the reason, in a bounded summary
        (no per-episode records: a resume rebuilds them from the episode folders) written
        in the space ``_RESERVE`` held; once. DiskFullError when even that does not fit
        (the caller says so; the backend keeps the state until the disk can take it)."""
        if self._last_word:
            return
        self.run.move_to(RunStatus.ABORTED, str(self.disk_full))
        self._complete()  # every aggregate, in memory: only the records are left out
        self.run.episodes_complete = False
        self.run_dir.release_reserve()
        self._write_summary(durable=True)
        self._last_word = True


def _aggregates(
    results: Sequence[EpisodeResult], rules: metrics.MetricRules
) -> tuple[dict[str, metrics.MetricAggregate], dict[str, dict[str, metrics.MetricAggregate]]]:
    """Overall and per-task aggregates (the metrics module sorts by index first)."""
    return metrics.aggregate_metrics(results, rules), metrics.aggregate_by_task(results, rules)


def metric_rules(
    registry: WorkspaceComponentRegistry, graph: Graph, config: EvalConfig
) -> metrics.MetricRules:
    """The run's aggregation rules: the metric kinds its node sets and graph declare, the
    binary interval asked for, and the episodes planned per task."""
    manifests = [registry.manifest(name) for name in graph.nodesets()]
    return metrics.MetricRules(
        kinds=metrics.declared_kinds(manifests, graph.metrics),
        binary_interval=config.binary_interval,
        planned_by_task={task: config.episode_count for task in episode_tasks(config, graph)},
    )


def _in_field_order(data: dict[str, Any], episodes: list[dict[str, Any]]) -> dict[str, Any]:
    """The summary's fields in EvalRun's order, with ``episodes`` (dumped once) in its place;
    computed fields (``health``) last, as ``model_dump`` puts them."""
    fields = [*EvalRun.model_fields, *EvalRun.model_computed_fields]
    names = [name for name in fields if name == "episodes" or name in data]
    return {name: episodes if name == "episodes" else data[name] for name in names}


def _require_replicated_env(registry: WorkspaceComponentRegistry, graph: Graph) -> None:
    """Each worker needs its own simulator: a graph's env node set must be replicated."""
    if graph.env is None:
        return
    parallelism = registry.manifest(graph.env.nodeset).parallelism
    if parallelism != "replicated":
        raise ConfigError(
            f"env.nodeset: '{graph.env.nodeset}' is {parallelism}; batch eval needs the "
            "environment node set to be replicated (one simulator per worker)"
        )


async def _set_attached(handles: list[Any], client: str, attach: bool) -> None:
    """Tell shared servers how many workers may send requests (their batching rendezvous)."""
    for handle in handles:
        if not isinstance(handle, AttachesClients):
            continue
        try:
            await (handle.attach if attach else handle.detach)(client)
        except ServerError:
            if attach:
                raise
            log.warning("could not detach %s from %s (server gone?)", client, handle)


def _no_broadcast(event: LiveEvent) -> None:
    """The broadcast of a run nobody watches live."""


def _mean(run: EvalRun, name: str) -> float | None:
    agg = run.aggregate_metrics.get(name)
    return None if agg is None else agg.mean


def _scored(run: EvalRun, name: str) -> int | None:
    agg = run.aggregate_metrics.get(name)
    return None if agg is None else agg.n
