"""Synthetic workers: an honest ``EpisodeWorkers`` whose episodes take no time, for loading
the head's real recording path (RunRecorder, its writer, the dispatcher) past what it can
record. Run as a script it is the eval process of the acknowledgement test:

    python -m support.synthetic_workers RUN_ROOT EPISODES KILL_AT

prints each acknowledged episode's index (its ``eval_episode_done`` event) and SIGKILLs
itself right after the ``KILL_AT``-th acknowledgement, with more records in flight.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

from agentcanvas.eval.config import EpisodeResult, EvalConfig
from agentcanvas.eval.dispatch import WorkStealingDispatcher
from agentcanvas.eval.episode_log import EpisodeLog
from agentcanvas.eval.events import Broadcast, EvalEpisodeDone, LiveEvent
from agentcanvas.eval.run_context import RunContext
from agentcanvas.eval.run_control import RunControl
from agentcanvas.eval.runner import BatchEvalRunner
from agentcanvas.eval.store import RunDir
from agentcanvas.server.registry import WorkspaceComponentRegistry

GRAPH = "cartpole_mlp"
STEPS = 10


class SyntheticWorkers:
    """``workers`` loops that finish each episode at once (a completed CartPole-like record
    and a log of two firings per step) and hand it to the run; ``gaps`` holds, each time a
    worker takes an episode, how many handed-out episodes the head had not stored yet."""

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self.handed_out = 0
        self.gaps: list[int] = []

    async def run(self, control: RunControl, dispatcher: WorkStealingDispatcher) -> None:
        async with asyncio.TaskGroup() as tasks:
            for k in range(self.workers):
                tasks.create_task(self._loop(control, dispatcher, k))

    async def _loop(self, control: RunControl, dispatcher: WorkStealingDispatcher, k: int) -> None:
        while not control.cancelled and (index := dispatcher.next_for(k)) is not None:
            self.handed_out += 1
            self.gaps.append(self.handed_out - len(control.recorder.results))
            result, log = episode(control, index)
            control.spend(result)
            await control.record(result, log)


def episode(control: RunControl, index: int) -> tuple[EpisodeResult, EpisodeLog]:
    """A finished episode ``index``: its record and its firing log (not written yet)."""
    spec = control.specs[index]
    log = EpisodeLog(control.context.run_dir.episode_log_path(index))
    for step in range(STEPS):
        log.record({"step": step, "node": "env", "status": "ok", "outputs": {"reward": 1.0}})
    log.finish()
    result = EpisodeResult(
        index=index,
        task=spec.task,
        episode_index=spec.episode_index,
        seed=spec.seed,
        status="completed",
        steps=STEPS,
        metrics={"success": True, "return": float(STEPS)},
        end_reason="success",
    )
    return result, log


def synthetic_runner(
    run_root: Path, episodes: int, workers: SyntheticWorkers, broadcast: Broadcast | None = None
) -> BatchEvalRunner:
    """A real runner of ``episodes`` episodes of GRAPH in ``run_root``, on ``workers``."""
    registry = WorkspaceComponentRegistry(workspace=run_root.parent)
    registry.scan_all()
    graph = registry.load_graph(GRAPH)
    config = EvalConfig(
        graph_name=GRAPH, episode_count=episodes, worker_count=workers.workers, record_log=True
    )
    context = RunContext(
        registry, graph, config, RunDir(run_root), run_root.name, broadcast=broadcast
    )
    return BatchEvalRunner(context, workers)


def _acknowledge(kill_at: int) -> Broadcast:
    acknowledged = 0

    def broadcast(event: LiveEvent) -> None:
        nonlocal acknowledged
        if isinstance(event, EvalEpisodeDone):
            acknowledged += 1
            print(event.episode.index, flush=True)
            if acknowledged == kill_at:
                os.kill(os.getpid(), signal.SIGKILL)

    return broadcast


def main() -> None:
    run_root, episodes, kill_at = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    runner = synthetic_runner(run_root, episodes, SyntheticWorkers(8), _acknowledge(kill_at))
    asyncio.run(runner.execute())


if __name__ == "__main__":
    main()
