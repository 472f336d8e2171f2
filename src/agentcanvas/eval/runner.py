"""BatchEvalRunner: one graph × many episodes on N workers, bit-identical at any N.

The runner plans the run (``eval.episode_plan``: an episode's seed comes from its identity,
never from a worker), hands the missing episodes to its workers through a dispatcher, and
decides how the run ends. Three parts do the rest, each of its own:

- the workers (``run_control.EpisodeWorkers``): this host's worker slots
  (``local_workers.LocalEpisodeWorkers``, the default) or Ray actors
  (``cluster.runner.RayEpisodeWorkers``);
- the recorder (``recorder.RunRecorder``): episode files, the index, counts, live aggregates
  and summary.json;
- the control (``run_control.RunControl``) they share: the plan, the cancel flag and the
  error budget.

Which worker runs which episode is decided by a
:class:`~agentcanvas.eval.dispatch.WorkStealingDispatcher` (own contiguous chunk first, then
the tail of the longest remaining chunk; in plan order when a stop rule watches the
plan-order prefix); its per-worker stats are the summary's ``workers``. Results are keyed by
episode index and every final aggregate is computed from the results sorted by index.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Mapping
from typing import ClassVar

from agentcanvas.errors import ConfigError, DiskFullError
from agentcanvas.eval.config import EpisodeResult, EvalRun
from agentcanvas.eval.determinism import finish_determinism, start_determinism
from agentcanvas.eval.dispatch import InOrderDispatcher, WorkStealingDispatcher
from agentcanvas.eval.episode_plan import episode_tasks, metric_rules, plan_episodes
from agentcanvas.eval.local_workers import LocalEpisodeWorkers
from agentcanvas.eval.recorder import RunRecorder
from agentcanvas.eval.run_context import RunContext
from agentcanvas.eval.run_control import EpisodeWorkers, RunControl
from agentcanvas.eval.run_state import RunStatus
from agentcanvas.eval.stat_args import load_scipy
from agentcanvas.eval.store import RunDir
from agentcanvas.eval.worker_pool import partition_contiguous
from agentcanvas.graph.model import Graph
from agentcanvas.server.registry import WorkspaceComponentRegistry

log = logging.getLogger(__name__)

__all__ = ["BatchEvalRunner", "episode_tasks", "metric_rules", "plan_episodes"]


class BatchEvalRunner:
    """Runs a frozen graph over the planned episodes with ``workers`` (default: local)."""

    # Dispatch policy: idle workers steal from the longest remaining chunk. False gives
    # fixed contiguous chunks (bench/scaling.py measures both); results are the same.
    work_stealing: ClassVar[bool] = True

    def __init__(self, context: RunContext, workers: EpisodeWorkers | None = None) -> None:
        graph = context.graph.model_copy(deep=True)  # frozen at construction
        _require_replicated_env(context.registry, graph)
        self.context = context = dataclasses.replace(context, graph=graph)
        specs = plan_episodes(context.config, graph, context.run_id)
        rules = metric_rules(context.registry, graph, context.config)
        self.control = RunControl(context, specs, rules)
        self.recorder: RunRecorder = self.control.recorder
        self.workers: EpisodeWorkers = workers or LocalEpisodeWorkers()

    @property
    def run(self) -> EvalRun:
        """The run's summary (summary.json), as it stands."""
        return self.recorder.run

    @property
    def results(self) -> Mapping[int, EpisodeResult]:
        """The results stored so far, by index."""
        return self.recorder.results

    @property
    def graph(self) -> Graph:
        return self.context.graph

    @property
    def run_dir(self) -> RunDir:
        return self.context.run_dir

    @property
    def cancel_event(self) -> asyncio.Event:
        return self.control.cancel_event

    @property
    def aborted(self) -> bool:
        return self.control.aborted

    @property
    def disk_full(self) -> DiskFullError | None:
        return self.recorder.disk_full

    def cancel(self, aborted: bool = False) -> None:
        """Stop after the episodes in flight; ``aborted`` when our parent died (resumable)."""
        self.control.cancel(aborted)

    def save(self) -> None:
        """Write summary.json as the run stands (complete once its status is terminal)."""
        self.recorder.save()

    async def execute(self) -> EvalRun:
        """Run the missing episodes on ``worker_count`` workers; returns the final summary.

        A full disk stops the run after the episodes in flight: it ends ``aborted`` with the
        reason, resumable once space is freed."""
        context, recorder = self.context, self.recorder
        todo = [s.index for s in self.control.specs if s.index not in recorder.results]
        await asyncio.to_thread(load_scipy)  # the aggregates' imports, before the clock
        recorder.start()
        # Before the first episode: a --certify run has its shared servers recompute every
        # batched row of it alone.
        await start_determinism(
            context.registry,
            context.graph,
            context.run_id,
            context.config.certify,
            recorder.run.determinism,
        )
        recorder.save_live()
        dispatcher = self._dispatcher(todo)
        recorder.run.workers = dispatcher.stats  # updated in place as episodes are handed out
        try:
            async with asyncio.TaskGroup() as group:
                live = group.create_task(recorder.live_summary())
                try:
                    await self.workers.run(self.control, dispatcher)  # its failure ends it
                except BaseException:  # every admitted record is written, whatever ended them
                    await _drain_keeping_the_cause(recorder)
                    raise
                await asyncio.shield(recorder.drain())
                live.cancel()  # the final summary recomputes every aggregate
        finally:
            recorder.close_live()
        await finish_determinism(
            context.registry, context.graph, context.run_id, recorder.run.determinism
        )
        self._end()
        return await recorder.finish()

    def _dispatcher(self, todo: list[int]) -> WorkStealingDispatcher:
        """Work stealing over contiguous chunks; in plan order when a stop rule decides on
        the plan-order prefix."""
        stop, workers = self.recorder.stop, self.context.config.worker_count
        tasks = {s.index: s.task for s in self.control.specs}
        if stop.rule is not None:
            in_order = sorted(todo, key=stop.position.__getitem__)
            return InOrderDispatcher(in_order, tasks).with_workers(workers)
        chunks = partition_contiguous(todo, workers)
        return WorkStealingDispatcher(chunks, tasks, steal=self.work_stealing)

    def _end(self) -> None:
        """The run's final status, from why its workers stopped."""
        run, control, recorder = self.recorder.run, self.control, self.recorder
        if control.stop_reason is not None:
            run.move_to(RunStatus.FAILED, control.stop_reason)
        elif recorder.disk_full is not None:
            run.move_to(RunStatus.ABORTED, str(recorder.disk_full))
        elif recorder.stop.decided:  # the stop rule ended it: completed, with its decision
            run.move_to(RunStatus.COMPLETED)
        elif control.cancelled and not recorder.all_finished():
            run.move_to(RunStatus.ABORTED if control.aborted else RunStatus.CANCELLED)
        else:  # also when cancelled after its last episode finished
            run.move_to(RunStatus.COMPLETED)


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


async def _drain_keeping_the_cause(recorder: RunRecorder) -> None:
    """Drain ``recorder`` while the workers' own error (a lost server, a cancellation)
    propagates: a write failure found here is logged, not raised in its place, so the run
    still ends as that error says (aborted, cancelled), not failed."""
    try:
        await asyncio.shield(recorder.drain())
    except Exception:
        log.exception("recording failed while the run was ending for another reason")
