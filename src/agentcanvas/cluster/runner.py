"""RayEpisodeWorkers: a run's workers as Ray actors that run whole episodes.

The run is the local engine's (``eval.runner.BatchEvalRunner``): its plan, dispatcher,
error budget, cancel and resume, and everything about the run folder through its recorder
(``eval.recorder.RunRecorder``). Only where episodes run differs: each worker loop takes an
episode (RetryingWork: a retry first, else the work-stealing dispatcher), sends it to its
actor in one call, and hands what comes back to the recorder — the record with its files
(the episode's log.jsonl and frames, :class:`ShippedFiles`), written as the local engine
writes them. A worker actor or node lost mid-episode puts the episode back for a retry with
the same seed (``attempts`` counts them); the loop waits for Ray to restart its actor and
goes on, while the other workers keep taking episodes. The same holds before the first
episode: a loop whose actor has not answered yet (its node lost as it started, or slow)
waits for it while the others run (``RayWorkerGroup.start``). When every worker is gone with
episodes left the run raises ServerDiedError: it ends ``aborted`` and can be resumed.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from agentcanvas.cluster.elastic import Assignment, RetryingWork
from agentcanvas.cluster.run_group import START_TIMEOUT_S
from agentcanvas.cluster.session import import_ray
from agentcanvas.cluster.worker_actor import EpisodeReply, EpisodeRequest
from agentcanvas.cluster.workers import RayWorkerGroup
from agentcanvas.errors import ServerDiedError
from agentcanvas.eval.config import EpisodeResult
from agentcanvas.eval.dispatch import WorkStealingDispatcher
from agentcanvas.eval.episode import episode_result
from agentcanvas.eval.media import clear_frames, keeps_frames, renders
from agentcanvas.eval.run_control import RunControl
from agentcanvas.eval.store import RunDir
from agentcanvas.graph.model import DEFAULT_STEP_BUDGET

__all__ = ["ACTOR_RETURN_S", "HEAD_MARGIN_S", "RayEpisodeWorkers", "ShippedFiles"]

log = logging.getLogger(__name__)
ACTOR_RETURN_S = 120.0  # how long a worker loop waits for Ray to bring its actor back
HEAD_MARGIN_S = 60.0  # beyond the episode's own safety net before the head gives up on it


class ShippedFiles:
    """An episode's log.jsonl and frames as its actor sent them, written by the recorder."""

    def __init__(self, run_dir: RunDir, index: int, reply: EpisodeReply, record_log: bool):
        self.run_dir, self.index, self.reply, self.record_log = run_dir, index, reply, record_log

    @property
    def nbytes(self) -> int:
        return len(self.reply.log) + sum(len(data) for data in self.reply.frames.values())

    def discard(self) -> None:
        """Nothing is held but the reply itself."""

    def write_rest(self) -> None:
        log_path = self.run_dir.episode_log_path(self.index)
        if self.record_log and self.reply.log:
            log_path.write_bytes(self.reply.log)  # one write, over an earlier attempt's log
        else:
            log_path.unlink(missing_ok=True)  # a retry or a resume starts the log afresh
        assets = self.run_dir.episode_assets_dir(self.index)
        clear_frames(assets)  # what a retried or resumed attempt left
        if self.reply.frames:
            assets.mkdir(parents=True, exist_ok=True)
            for name, data in self.reply.frames.items():
                (assets / Path(name).name).write_bytes(data)  # a bare file name


