"""LocalEpisodeWorkers: a run's episodes on this host's worker slots.

One ``EnvWorkerPool`` slot per worker, wired to the worker's tagged servers; one task per
worker takes indices from the dispatcher and runs each episode (``episode.run_episode``). A
worker whose env server died mid-episode gets it restarted and runs the episode again with
the same seed (``attempts``, at most ``max_attempts``); one whose episode timed out gets
fresh servers before its next episode (a call may still run in the old simulator). Each
finished episode is counted against the error budget at once and handed to the run's
writer once the worker's next episode has sent its first request (so the env's server resets
while the head records), and the writer writes it while that episode runs; a writer that is
behind makes the worker wait, one episode later, before it takes another
(``eval.record_writer``).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from agentcanvas.errors import ServerDiedError, ServerError, describe
from agentcanvas.eval import media
from agentcanvas.eval.config import EpisodeResult
from agentcanvas.eval.dispatch import WorkStealingDispatcher
from agentcanvas.eval.episode import (
    CANCELLED_WITH_THE_RUN,
    EpisodeOptions,
    EpisodeSpec,
    EpisodeWiring,
    episode_result,
    run_episode,
)
from agentcanvas.eval.episode_log import EpisodeLog
from agentcanvas.eval.run_control import RETRYABLE_STATUSES, RunControl
from agentcanvas.eval.worker_pool import EnvWorkerPool, WorkerHandle
from agentcanvas.graph.executor import ExecutionPrinciples
from agentcanvas.graph.opening import opening_firing
from agentcanvas.nodes.handles import AttachesClients, HealthChecked

__all__ = ["HEALTH_AFTER_FAILURE_S", "LocalEpisodeWorkers"]

log = logging.getLogger(__name__)
HEALTH_AFTER_FAILURE_S = 1.0  # the health check that decides whether a server is dead

Attempt = tuple[EpisodeResult, EpisodeLog | None]


class LocalEpisodeWorkers:
    """The local engine's workers: node-set servers on this host, one slot per worker."""

    async def run(self, control: RunControl, dispatcher: WorkStealingDispatcher) -> None:
        context = control.context
        env_ns = context.graph.env.nodeset if context.graph.env else None
        replicated = context.registry.replicated_in(context.graph)
        pool = EnvWorkerPool(context.registry, control.config.worker_count, env_ns, replicated)
        slots = _Slots(control, pool)
        async with pool, asyncio.TaskGroup() as group:
            workers = [
                group.create_task(slots.worker(worker_id, dispatcher))
                for worker_id in range(control.config.worker_count)
            ]
            if workers:  # a worker's failure aborts the group (and this wait) with it
                await asyncio.wait(workers)


