"""RayWorkerGroup: the worker actors of one run — started, pinged, restarted, killed."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from agentcanvas.cluster.placement import worker_options
from agentcanvas.cluster.run_group import START_TIMEOUT_S, RunGroup
from agentcanvas.cluster.session import import_ray
from agentcanvas.cluster.worker_actor import EpisodeWorker
from agentcanvas.errors import ServerError

PING_TIMEOUT_S = 2.0


class RayWorkerGroup:
    """W worker actors, worker ``k`` in bundle ``k`` of the run's placement group;
    ``nodes`` records the Ray node ids each one ran on (in order)."""

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
        self.reported_group: str | None = None
        """The placement group every worker actor said it runs in (set by ``start``)."""

    async def start(self, run_id: str, worker_count: int) -> None:
        """Create the actors in their bundles and wait until each has loaded its node sets
        and said it runs in the run's group."""
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
        try:
            async with asyncio.timeout(START_TIMEOUT_S):
                nodes = await asyncio.gather(*(a.node_id.remote() for a in self.actors))
                groups = await asyncio.gather(*(a.placement_group.remote() for a in self.actors))
        except TimeoutError as exc:
            raise ServerError(
                f"Ray could not start {worker_count} worker actor(s) within "
                f"{START_TIMEOUT_S:g} s in their placement group"
            ) from exc
        reported = set(groups)  # what the actors say, for the summary, not what we asked
        self.reported_group = (reported.pop() or None) if len(reported) == 1 else None
        strays = [k for k, g in enumerate(groups) if g != self.placement.group_id]
        if strays:  # Ray placed them elsewhere: the reservation would not be what is used
            raise ServerError(f"worker actor(s) {strays} are not in the run's placement group")
        for k, node in enumerate(nodes):
            self.note_node(k, str(node))

    def note_node(self, worker_id: int, node: str) -> None:
        seen = self.nodes.setdefault(str(worker_id), [])
        if not seen or seen[-1] != node:
            seen.append(node)

    async def ping(self, worker_id: int) -> bool:
        """Whether the actor answers now (and where it runs)."""
        ray = import_ray()
        try:
            async with asyncio.timeout(PING_TIMEOUT_S):
                node = await self.actors[worker_id].node_id.remote()
        except (ray.exceptions.RayActorError, TimeoutError):
            return False
        self.note_node(worker_id, str(node))
        return True

    async def wait_back(
        self, worker_id: int, give_up: Callable[[], bool], timeout_s: float
    ) -> bool:
        """Wait until the (restarted) actor answers; False once ``give_up()`` or timed out."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and not give_up():
            if await self.ping(worker_id):
                return True
            await asyncio.sleep(0.5)
        return False

    def restart(self, worker_id: int) -> None:
        """Kill the actor so that Ray restarts it fresh (after a timed-out episode)."""
        ray = import_ray()
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
        actors, self.actors = self.actors, []
        for actor in actors:
            ray.kill(actor, no_restart=True)
