"""RayEvalRunner: the BatchEvalRunner whose workers are Ray actors running whole episodes.

Everything about the run folder is the local engine's (BatchEvalRunner): the summary, the
index, the aggregates, cancel and resume. Only ``_run_workers`` differs: each worker loop
takes an episode (RetryingWork: a retry first, else the work-stealing dispatcher), sends it
to its actor in one call, and writes what comes back — the episode's log.jsonl and frames,
then its record. A worker actor or node lost mid-episode puts the episode back for a retry
with the same seed (``attempts`` counts them); the loop waits for Ray to restart its actor
and goes on, while the other workers keep taking episodes. When every worker is gone with
episodes left the run raises ServerDiedError: it ends ``aborted`` and can be resumed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from pathlib import Path

from agentcanvas.cluster.elastic import Assignment, RetryingWork
from agentcanvas.cluster.session import import_ray
from agentcanvas.cluster.worker_actor import EpisodeReply, EpisodeRequest
from agentcanvas.cluster.workers import RayWorkerGroup
from agentcanvas.errors import ServerDiedError
from agentcanvas.eval.config import DeterminismInfo, EpisodeResult, EvalConfig
from agentcanvas.eval.dispatch import WorkStealingDispatcher
from agentcanvas.eval.events import Broadcast
from agentcanvas.eval.runner import BatchEvalRunner
from agentcanvas.eval.store import RunDir
from agentcanvas.graph.model import DEFAULT_STEP_BUDGET, Graph
from agentcanvas.server.registry import WorkspaceComponentRegistry

log = logging.getLogger(__name__)
ACTOR_RETURN_S = 120.0  # how long a worker loop waits for Ray to bring its actor back
HEAD_MARGIN_S = 60.0  # beyond the episode's own safety net before the head gives up on it


class RayEvalRunner(BatchEvalRunner):
    """A BatchEvalRunner whose workers are the actors of a RayWorkerGroup."""

    def __init__(
        self,
        registry: WorkspaceComponentRegistry,
        graph: Graph,
        config: EvalConfig,
        run_dir: RunDir,
        *,
        run_id: str,
        group: RayWorkerGroup,
        broadcast: Broadcast | None = None,
        determinism: DeterminismInfo | None = None,
        previous: Sequence[EpisodeResult] = (),
    ) -> None:
        super().__init__(
            registry,
            graph,
            config,
            run_dir,
            run_id=run_id,
            broadcast=broadcast,
            determinism=determinism,
            previous=previous,
        )
        self.group = group
        self.run.determinism.engine = "ray"
        self.run.determinism.worker_nodes = group.nodes  # filled in as the actors report
        self.lost_workers = 0

    async def _run_workers(self, dispatcher: WorkStealingDispatcher) -> None:
        if not self.group.actors:
            await self.group.start(self.run.run_id, self.config.worker_count)
        self.run.determinism.worker_nodes = self.group.nodes
        self.run.determinism.placement_group = self.group.reported_group
        work = RetryingWork(dispatcher)
        async with asyncio.TaskGroup() as tasks:
            forward = tasks.create_task(self._forward_cancel())
            workers = [
                tasks.create_task(self._worker_loop(k, work))
                for k in range(self.config.worker_count)
            ]
            await asyncio.wait(workers)
            forward.cancel()
        if work.remaining and not self.cancel_event.is_set():
            raise ServerDiedError(
                f"every Ray worker was lost with {work.remaining} episode(s) left; "
                "resume the run once the cluster has capacity again"
            )

    async def _forward_cancel(self) -> None:
        await self.cancel_event.wait()
        await self.group.cancel_all()

    async def _worker_loop(self, worker_id: int, work: RetryingWork) -> None:
        while not self.cancel_event.is_set():
            item = work.take(worker_id)
            if item is None:
                if work.finished():
                    return
                await work.wait_for_change(1.0)  # an episode in flight may come back
                continue
            reply = await self._send(worker_id, item)
            if reply is None:
                await self._lost(item, work)
                back = await self.group.wait_back(
                    worker_id,
                    lambda: work.finished() or self.cancel_event.is_set(),
                    ACTOR_RETURN_S,
                )
                if not back:
                    self.lost_workers += 1
                    return
                continue
            work.done(item, lost=False, max_attempts=self.config.max_attempts)
            result = await self._write_reply(reply, item)
            if result.status == "timeout" and not self.cancel_event.is_set():
                self.group.restart(worker_id)  # a call may still run in the old simulator
                await self.group.wait_back(worker_id, work.finished, ACTOR_RETURN_S)

    def _request(self, index: int) -> EpisodeRequest:
        config = self.config
        return EpisodeRequest(
            spec=self.specs[index],
            step_budget=config.step_budget,
            per_step_timeout_s=config.per_step_timeout_s,
            episode_timeout_s=config.episode_timeout_s,
            save_frames=config.save_frames,
            record_log=config.record_log,
        )

    def _head_deadline_s(self) -> float:
        """The head's own limit on one episode call: the episode's safety net plus a margin
        (the step budget the env resolves is not known here, so the largest plausible)."""
        if self.config.episode_timeout_s is not None:
            return self.config.episode_timeout_s + HEAD_MARGIN_S
        budget = self.config.step_budget or self.graph.step_budget or DEFAULT_STEP_BUDGET
        return max(budget, DEFAULT_STEP_BUDGET) * self.config.per_step_timeout_s + HEAD_MARGIN_S

    async def _send(self, worker_id: int, item: Assignment) -> EpisodeReply | None:
        """One episode on the worker's actor; None when the actor or its node was lost."""
        ray = import_ray()
        actor = self.group.actors[worker_id]
        try:
            async with asyncio.timeout(self._head_deadline_s()):
                reply: EpisodeReply = await actor.run.remote(self._request(item.index))
        except ray.exceptions.RayActorError as exc:
            log.warning("worker %d lost episode %d: %s", worker_id, item.index, exc)
            return None
        except ray.exceptions.RayTaskError as exc:  # the actor's own error, not a loss
            cause = getattr(exc, "cause", None)
            if isinstance(cause, ServerDiedError):  # a model actor that never came back
                raise ServerDiedError(str(cause)) from exc  # the run ends aborted
            raise
        except TimeoutError:
            log.warning("worker %d silent past the deadline on episode %d", worker_id, item.index)
            self.group.restart(worker_id)
            return None
        self.group.note_node(worker_id, reply.node_id)
        return reply

    async def _lost(self, item: Assignment, work: RetryingWork) -> None:
        """Queue a lost episode again; past max_attempts record it as an exception."""
        if work.done(item, lost=True, max_attempts=self.config.max_attempts):
            return
        spec = self.specs[item.index]
        result = EpisodeResult(
            index=spec.index,
            task=spec.task,
            episode_index=spec.episode_index,
            seed=spec.seed,
            status="exception",
            error=f"its Ray worker was lost on each of {item.attempt} attempt(s)",
            attempts=item.attempt,
        )
        await self._record(result)

    async def _write_reply(self, reply: EpisodeReply, item: Assignment) -> EpisodeResult:
        """The episode's log and frames into its folder, then its record (as locally)."""
        result = EpisodeResult.model_validate(reply.result)
        result.attempts = item.attempt
        if self.cancel_event.is_set() and result.status in ("error", "exception", "timeout"):
            result.status, result.error = "cancelled", "cancelled with the run"
        self._spend_error_budget(result)  # before the writes: past it, no episode starts
        await asyncio.to_thread(self._write_files, result.index, reply)
        await self._persist_result(result)
        return result

    def _write_files(self, index: int, reply: EpisodeReply) -> None:
        self.run_dir.create_episode(index)
        log_path = self.run_dir.episode_log_path(index)
        log_path.unlink(missing_ok=True)  # a retry or a resume starts the log afresh
        if self.config.record_log and reply.log:
            log_path.write_bytes(reply.log)  # one write: no per-step work at the head
        if reply.frames:
            assets = self.run_dir.episode_assets_dir(index)
            assets.mkdir(parents=True, exist_ok=True)
            for name, data in reply.frames.items():
                (assets / Path(name).name).write_bytes(data)  # a bare file name
