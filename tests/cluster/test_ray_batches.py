"""Several episodes a Ray call: the same records, budget, timeouts and attempts as one a call.

``Batching`` sizes a call from the head's load; ``min_batch`` forces batches here, where
episodes on the simulated cluster would otherwise go one a call. The actor stops a batch
after an episode that did not complete; the head gives the unrun ones back at the same
attempt, so the error budget and a timeout's restart act after the same episode.
"""

from __future__ import annotations

import asyncio
import json
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentcanvas.cluster.elastic import Assignment, RetryingWork
from agentcanvas.cluster.engine import RayEngine
from agentcanvas.cluster.runner import Batching
from agentcanvas.eval.config import EpisodeResult, EvalConfig, EvalRun
from agentcanvas.eval.dispatch import WorkStealingDispatcher
from agentcanvas.eval.foreground import finalise_run
from agentcanvas.eval.records import recorded_results
from agentcanvas.eval.run_context import RunContext
from agentcanvas.eval.store import RunDir
from support.polling import poll_until
from support.ray_cluster import identities, live_actor_names, registry_for, run_graph
from support.truth_workspace import write_truth_workspace
from support.workspace import home_workspace

FORCED = Batching(min_batch=4)

# -- the rule and the give-back, without Ray -------------------------------------------------


def test_a_call_carries_what_keeps_the_head_under_its_share() -> None:
    rule = Batching()  # 1 ms a call, a quarter of the head's time, at most 16
    assert rule.size(8, None, 1000, stop_rule=False) == 1  # nothing timed yet
    assert rule.size(2, 0.5, 1000, stop_rule=False) == 1  # long episodes go alone
    assert rule.size(1000, 1.0, 100_000, stop_rule=False) == 4  # 1,000 calls/s: four a call
    assert rule.size(8, 0.004, 1000, stop_rule=False) == 8  # 8 * 1 ms / (0.25 * 4 ms)
    assert rule.size(64, 0.001, 100_000, stop_rule=False) == 16  # capped
    assert rule.size(64, 0.001, 100_000, stop_rule=True) == 1  # a stop rule: one a call
    assert rule.size(8, 0.004, 40, stop_rule=False) == 2  # half of a fair share of 40 / 8
    assert rule.size(8, 0.004, 3, stop_rule=False) == 1  # the run's end
    assert FORCED.size(1, None, 100, stop_rule=False) == 4


def test_given_back_episodes_are_handed_out_first_in_order_at_their_attempt() -> None:
    work = RetryingWork(WorkStealingDispatcher([[0, 1, 2, 3, 4, 5]], {}))
    taken = [work.take(0) for _ in range(4)]
    assert taken == [Assignment(i, 1) for i in range(4)] and work.in_flight == 4
    work.done(Assignment(0, 1), lost=False, max_attempts=3)
    work.give_back([Assignment(1, 1), Assignment(2, 1), Assignment(3, 1)])
    assert work.in_flight == 0 and work.remaining == 5
    assert [work.take(0) for _ in range(5)] == [Assignment(i, 1) for i in range(1, 6)]


# -- on the simulated cluster ------------------------------------------------------------------

SOMETIMES_SLOW = textwrap.dedent(
    '''
    """tbatch: a local node that hangs past the per-step deadline on some episodes."""

    import time

    from agentcanvas.nodes.base import NodeSet
    from agentcanvas.nodes.manifest import PortSpec

    NODESET = NodeSet(name="tbatch", parallelism="local")


    @NODESET.node("act", outputs=[PortSpec(name="value")], blocking=True)
    def act(inputs, config, state, ctx):
        if ctx.episode_seed % 4 == 1:
            time.sleep(3600)  # the actor is restarted: its process ends this
        return {"value": 1}


    @NODESET.node("pace", outputs=[PortSpec(name="value")], blocking=True)
    def pace(inputs, config, state, ctx):
        time.sleep(0.25)  # an episode of two steps lasts half a second
        return {"value": 1}
    '''
)

SOMETIMES_SLOW_GRAPH = {
    "version": 1,
    "name": "sometimes_slow",
    "step_budget": 2,
    "nodes": [{"id": "n", "type": "tbatch.act"}, {"id": "out", "type": "core.graphOut"}],
    "edges": [{"source": "n.value", "target": "out.success"}],
}


PACED_GRAPH = {**SOMETIMES_SLOW_GRAPH, "name": "paced"}
PACED_GRAPH["nodes"] = [{"id": "n", "type": "tbatch.pace"}, {"id": "out", "type": "core.graphOut"}]


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    for root in home_workspace(tmp_path_factory, "ray_batches", {"tbatch": SOMETIMES_SLOW}):
        write_truth_workspace(root)
        for graph in (SOMETIMES_SLOW_GRAPH, PACED_GRAPH):
            (root / "graphs" / f"{graph['name']}.json").write_text(json.dumps(graph))
        yield root


