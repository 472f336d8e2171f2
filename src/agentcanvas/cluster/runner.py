"""RayEpisodeWorkers: a run's workers as Ray actors that run whole episodes.

The run is the local engine's (``eval.runner.BatchEvalRunner``): its plan, dispatcher,
error budget, cancel and resume, and everything about the run folder through its recorder
(``eval.recorder.RunRecorder``). Only where episodes run differs: each worker loop takes
episodes (RetryingWork: retries first, else the work-stealing dispatcher), sends them to its
actor in one call, and hands what comes back to the recorder — each record with its files
(the episode's log.jsonl and frames, :class:`ShippedFiles`), written as the local engine
writes them. How many a call carries is :class:`Batching`'s choice (one, unless the head
would not keep up); the actor stops a batch after an episode that did not complete or once
cancelled, and the episodes it did not run are given back at the same attempt, so that the
error budget, a timeout's restart and a cancel act after the same episode as with one
episode a call. A worker actor or node lost mid-call puts the call's episodes back for a
retry with the same seeds (``attempts`` counts them); the loop waits for Ray to restart its
actor and goes on, while the other workers keep taking episodes. The same holds before the first
episode: a loop whose actor has not answered yet (its node lost as it started, or slow)
waits for it while the others run (``RayWorkerGroup.start``). When every worker is gone with
episodes left the run raises ServerDiedError: it ends ``aborted`` and can be resumed.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from dataclasses import dataclass
from pathlib import Path

from agentcanvas.cluster.elastic import Assignment, RetryingWork
from agentcanvas.cluster.run_group import START_TIMEOUT_S
from agentcanvas.cluster.session import import_ray
from agentcanvas.cluster.shared_folder import check_token, place_log
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

__all__ = ["ACTOR_RETURN_S", "HEAD_MARGIN_S", "Batching", "RayEpisodeWorkers", "ShippedFiles"]

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
        if self.reply.log_staged is not None:  # the actor staged it here (`shared_folder`)
            place_log(self.run_dir, self.index, self.reply.log_staged)
        elif self.record_log and self.reply.log:
            log_path.write_bytes(self.reply.log)  # one write, over an earlier attempt's log
        else:
            log_path.unlink(missing_ok=True)  # a retry or a resume starts the log afresh
        assets = self.run_dir.episode_assets_dir(self.index)
        clear_frames(assets)  # what a retried or resumed attempt left
        if self.reply.frames:
            assets.mkdir(parents=True, exist_ok=True)
            for name, data in self.reply.frames.items():
                (assets / Path(name).name).write_bytes(data)  # a bare file name


@dataclass(frozen=True)
class Batching:
    """How many episodes one call to a worker actor carries.

    A Ray actor call costs the head about ``call_s`` of CPU whatever it carries (measured:
    0.8-1.1 ms a call on a simulated cluster, against 0.10-0.15 ms an episode with 8 episodes
    a call). W workers whose calls each carry k episodes of e seconds make W / (k e) calls a
    second, which take W * call_s / (k e) of the head's time: k is the least that keeps this
    under ``head_share``, from the episode time measured so far (one episode a call until a
    reply was timed), and at most ``max_batch``. A quarter: recording each result takes the
    head another 0.15-0.2 ms on the Ray path (``bench/head_load.py``, 10-160 steps), and
    Ray's own handling of each reply more, so at 1,000 results/s the calls and the records
    together stay within one core. So short episodes on many workers are
    batched and a long episode goes alone, acknowledged as soon as it ends. Two more limits:
    at most a half of the worker's fair share of what is left (the run's end stays
    balanced), and one episode a call in a run with a stop rule (its decision wants few
    episodes run past it). ``min_batch`` above 1 batches whatever the measure (tests)."""

    call_s: float = 0.001
    head_share: float = 0.25
    max_batch: int = 16
    min_batch: int = 1

    def size(self, workers: int, episode_s: float | None, remaining: int, stop_rule: bool) -> int:
        if stop_rule:
            return 1
        want = self.min_batch
        if episode_s is not None:
            calls = workers * self.call_s / (self.head_share * max(episode_s, 1e-6))
            want = max(want, math.ceil(calls))
        fair = remaining // (2 * workers)
        return max(1, min(self.max_batch, want, fair))


EPISODE_S_WEIGHT = 0.2  # of the latest call in the running mean of an episode's time


class RayEpisodeWorkers:
    """The Ray engine's workers: the actors of a RayWorkerGroup, one per worker;
    ``calls`` counts the calls that carried episodes."""

    def __init__(self, group: RayWorkerGroup, batching: Batching | None = None) -> None:
        self.group = group
        self.batching = batching or Batching()
        self.lost_workers = 0
        self.calls = 0
        self.episode_s: float | None = None  # a running mean of an episode's time in a call
        self.storage_token = ""  # the run folder's token (`shared_folder`), "" for none
        self.run_root = ""  # its path as sent to the actors (resolved once)

    async def run(self, control: RunControl, dispatcher: WorkStealingDispatcher) -> None:
        run = control.recorder.run
        if control.config.record_log:  # actors that see the run folder write logs there
            self.storage_token = check_token(control.context.run_dir)
            self.run_root = str(control.context.run_dir.root.resolve())
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
            items = self._take(control, worker_id, work)
            if not items:
                if work.finished():
                    return
                await work.wait_for_change(1.0)  # an episode in flight may come back
                continue
            replies = await self._send(control, worker_id, items)
            if replies is None:
                self.group.lost(worker_id)
                for item in items:
                    await self._lost(control, item, work)
                continue
            timed_out = False
            for item, reply in zip(items, replies, strict=False):
                work.done(item, lost=False, max_attempts=control.config.max_attempts)
                result = await self._record_reply(control, reply, item)
                timed_out = timed_out or result.status == "timeout"
            # After the records: an error among them spent the budget before any of these
            # could be handed out again.
            work.give_back(items[len(replies) :])
            if timed_out and not control.cancelled:
                self.group.restart(worker_id)  # a call may still run in the old simulator

    def _take(self, control: RunControl, worker_id: int, work: RetryingWork) -> list[Assignment]:
        """The next call's episodes (none when there is none right now)."""
        size = self.batching.size(
            control.config.worker_count,
            self.episode_s,
            work.remaining,
            control.recorder.stop.rule is not None,
        )
        items: list[Assignment] = []
        while len(items) < size and (item := work.take(worker_id)) is not None:
            items.append(item)
        return items

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
            run_dir=self.run_root if self.storage_token else "",
            storage_token=self.storage_token,
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
        self, control: RunControl, worker_id: int, items: list[Assignment]
    ) -> list[EpisodeReply] | None:
        """``items`` on the worker's actor in one call: the replies of those it ran, in
        order (it stops early: see the module); None when the actor or its node was lost."""
        ray = import_ray()
        actor = self.group.actors[worker_id]
        indices = [item.index for item in items]
        started = time.monotonic()
        try:
            async with asyncio.timeout(self._head_deadline_s(control) * len(items)):
                requests = [self._request(control, index) for index in indices]
                self.calls += 1
                replies: list[EpisodeReply] = await actor.run_batch.remote(requests)
        except ray.exceptions.RayActorError as exc:
            log.warning("worker %d lost episode(s) %s: %s", worker_id, indices, exc)
            return None
        except ray.exceptions.RayTaskError as exc:  # the actor's own error, not a loss
            cause = getattr(exc, "cause", None)
            if isinstance(cause, ServerDiedError):  # a model actor that never came back
                raise ServerDiedError(str(cause)) from exc  # the run ends aborted
            raise
        except TimeoutError:
            log.warning("worker %d silent past the deadline on episode(s) %s", worker_id, indices)
            self.group.restart(worker_id)
            return None
        if replies:
            self._note_episode_s((time.monotonic() - started) / len(replies))
            self.group.note_node(worker_id, replies[-1].node_id)
        return replies

    def _note_episode_s(self, seconds: float) -> None:
        mean = self.episode_s
        self.episode_s = seconds if mean is None else mean + EPISODE_S_WEIGHT * (seconds - mean)

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