class RayEpisodeWorkers:
    """The Ray engine's workers: the actors of a RayWorkerGroup, one per worker."""

    def __init__(self, group: RayWorkerGroup) -> None:
        self.group = group
        self.lost_workers = 0

    async def run(self, control: RunControl, dispatcher: WorkStealingDispatcher) -> None:
        run = control.recorder.run
        run.determinism.worker_nodes = self.group.nodes  # filled in as the actors report
        run.determinism.placement_group = self.group.reported_group
        work = RetryingWork(dispatcher)
        async with asyncio.TaskGroup() as tasks:
            forward = tasks.create_task(self._forward_cancel(control))
            workers = [
                tasks.create_task(self._worker_loop(control, k, work))
                for k in range(control.config.worker_count)
            ]
            await asyncio.wait(workers)
            forward.cancel()
        if work.remaining and not control.cancelled:
            raise ServerDiedError(
                f"every Ray worker was lost with {work.remaining} episode(s) left; "
                "resume the run once the cluster has capacity again"
            )

    async def _forward_cancel(self, control: RunControl) -> None:
        await control.cancel_event.wait()
        await self.group.cancel_all()

    async def _worker_loop(self, control: RunControl, worker_id: int, work: RetryingWork) -> None:
        """Take episodes while the actor is there; wait for it when it is not (not up yet,
        lost, restarted), giving up once nothing is left for it."""
        wait_s = START_TIMEOUT_S  # the first time: an actor whose node was lost as it started
        while not control.cancelled:
            if not await self._actor_ready(control, worker_id, work, wait_s):
                self.lost_workers += not (work.finished() or control.cancelled)
                return
            wait_s = ACTOR_RETURN_S
            item = work.take(worker_id)
            if item is None:
                if work.finished():
                    return
                await work.wait_for_change(1.0)  # an episode in flight may come back
                continue
            reply = await self._send(control, worker_id, item)
            if reply is None:
                self.group.lost(worker_id)
                await self._lost(control, item, work)
                continue
            work.done(item, lost=False, max_attempts=control.config.max_attempts)
            result = await self._record_reply(control, reply, item)
            if result.status == "timeout" and not control.cancelled:
                self.group.restart(worker_id)  # a call may still run in the old simulator

    async def _actor_ready(
        self, control: RunControl, worker_id: int, work: RetryingWork, timeout_s: float
    ) -> bool:
        """Whether the worker's actor answers, waiting up to ``timeout_s`` for it; False when
        it does not, or once nothing is left for it to do."""
        return await self.group.wait_ready(
            worker_id, lambda: work.finished() or control.cancelled, timeout_s
        )

    def _request(self, control: RunControl, index: int) -> EpisodeRequest:
        config = control.config
        return EpisodeRequest(
            spec=control.specs[index],
            step_budget=config.step_budget,
            per_step_timeout_s=config.per_step_timeout_s,
            episode_timeout_s=config.episode_timeout_s,
            save_frames=renders(config),
            record_log=config.record_log,
        )

    def _head_deadline_s(self, control: RunControl) -> float:
        """The head's own limit on one episode call: the episode's safety net plus a margin
        (the step budget the env resolves is not known here, so the largest plausible)."""
        config = control.config
        if config.episode_timeout_s is not None:
            return config.episode_timeout_s + HEAD_MARGIN_S
        budget = config.step_budget or control.context.graph.step_budget or DEFAULT_STEP_BUDGET
        return max(budget, DEFAULT_STEP_BUDGET) * config.per_step_timeout_s + HEAD_MARGIN_S

    async def _send(
        self, control: RunControl, worker_id: int, item: Assignment
    ) -> EpisodeReply | None:
        """One episode on the worker's actor; None when the actor or its node was lost."""
        ray = import_ray()
        actor = self.group.actors[worker_id]
        try:
            async with asyncio.timeout(self._head_deadline_s(control)):
                request = self._request(control, item.index)
                reply: EpisodeReply = await actor.run.remote(request)
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

    async def _lost(self, control: RunControl, item: Assignment, work: RetryingWork) -> None:
        """Queue a lost episode again; past max_attempts record it as lost."""
        if work.done(item, lost=True, max_attempts=control.config.max_attempts):
            return
        error = f"its Ray worker was lost on each of {item.attempt} attempt(s)"
        result = episode_result(control.specs[item.index], "worker_lost", error)
        result.attempts = item.attempt
        control.spend(result)
        await control.record(result)

    async def _record_reply(
        self, control: RunControl, reply: EpisodeReply, item: Assignment
    ) -> EpisodeResult:
        """The episode's record, with its log and frames, through the run's recorder."""
        result = EpisodeResult.model_validate(reply.result)
        result.attempts = item.attempt
        control.settle_cancelled(result)
        control.spend(result)  # before the writes: past it, no episode starts
        if not keeps_frames(control.config, result):
            reply.frames = {}
        run_dir, record_log = control.context.run_dir, control.config.record_log
        await control.record(result, ShippedFiles(run_dir, result.index, reply, record_log))
        return result
