"""A Ray run before its first episode: a node lost while the actors start, a placement group
that has to wait (and says why), and actors that import only the node sets of the run."""

from __future__ import annotations

import asyncio
import os
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from agentcanvas.cluster.engine import RayEngine
from agentcanvas.cluster.placement import describe_wait, group_name, plan_placement
from agentcanvas.eval.config import EvalRun
from agentcanvas.eval.events import EvalWaiting, LiveEvent
from support.polling import poll_until
from support.ray_cluster import add_node, group_named, identities, live_groups, run_graph
from support.slow_workspace import write_slow_workspace
from support.workspace import write_nodeset

pytestmark = pytest.mark.slow
EPISODES = 6  # per task (two tasks)


def _run_id(runs: Path) -> str | None:
    found = sorted(p.name for p in runs.iterdir()) if runs.is_dir() else []
    return found[0] if found else None


def _episodes(runs: Path, run_id: str) -> int:
    return len(list((runs / run_id / "episodes").glob("*/episode.json")))


async def test_a_node_lost_while_the_actors_start(
    ray_cluster: Any, slow_workspace: Path, reference: EvalRun, tmp_path: Path
) -> None:
    """Three workers, one bundle per node; a node's raylet is killed as soon as Ray has
    placed the group (the actors are still loading): the two others run every episode,
    the records are the uninterrupted run's."""
    import ray
    from ray._private import state

    workspace = write_slow_workspace(tmp_path / "ws")
    runs = workspace / "runs"
    engine = RayEngine()
    run = asyncio.create_task(
        run_graph(workspace, "slow_graph", engine, episode_count=EPISODES, worker_count=3)
    )
    run_id = await asyncio.to_thread(poll_until, lambda: _run_id(runs), "the run folder", 120.0)
    name = group_name(run_id)  # named after the run, as the backend names its groups
    placed = await asyncio.to_thread(
        poll_until, lambda: _created(name), f"group {name} placed", 120.0
    )
    head = ray_cluster.head_node.node_id
    nodes = {n.node_id: n for n in ray_cluster.worker_nodes}
    victim = next(n for n in placed["bundles_to_node_id"].values() if n != head and n in nodes)
    nodes[victim].kill_raylet()
    killed = time.monotonic()
    model = await asyncio.to_thread(
        poll_until, lambda: engine.models.get("probe_model"), "the model actor", 120.0
    )
    try:
        assert _episodes(runs, run_id) == 0  # before any episode ran
        await asyncio.to_thread(
            poll_until, lambda: bool(engine.group and engine.group.answered), "an actor up", 240.0
        )
        up = time.monotonic() - killed
        await asyncio.to_thread(
            poll_until, lambda: _episodes(runs, run_id) > 0, "a first episode", 240.0
        )
        first = time.monotonic() - killed
        done = await asyncio.wait_for(run, 300)
        total = time.monotonic() - killed
    finally:
        ray_cluster.remove_node(nodes[victim], allow_graceful=False)
        add_node(ray_cluster)  # the other tests get their three nodes back
        ray_cluster.wait_for_nodes()
    restarts = state.actors(actor_id=model._actor_id.hex())["NumRestarts"]
    print(f"node lost at start: after the kill, first actor up {up:.1f} s, first episode")
    print(f"  {first:.1f} s, run done {total:.1f} s (model actor restarted {restarts}x)")
    assert done.status == "completed", done.error
    assert identities(done) == identities(reference)
    ran = {k for k, w in enumerate(done.workers) if w.episodes}
    assert len(ran) == 2 and sum(w.episodes for w in done.workers) == done.episodes_total
    assert victim not in {ids[-1] for ids in done.determinism.worker_nodes.values()}
    assert sum(n["Alive"] for n in ray.nodes()) == 3


def _created(name: str) -> dict[str, Any] | None:
    info = group_named(name)
    return info if info is not None and info["state"] == "CREATED" else None


async def test_a_waiting_run_says_why_then_starts(
    ray_cluster: Any, slow_workspace: Path, reference: EvalRun, tmp_path: Path
) -> None:
    """More workers than the cluster has CPUs: the run tells its broadcast what its group
    waits for (the reason /queue gives), its group is named after the run; a node joins,
    the run completes with the local engine's records."""
    import ray

    free = int(ray.available_resources().get("CPU", 0))
    workers = free + 1
    events: list[LiveEvent] = []
    workspace = write_slow_workspace(tmp_path / "ws")
    run = asyncio.create_task(
        run_graph(
            workspace,
            "slow_graph",
            RayEngine(),
            events.append,
            episode_count=EPISODES,
            worker_count=workers,
        )
    )
    waits = await asyncio.to_thread(
        poll_until,
        lambda: [e for e in events if isinstance(e, EvalWaiting)] or None,
        "a wait",
        60.0,
    )
    node = None
    try:
        wait = waits[0]
        demand = plan_placement(workers, {}).demand()
        assert wait.reason == describe_wait(demand, {"CPU": free, "GPU": 0.0})
        assert wait.deadline_s == 300 and 0 < wait.waited_s < wait.deadline_s
        assert wait.placement is not None and wait.placement["state"] == "pending"
        assert wait.placement["bundles"] == [{"CPU": 1.0}] * workers
        group = group_named(group_name(wait.run_id))
        assert group is not None and group["id"] == wait.placement["placement_group"]
        assert wait.wire()["type"] == "eval_waiting"
        node = add_node(ray_cluster)
        done = await asyncio.wait_for(run, 300)
    finally:
        if node is not None:
            ray_cluster.remove_node(node)
        if not run.done():
            run.cancel()
    assert done.status == "completed", done.error
    assert identities(done) == identities(reference)
    assert live_groups() == []
    await asyncio.to_thread(
        poll_until, lambda: sum(n["Alive"] for n in ray.nodes()) == 3, "three nodes", 60.0
    )


MARKER = textwrap.dedent(
    """
    import os
    from agentcanvas.nodes.base import NodeSet

    with open({path!r}, "a") as log:  # who imported this node set
        log.write(f"{{os.getpid()}}\\n")
    NODESET = NodeSet(name="marker", parallelism="replicated")
    """
)


async def test_actors_import_only_the_node_sets_of_the_run(
    ray_cluster: Any, tmp_path: Path
) -> None:
    """A workspace node set the graph does not use is never imported by a worker or model
    actor (each loads its node sets alone, as a node-set server does)."""
    workspace = write_slow_workspace(tmp_path / "ws")
    imports = tmp_path / "imports.log"
    write_nodeset(workspace, "marker", MARKER.format(path=str(imports)))
    done = await run_graph(workspace, "slow_graph", RayEngine(), episode_count=1, worker_count=2)
    assert done.status == "completed", done.error
    pids = set(imports.read_text().split())
    assert pids == {str(os.getpid())}  # the driver's own scan; no actor's
