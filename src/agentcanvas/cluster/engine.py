"""RayEngine: the ``ray`` engine of a run — Ray session, model actors, worker actors.

``start`` opens the session (a local Ray on loopback, or ``ray_address``), ships the
workspace's node sets and graphs (``shipping``), takes the run's placement group (the one the
scheduler reserved, else its own, named after the run: ``run_group``) — telling the run's
broadcast why while Ray cannot place it yet (``EvalWaiting``) — starts one actor per shared
node set in its bundle and binds the registry to them (so the determinism block reads their
start-up checks and audit, as it reads a server's), and the worker actors, each in its
bundle (``workers``); the run's ``RayEpisodeWorkers`` hand them episodes. ``close`` kills
every actor of the run, removes its group and ends a session it opened (while open, this
process's stdout goes to stderr: ``session``).
"""

from __future__ import annotations

import asyncio
import logging
import math
import uuid
from typing import Any

from agentcanvas.cluster.model_actor import ModelServer, RayModelHandle
from agentcanvas.cluster.placement import model_options, plan_placement
from agentcanvas.cluster.run_group import START_TIMEOUT_S, RunGroup, WaitReport
from agentcanvas.cluster.runner import Batching, RayEpisodeWorkers
from agentcanvas.cluster.session import RaySession, import_ray, open_session
from agentcanvas.cluster.shipping import ShippedWorkspace, stage_workspace
from agentcanvas.cluster.workers import RayWorkerGroup
from agentcanvas.errors import ServerError, StateError
from agentcanvas.eval.config import DeterminismInfo, EvalConfig
from agentcanvas.eval.determinism import collect_determinism
from agentcanvas.eval.events import Broadcast, EvalWaiting
from agentcanvas.eval.run_context import RunContext
from agentcanvas.eval.runner import BatchEvalRunner
from agentcanvas.graph.model import Graph
from agentcanvas.server.registry import WorkspaceComponentRegistry

log = logging.getLogger(__name__)


class RayEngine:
    """Runs a run's episodes in Ray actors; the eval process stays the run's only writer."""

    name = "ray"

    def __init__(self, batching: Batching | None = None) -> None:
        self.batching = batching  # how many episodes a call carries (default: Batching())
        self.workers: RayEpisodeWorkers | None = None  # the run's, once its runner is made
        self.session: RaySession | None = None
        self.shipped: ShippedWorkspace | None = None
        self.models: dict[str, Any] = {}
        self.group: RayWorkerGroup | None = None
        self.placement: RunGroup | None = None

    async def start(
        self,
        registry: WorkspaceComponentRegistry,
        graph: Graph,
        config: EvalConfig,
        *,
        run_id: str = "",
        broadcast: Broadcast | None = None,
    ) -> None:
        run_id = run_id or f"engine-{uuid.uuid4().hex[:12]}"  # a caller without a run folder
        shared = registry.shared_in(graph)
        plan = plan_placement(
            config.worker_count, {n: registry.manifest(n).resources for n in shared}
        )
        cpus = max(1, math.ceil(plan.demand()["CPU"]))  # a local Ray: room for the group
        self.session = await asyncio.to_thread(
            open_session, config.ray_address, cpus, quiet_stdout=True
        )
        self.shipped = stage_workspace(registry.workspace, registry.active_workspace)
        runtime_env = self.shipped.runtime_env()
        self.placement = await RunGroup.acquire(plan, run_id, _reporter(run_id, broadcast))
        remote = import_ray().remote(ModelServer)
        for name in shared:
            manifest = registry.manifest(name)
            where = self.placement.bundle_of_model(name)
            options = model_options(manifest, runtime_env, f"agentcanvas:{run_id}:{name}", where)
            actor = remote.options(**options).remote(name, None, self.shipped.active_dir())
            self.models[name] = actor
            registry.bind_handle(name, RayModelHandle(name, actor, manifest))
        await self._models_ready()
        self.group = RayWorkerGroup(
            graph.model_dump(mode="json"),
            self.models,
            runtime_env,
            self.shipped.active_dir(),
            self.placement,
        )
        await self.group.start(run_id, config.worker_count)  # a failure here is the run's

    async def _models_ready(self) -> None:
        try:
            async with asyncio.timeout(START_TIMEOUT_S):
                await asyncio.gather(*(actor.ping.remote() for actor in self.models.values()))
        except TimeoutError as exc:
            raise ServerError(
                f"Ray could not start the model actors {sorted(self.models)} within "
                f"{START_TIMEOUT_S:g} s: does the cluster have the resources they declare?"
            ) from exc

    async def determinism(
        self, registry: WorkspaceComponentRegistry, graph: Graph
    ) -> DeterminismInfo:
        info = await collect_determinism(registry, graph)
        info.engine = self.name
        return info

    def runner(self, context: RunContext) -> BatchEvalRunner:
        """The run's runner, its episodes run by this engine's worker actors."""
        if self.group is None:
            raise StateError("RayEngine.runner before start")
        self.workers = RayEpisodeWorkers(self.group, self.batching)
        return BatchEvalRunner(context, self.workers)

    async def close(self) -> None:
        """Kill the run's actors (workers, then models), remove its placement group, end the
        session if this engine opened it (the cluster's nodes stay up)."""
        try:
            if self.group is not None:
                self.group.kill_all()
            ray = import_ray()
            models, self.models = self.models, {}
            for actor in models.values():
                ray.kill(actor, no_restart=True)
            placement, self.placement = self.placement, None
            if placement is not None:
                placement.remove()  # granted or its own: what the run reserved is released
        finally:
            if self.shipped is not None:
                self.shipped.close()
            if self.session is not None:
                await asyncio.to_thread(self.session.close)


def _reporter(run_id: str, broadcast: Broadcast | None) -> WaitReport:
    """What a placement wait tells: the log always, the run's broadcast when it has one."""

    def report(reason: str, waited_s: float, placement: dict[str, Any]) -> None:
        log.info("run %s waits %.0f s for Ray: %s", run_id, waited_s, reason)
        if broadcast is not None:
            waited, deadline = round(waited_s, 1), START_TIMEOUT_S
            broadcast(
                EvalWaiting(
                    run_id=run_id,
                    reason=reason,
                    waited_s=waited,
                    deadline_s=deadline,
                    placement=placement,
                )
            )

    return report
