"""RayWorkerGroup: the worker actors of one run — started, asked where they run, restarted,
killed.

A run does not wait for every actor to come up. ``start`` returns once all have answered,
or — as soon as one has — when the run's placement group lost a node (Ray reports it
``RESCHEDULING``: the bundles there wait for room elsewhere, maybe for a node that never
comes) or when the others are still silent ``STRAGGLER_S`` after the first answer (a node
still installing its runtime env, say). The late ones are awaited by their own worker loops
(``wait_ready``) while the others take episodes, and steal the late ones' shares meanwhile.
Only when no actor answers within ``START_TIMEOUT_S`` does the run fail.

Each actor has at most one question in flight (``where``): a restarting actor queues calls,
and asking again on every poll would leave it a backlog to answer when it is back. Ray's
kill takes effect a moment after ``restart`` asks for it, and the instance it kills may
answer meanwhile: each instance names itself in its answer, and the killed one's answers
do not count, so that no call goes to an instance about to die.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from agentcanvas.cluster.placement import worker_options
from agentcanvas.cluster.run_group import START_TIMEOUT_S, RunGroup, awaited
from agentcanvas.cluster.session import import_ray
from agentcanvas.cluster.worker_actor import EpisodeWorker
from agentcanvas.errors import ServerError

log = logging.getLogger(__name__)
PING_TIMEOUT_S = 2.0
POLL_S = 0.25  # how often a wait for an actor looks at its give-up condition (no new calls)
STRAGGLER_S = 20.0  # after the first actor answered, how long the run waits for the others
STALE_S = 0.05  # after an answer of a killed actor's instance, before asking again


class RayWorkerGroup:
    """W worker actors, worker ``k`` in bundle ``k`` of the run's placement group;
    ``nodes`` records the Ray node ids each one ran on (in order), ``answered`` which have
    answered since they were (re)started."""

    def __init__(
        self,
        graph: dict[str, Any],
        models: dict[str, Any],
        runtime_env: dict[str, Any],
        active: str | None,
        placement: RunGroup,
    ) -> None:
        self.graph = graph
        self.models = models
        self.runtime_env = runtime_env
        self.active = active
        self.placement = placement
        self.actors: list[Any] = []
        self.nodes: dict[str, list[str]] = {}
        self.answered: set[int] = set()
        self.reported_group: str | None = None
        """The placement group the worker actors say they run in (set as they answer)."""
        self._asking: dict[int, asyncio.Future[Any]] = {}
        self._instances: dict[int, str] = {}  # each actor's instance id, as it last answered
        self._killed: dict[int, str] = {}  # the instance `restart` killed, per actor

    def create(self, run_id: str, worker_count: int) -> None:
        """Create the actors in their bundles (they start in the background)."""
        ray = import_ray()
        remote = ray.remote(EpisodeWorker)
        group = self.placement.group
        for k in range(worker_count):
            client = f"{run_id}/w{k}"
            options = worker_options(self.runtime_env, f"agentcanvas:{run_id}:w{k}", group, k)
            actor = remote.options(**options).remote(
                client, self.graph, None, self.active, self.models
            )
            self.actors.append(actor)

    async def start(self, run_id: str, worker_count: int) -> None:
        """Create the actors and wait for them as the module says."""
        self.create(run_id, worker_count)
        started = time.monotonic()
        deadline = started + START_TIMEOUT_S
        first: float | None = None
        while len(self.answered) < len(self.actors):
            waiting = [k for k in range(len(self.actors)) if k not in self.answered]
            await asyncio.gather(*(self._ask(k, PING_TIMEOUT_S) for k in waiting))
            now = time.monotonic()
            if first is None and self.answered:
                first = now
            if first is not None and (now - first >= STRAGGLER_S or await self._lost_a_node()):
                late = sorted(set(range(len(self.actors))) - self.answered)
                log.warning(
                    "run %s starts %.1f s in without worker actor(s) %s; they join when back",
                    run_id,
                    now - started,
                    late,
                )
                return
            if now > deadline:
                raise ServerError(
                    f"Ray could not start any of the {worker_count} worker actor(s) within "
                    f"{START_TIMEOUT_S:g} s in their placement group"
                )

    async def _lost_a_node(self) -> bool:
        """Whether Ray is re-placing bundles of the run's group (a node it used is gone)."""
        ray = import_ray()
        table = await asyncio.to_thread(ray.util.placement_group_table, self.placement.group)
        return str(table.get("state")) == "RESCHEDULING"

    async def _ask(self, worker_id: int, timeout_s: float) -> bool:
        """Whether actor ``worker_id`` answers within ``timeout_s``; an answer records its
        node and checks it runs in the run's group (ServerError if not)."""
        ray = import_ray()
        asking = self._asking.get(worker_id)
        if asking is None:
            where = self.actors[worker_id].where.remote()
            asking = self._asking[worker_id] = asyncio.ensure_future(awaited(where))
        done, _ = await asyncio.wait({asking}, timeout=timeout_s)
        if not done:
            return False
        del self._asking[worker_id]
        try:
            node, group, instance = asking.result()
        except ray.exceptions.RayActorError as exc:
            if exc.actor_init_failed:  # its constructor raised: Ray does not restart it
                raise ServerError(f"worker actor {worker_id} failed to start: {exc}") from exc
            return False
        if instance == self._killed.get(worker_id):  # answered before the kill took effect
            await asyncio.sleep(STALE_S)  # ask again once the kill had a moment
            return False
        self._instances[worker_id] = instance
        if group != self.placement.group_id:  # the reservation would not be what is used
            raise ServerError(f"worker actor {worker_id} is not in the run's placement group")
        self.reported_group = group or None
        self.note_node(worker_id, str(node))
        self.answered.add(worker_id)
        log.info("worker actor %d is up on node %s", worker_id, node)
        return True

    def note_node(self, worker_id: int, node: str) -> None:
        seen = self.nodes.setdefault(str(worker_id), [])
        if not seen or seen[-1] != node:
            seen.append(node)

    def lost(self, worker_id: int) -> None:
        """The actor was lost (or is being restarted): it must answer again."""
        self.answered.discard(worker_id)

    async def wait_ready(
        self, worker_id: int, give_up: Callable[[], bool], timeout_s: float
    ) -> bool:
        """Wait until the actor answers (at once if it has); False once ``give_up()`` or
        timed out."""
        deadline = time.monotonic() + timeout_s
        while worker_id not in self.answered:
            if give_up() or time.monotonic() > deadline:
                return False
            await self._ask(worker_id, POLL_S)  # the same question: polling costs no calls
        return True

    def restart(self, worker_id: int) -> None:
        """Kill the actor so that Ray restarts it fresh (after a timed-out episode)."""
        ray = import_ray()
        self.lost(worker_id)
        if worker_id in self._instances:  # until the new one answers, an answer is the old's
            self._killed[worker_id] = self._instances[worker_id]
        ray.kill(self.actors[worker_id], no_restart=False)

    async def cancel_all(self) -> None:
        """End the episodes in flight as cancelled (best effort: a lost actor has none)."""
        ray = import_ray()
        calls = [a.cancel.remote() for a in self.actors]
        try:
            async with asyncio.timeout(PING_TIMEOUT_S):
                await asyncio.gather(*calls, return_exceptions=True)
        except TimeoutError:
            return
        except ray.exceptions.RayError:
            return

    def kill_all(self) -> None:
        """Kill every worker actor for good (the run is over)."""
        ray = import_ray()
        for asking in self._asking.values():
            asking.cancel()
        self._asking.clear()
        actors, self.actors = self.actors, []
        for actor in actors:
            ray.kill(actor, no_restart=True)
