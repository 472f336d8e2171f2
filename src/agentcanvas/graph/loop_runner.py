"""LoopRunner: one episode = one fresh GraphExecutor; nothing survives between episodes."""

from __future__ import annotations

from collections.abc import Mapping

from agentcanvas.graph.executor import (
    EpisodeContext,
    EventSink,
    ExecutionPrinciples,
    ExecutionResult,
    FiringLog,
    GraphExecutor,
    NodeResolver,
)
from agentcanvas.graph.model import Graph
from agentcanvas.nodes.base import NodeSetHandle


class LoopRunner:
    """Builds a fresh executor for each run, carrying this worker's overrides into it.

    ``executor`` stays readable after ``run`` is cancelled or times out, so the caller can
    harvest the partial result.
    """

    def __init__(
        self,
        resolver: NodeResolver,
        *,
        env_panel_overrides: Mapping[str, NodeSetHandle] | None = None,
        server_url_overrides: Mapping[str, str] | None = None,
        principles: ExecutionPrinciples | None = None,
        log: FiringLog | None = None,
        events: EventSink | None = None,
    ) -> None:
        self._resolver = resolver
        self._env_panel_overrides = dict(env_panel_overrides or {})
        self._server_url_overrides = dict(server_url_overrides or {})
        self._principles = principles
        self._log = log
        self._events = events
        self.executor: GraphExecutor | None = None

    async def run(
        self,
        graph: Graph,
        episode: EpisodeContext,
        step_budget_override: int | None = None,
    ) -> ExecutionResult:
        self.executor = GraphExecutor(
            graph,
            self._resolver,
            episode=episode,
            env_panel_overrides=self._env_panel_overrides,
            server_url_overrides=self._server_url_overrides,
            principles=self._principles,
            step_budget_override=step_budget_override,
            log=self._log,
            events=self._events,
        )
        return await self.executor.run()