async def test_batched_calls_record_what_one_episode_a_call_records(
    ray_cluster: Any, tmp_path: Path
) -> None:
    local = await run_graph(tmp_path, "babyai_oracle", episode_count=8, worker_count=1)
    engine = RayEngine(FORCED)
    batched = await run_graph(tmp_path, "babyai_oracle", engine, episode_count=8, worker_count=2)

    assert batched.status == local.status == "completed"
    assert identities(batched) == identities(local)
    assert all(e.attempts == 1 for e in batched.episodes)
    assert engine.workers is not None
    assert engine.workers.calls < batched.episodes_total  # several episodes a call
    assert sum(w.episodes for w in batched.workers) == batched.episodes_total
    assert live_actor_names() == []


async def test_the_error_budget_stops_a_batched_run_after_the_same_episode(
    ray_cluster: Any, workspace: Path
) -> None:
    """One worker, every episode raises, max_errors 2: exactly the third error stops the run,
    although each call carries four episodes."""
    engine = RayEngine(FORCED)
    run = await run_graph(
        workspace, "raises", engine, episode_count=20, worker_count=1, max_errors=2
    )
    assert run.status == "failed"
    assert run.error is not None and run.error.startswith("max_errors 2 exceeded: 3 episodes")
    assert run.status_counts == {"error": 3}, run.status_counts
    assert sorted(e.index for e in run.episodes) == [0, 1, 2]  # in order: given back first
    assert live_actor_names() == []


async def test_a_timeout_in_a_batch_restarts_the_actor_and_the_rest_run_at_attempt_one(
    ray_cluster: Any, workspace: Path
) -> None:
    config = {"episode_count": 12, "per_step_timeout_s": 0.5}
    local = await run_graph(workspace, "sometimes_slow", worker_count=1, **config)
    engine = RayEngine(FORCED)
    batched = await run_graph(workspace, "sometimes_slow", engine, worker_count=1, **config)

    slow = {e.index for e in local.episodes if e.status == "timeout"}
    assert 0 < len(slow) < 12, "the run seed must give both kinds of episode"
    assert identities(batched) == identities(local)
    assert {e.index for e in batched.episodes if e.status == "timeout"} == slow
    assert all(e.attempts == 1 for e in batched.episodes)  # given back, not retried
    assert engine.workers is not None and engine.workers.calls < 12
    assert live_actor_names() == []


async def test_a_cancel_in_the_middle_of_a_batch_keeps_what_ran_and_resume_runs_the_rest(
    ray_cluster: Any, workspace: Path, tmp_path: Path
) -> None:
    """One worker, four half-second episodes a call, cancelled once the first call's four
    are recorded, while the second call runs: what ended is recorded, the episode in flight
    ends cancelled, the episodes of the call that never started are not recorded; the
    resumed run runs only what is missing and ends with the uninterrupted run's records."""
    episodes = 12
    reference = await run_graph(workspace, "paced", episode_count=episodes, worker_count=1)
    registry = registry_for(workspace)
    graph = registry.load_graph("paced")
    config = EvalConfig(graph_name="paced", episode_count=episodes, worker_count=1, engine="ray")
    run_dir = RunDir(tmp_path / "cancelled")

    async def run(previous: list[EpisodeResult]) -> EvalRun:
        engine = RayEngine(FORCED)
        await engine.start(registry, graph, config)
        context = RunContext(
            registry,
            graph,
            config,
            run_dir,
            run_id="cancelled",
            determinism=await engine.determinism(registry, graph),
            previous=previous,
        )
        runner = engine.runner(context)
        try:
            task = asyncio.create_task(runner.execute())
            if not previous:
                ready = lambda: len(runner.results) >= 4  # noqa: E731
                await asyncio.to_thread(poll_until, ready, "the first call's records", 120.0)
                runner.cancel()
            return await asyncio.wait_for(task, 120)
        finally:
            await finalise_run(registry, runner, run_dir, engine)

    first = await run([])
    assert first.status == "cancelled"
    recorded = sorted(recorded_results(run_dir), key=lambda e: e.index)
    kept = [e for e in recorded if e.status != "cancelled"]
    assert all(e.status == "completed" for e in kept) and len(kept) >= 4
    assert len(recorded) - len(kept) <= 1  # one worker: at most the episode in flight
    assert [e.index for e in recorded] == list(range(len(recorded)))  # in plan order
    assert len(recorded) < 8  # the second call's later episodes never started: not kept

    second = await run(kept)
    assert second.status == "completed"
    assert identities(second) == identities(reference)
    assert all(e.attempts == 1 for e in second.episodes)
    assert live_actor_names() == []
