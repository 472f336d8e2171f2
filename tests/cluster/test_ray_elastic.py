"""The Ray engine when things are lost: a node removed mid-run, a model actor killed, a run
aborted and resumed. Each ends with the records of an uninterrupted local run."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from agentcanvas.cluster.engine import RayEngine
from agentcanvas.eval.config import EvalConfig, EvalRun
from agentcanvas.eval.events import EvalProgress, LiveEvent
from agentcanvas.eval.foreground import finalise_run
from agentcanvas.eval.records import recorded_results
from agentcanvas.eval.run_context import RunContext
from agentcanvas.eval.store import RunDir
from agentcanvas.fileio import read_json
from support.polling import poll_until
from support.ray_cluster import (
    add_node,
    attempts,
    identities,
    live_actor_names,
    registry_for,
    run_graph,
)
from support.slow_workspace import write_slow_workspace

pytestmark = pytest.mark.slow
EPISODES = 12  # per task (two tasks)


def _summary(base: Path) -> dict[str, Any]:
    """The summary.json of the one run folder under ``base`` ({} until it exists)."""
    found = sorted(base.glob("*/summary.json"))
    return read_json(found[0]) if found else {}


async def _started(base: Path, episodes: int) -> dict[str, Any]:
    """Wait (off the event loop's thread) until the run under ``base`` has ``episodes`` done."""

    def ready() -> dict[str, Any] | None:
        summary = _summary(base)
        return summary if summary.get("episodes_done", 0) >= episodes else None

    return await asyncio.to_thread(poll_until, ready, f"{episodes} episodes done", 120.0)


async def _two_episodes_into(engine: RayEngine, workspace: Path) -> asyncio.Task[EvalRun]:
    """A 2-worker Ray run of the slow graph in a fresh ``workspace``, two episodes in."""
    write_slow_workspace(workspace)
    run = asyncio.create_task(
        run_graph(workspace, "slow_graph", engine, episode_count=EPISODES, worker_count=2)
    )
    await _started(workspace / "runs", 2)
    return run


async def test_node_removed_mid_run(
    ray_cluster: Any, slow_workspace: Path, reference: EvalRun, tmp_path: Path
) -> None:
    """The node of a worker is removed: its episode is retried elsewhere with the same seed,
    the run completes with the records of the uninterrupted run and attempts > 1."""
    workspace = tmp_path / "ws"
    run = await _two_episodes_into(RayEngine(), workspace)
    summary = _summary(workspace / "runs")
    head = ray_cluster.head_node.node_id
    nodes = {n.node_id: n for n in ray_cluster.worker_nodes}
    placed = [ids[-1] for ids in summary["determinism"]["worker_nodes"].values()]
    victim = next(node for node in placed if node != head and node in nodes)
    ray_cluster.remove_node(nodes[victim], allow_graceful=False)
    try:
        done = await asyncio.wait_for(run, 180)
    finally:
        add_node(ray_cluster)  # the other tests get their three nodes back
        ray_cluster.wait_for_nodes()
    assert done.status == "completed", done.error
    assert identities(done) == identities(reference)
    retried = attempts(done)
    assert retried and all(e.attempts == 2 for e in retried)
    moved = [ids for ids in done.determinism.worker_nodes.values() if victim in ids]
    assert moved and all(ids[-1] != victim for ids in moved)  # restarted on another node
    assert sum(w.episodes for w in done.workers) == done.episodes_total


async def test_worker_actor_killed_mid_episode(
    ray_cluster: Any, slow_workspace: Path, reference: EvalRun, tmp_path: Path
) -> None:
    """One worker actor is killed while its node stays: Ray restarts it, the episode it held
    is run again with the same seed (attempts 2), and the records are the uninterrupted
    run's."""
    import ray

    engine = RayEngine()
    run = await _two_episodes_into(engine, tmp_path / "ws")
    assert engine.group is not None
    ray.kill(engine.group.actors[0], no_restart=False)  # mid-episode: the slow env is busy
    done = await asyncio.wait_for(run, 180)
    assert done.status == "completed", done.error
    assert identities(done) == identities(reference)
    retried = attempts(done)
    assert retried and all(e.attempts == 2 for e in retried), [e.attempts for e in retried]
    assert sum(w.episodes for w in done.workers) == done.episodes_total
    assert live_actor_names() == []


async def test_model_actor_killed_mid_run(
    ray_cluster: Any, slow_workspace: Path, reference: EvalRun, tmp_path: Path
) -> None:
    """The shared model's actor is killed: Ray restarts it, the workers' calls retry, and the
    records are the uninterrupted run's."""
    import ray
    from ray._private import state

    engine = RayEngine()
    run = await _two_episodes_into(engine, tmp_path / "ws")
    model = engine.models["probe_model"]
    ray.kill(model, no_restart=False)
    done = await asyncio.wait_for(run, 180)
    assert done.status == "completed", done.error
    assert identities(done) == identities(reference)
    info = state.actors(actor_id=model._actor_id.hex())
    assert info["NumRestarts"] >= 1
    assert live_actor_names() == []


async def test_aborted_run_resumes_its_missing_episodes(
    ray_cluster: Any, slow_workspace: Path, reference: EvalRun, tmp_path: Path
) -> None:
    """Aborted mid-run (as when the backend stops): the actors are gone, ``_DONE`` is not
    written, progress went out per episode; the resumed run runs only what is missing and
    ends with the uninterrupted run's records."""
    registry = registry_for(slow_workspace)
    graph = registry.load_graph("slow_graph")
    config = EvalConfig(graph_name=graph.name, episode_count=EPISODES, worker_count=2, engine="ray")
    run_dir = RunDir(tmp_path / "resumed")
    events: list[LiveEvent] = []
    engine = RayEngine()
    await engine.start(registry, graph, config)
    runner = engine.runner(
        RunContext(
            registry,
            graph,
            config,
            run_dir,
            run_id="resumed",
            broadcast=events.append,
            determinism=await engine.determinism(registry, graph),
        )
    )
    task = asyncio.create_task(runner.execute())
    await asyncio.to_thread(poll_until, lambda: len(runner.results) >= 3, "3 results", 120.0)
    runner.cancel(aborted=True)
    first = await asyncio.wait_for(task, 60)
    await finalise_run(registry, runner, run_dir, engine)
    assert first.status == "aborted" and not run_dir.done_path.exists()
    await asyncio.to_thread(poll_until, lambda: live_actor_names() == [], "no actors", 30.0)
    progress = [e for e in events if isinstance(e, EvalProgress)]
    assert len(progress) == len(runner.results)
    assert (progress[-1].episodes_done or 0) >= 3

    kept = [e for e in recorded_results(run_dir) if e.status != "cancelled"]
    assert 3 <= len(kept) < 2 * EPISODES
    registry = registry_for(slow_workspace)
    engine = RayEngine()
    await engine.start(registry, graph, config)
    resumed = engine.runner(
        RunContext(
            registry,
            graph,
            config,
            run_dir,
            run_id="resumed",
            broadcast=events.append,
            determinism=await engine.determinism(registry, graph),
            previous=kept,
        )
    )
    try:
        second = await resumed.execute()
    finally:
        await finalise_run(registry, resumed, run_dir, engine)
    assert second.status == "completed"
    assert sum(w.episodes for w in second.workers) == 2 * EPISODES - len(kept)
    assert identities(second) == identities(reference)