class _Slots:
    """One execution's worker slots: each worker's loop, attempts and retries."""

    def __init__(self, control: RunControl, pool: EnvWorkerPool) -> None:
        self.control, self.pool = control, pool
        context = control.context
        self.registry, self.graph, self.config = context.registry, context.graph, context.config
        env = self.graph.env
        self.opening = opening_firing(self.graph, env.nodeset, self.registry) if env else None

    async def worker(self, worker_id: int, dispatcher: WorkStealingDispatcher) -> None:
        client = f"{self.control.context.run_id}/w{worker_id}"
        shared = [self.registry.bound(n) for n in self.registry.shared_in(self.graph)]
        async with self.pool.acquire_specific(worker_id) as handle:
            await _set_attached(shared, client, attach=True)
            recording: _Recording | None = None  # the last episode's, being handed over
            try:
                # Cancelled: episodes not started yet are left missing, never written one
                # by one as "cancelled" records (the run's summary counts them).
                while not self.control.cancelled and (
                    (index := dispatcher.next_for(worker_id)) is not None
                ):
                    spec = self.control.specs[index]
                    result, episode_log = await self.run_one_episode(handle, spec, client)
                    self.control.spend(result)  # now, not once its files are written
                    try:
                        await _handed_over(recording)  # the one before: its failure is raised
                    except BaseException:
                        if episode_log is not None:
                            episode_log.discard()  # never handed over: nobody writes it
                        raise
                    # Handed over once the next episode's first request is out (this task's
                    # next wait), so the server starts that episode while the head records.
                    task = asyncio.ensure_future(self._record(result, episode_log))
                    recording = _Recording(task, episode_log)
                    if result.status == "timeout" and not self.control.cancelled:
                        await self._replace_servers(handle)
                await _handed_over(recording)
                recording = None
            except BaseException:
                if recording is not None:
                    await recording.drop()
                raise
            finally:
                await asyncio.shield(_set_attached(shared, client, attach=False))

    async def _record(self, result: EpisodeResult, episode_log: EpisodeLog | None) -> None:
        """Hand the episode to the run's writer: back at once unless the head is behind,
        then this worker waits (and takes no new episode) until there is room. Its files
        are written by the writer's thread while the next episode runs."""
        try:
            await self.control.record(result, episode_log)
        except BaseException:
            if episode_log is not None:
                episode_log.discard()  # never admitted: nobody writes it
            raise

    async def run_one_episode(
        self, handle: WorkerHandle, spec: EpisodeSpec, client: str = ""
    ) -> Attempt:
        """Run, and when the worker's server died, restart it and retry with the same seed;
        the last attempt's record and firing log (an earlier attempt's is dropped)."""
        attempt = 1
        while True:
            result, episode_log = await self._attempt(handle, spec, client)
            result.attempts = attempt
            try:
                again = await self._retry(handle, result, attempt)
            except BaseException:
                if episode_log is not None:
                    episode_log.discard()
                raise
            if not again:
                return result, episode_log
            if episode_log is not None:
                episode_log.discard()  # this attempt's log is never written
            attempt += 1

    async def _retry(self, handle: WorkerHandle, result: EpisodeResult, attempt: int) -> bool:
        """Whether to run the episode again: it failed and its worker's server is dead (the
        server is restarted then). A lost shared server ends the run (ServerDiedError)."""
        self.control.settle_cancelled(result)
        if self.control.cancelled or result.status not in RETRYABLE_STATUSES:
            return False
        await self._require_shared()  # a lost shared server ends the run, resumable
        if attempt >= self.config.max_attempts:
            return False
        try:
            # A live server answers /health in milliseconds; one that cannot within
            # this (a stopped process) is killed at once: it could not use a grace period.
            health_s = min(HEALTH_AFTER_FAILURE_S, self.config.per_step_timeout_s)
            dead = await self.pool.dead_servers(handle, health_s)
            if not dead:
                return False  # the episode failed on its own: no retry
            await self.pool.restart(handle, dead, kill=True)
        except Exception as exc:  # the run goes on; this episode keeps its failure
            result.error = f"{result.error}; server restart failed: {exc}"
            return False
        return True

    async def _attempt(self, handle: WorkerHandle, spec: EpisodeSpec, client: str) -> Attempt:
        if self.control.cancelled:
            return episode_result(spec, "cancelled", CANCELLED_WITH_THE_RUN), None
        episode_log = self._new_log(spec.index)
        options = self._options(spec, episode_log)
        async with media.recorded_frames(options.asset_dir) as frames:  # an earlier attempt's go
            try:
                result = await run_episode(self.graph, spec, self._wiring(handle, client), options)
            except BaseException as exc:
                if episode_log is not None:
                    episode_log.discard()  # no record will be written for this attempt
                if isinstance(exc, ServerDiedError):  # died while set on its panel
                    return episode_result(spec, "worker_lost", describe(exc), exc=exc), None
                raise
            if episode_log is not None:
                episode_log.finish()  # its last lines go with its record (the recorder's thread)
            await frames.finish(keep=media.keeps_frames(self.config, result))
        return result, episode_log

    def _wiring(self, handle: WorkerHandle, client: str) -> EpisodeWiring:
        return EpisodeWiring(
            resolver=self.registry,
            env=handle.env,
            env_panel_overrides=handle.env_panel_overrides,
            server_url_overrides=handle.server_url_overrides,
            principles=ExecutionPrinciples(suppress_nav_events=True),
            client=client,
        )

    def _options(self, spec: EpisodeSpec, episode_log: EpisodeLog | None) -> EpisodeOptions:
        render = media.renders(self.config)
        assets = self.control.context.run_dir.episode_assets_dir(spec.index)
        return EpisodeOptions(
            step_budget_override=self.config.step_budget,
            per_step_timeout_s=self.config.per_step_timeout_s,
            episode_timeout_s=self.config.episode_timeout_s,
            render=render,
            log=episode_log,
            asset_dir=str(assets) if render else "",
            cancel=self.control.cancel_event,
            opening=self.opening,
        )

    def _new_log(self, index: int) -> EpisodeLog | None:
        """The attempt's firing log: it starts afresh (its folder is made when it is first
        written)."""
        if not self.config.record_log:
            return None
        return EpisodeLog(self.control.context.run_dir.episode_log_path(index))

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

    async def _replace_servers(self, handle: WorkerHandle) -> None:
        """After a timeout a call may still run inside the worker's simulator; it must never
        touch the next episode, so the worker gets fresh servers."""
        try:
            await self.pool.restart(handle, handle.server_keys())
        except Exception:  # later episodes on this slot record their own failures
            log.exception("could not replace the servers of worker %d", handle.worker_id)


class _Recording:
    """A finished episode's hand-over to the run's writer (`_Slots._record`), under way."""

    def __init__(self, task: asyncio.Future[None], episode_log: EpisodeLog | None) -> None:
        self.task, self.episode_log = task, episode_log

    async def drop(self) -> None:
        """The worker is failing: stop the hand-over if it is not done (the log of a record
        never admitted is discarded, also when its task never started) and retrieve its
        outcome."""
        task = self.task
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        elif not task.cancelled():
            task.exception()  # retrieved: the worker's own failure is the one raised
        if task.cancelled() and self.episode_log is not None:
            self.episode_log.discard()


async def _handed_over(recording: _Recording | None) -> None:
    """Wait for ``recording`` to be admitted (its failure raised here)."""
    if recording is not None:
        await recording.task


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
