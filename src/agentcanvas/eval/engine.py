"""Which engine runs a run's episodes: the seam between the eval process and where they run.

An engine prepares what the graph needs (``start``), measures the run's determinism block
from its shared node sets, makes the run's BatchEvalRunner from its RunContext (with the
engine's EpisodeWorkers), and releases what it started
(``close``). :class:`LocalEngine` is the default: node-set servers on this host, the eval
process drives every step. The Ray engine (``agentcanvas.cluster.engine.RayEngine``) runs
whole episodes inside Ray actors; the top-level callers (CLI, eval subprocess, API) pick it
with ``agentcanvas.cluster.select_engine`` when a run's config says ``engine: ray``.
"""

from __future__ import annotations

from typing import Protocol

from agentcanvas.eval.config import DeterminismInfo, EvalConfig
from agentcanvas.eval.determinism import collect_determinism
from agentcanvas.eval.events import Broadcast
from agentcanvas.eval.run_context import RunContext
from agentcanvas.eval.runner import BatchEvalRunner
from agentcanvas.graph.model import Graph
from agentcanvas.server.registry import WorkspaceComponentRegistry


class Engine(Protocol):
    """Starts what a run needs, makes its runner, and releases what it started."""

    name: str

    async def start(
        self,
        registry: WorkspaceComponentRegistry,
        graph: Graph,
        config: EvalConfig,
        *,
        run_id: str = "",
        broadcast: Broadcast | None = None,
    ) -> None:
        """Start what the run ``run_id`` needs; a wait before it can start is told to
        ``broadcast`` (``EvalWaiting``)."""
        ...

    async def determinism(
        self, registry: WorkspaceComponentRegistry, graph: Graph
    ) -> DeterminismInfo: ...

    def runner(self, context: RunContext) -> BatchEvalRunner:
        """The run's runner, its episodes run where this engine runs them."""
        ...

    async def close(self) -> None: ...


class LocalEngine:
    """Node-set servers on this host: the shared ones once, N tagged replicated ones."""

    name = "local"

    async def start(
        self,
        registry: WorkspaceComponentRegistry,
        graph: Graph,
        config: EvalConfig,
        *,
        run_id: str = "",
        broadcast: Broadcast | None = None,
    ) -> None:
        await registry.ensure_nodesets_for_graph(graph, worker_count=config.worker_count)
        registry.prepare_locals(graph)

    async def determinism(
        self, registry: WorkspaceComponentRegistry, graph: Graph
    ) -> DeterminismInfo:
        return await collect_determinism(registry, graph)

    def runner(self, context: RunContext) -> BatchEvalRunner:
        return BatchEvalRunner(context)  # its workers are this host's (LocalEpisodeWorkers)

    async def close(self) -> None:
        """The registry's shutdown stops the servers (``finalise_run``)."""
