"""One simulated Ray cluster for every test of this folder (it takes seconds to start)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # before Ray is imported: loopback only

from agentcanvas.eval.config import EvalRun
from support.polling import poll_until
from support.ray_cluster import census, live_actor_names, live_groups, run_graph, start_cluster
from support.slow_workspace import write_slow_workspace
from support.workspace import home_workspace


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[Any]:
    import ray

    if ray.is_initialized():  # pragma: no cover - a session left by another test
        ray.shutdown()
    assert not ray._private.ray_constants.ENABLE_RAY_CLUSTER, "Ray imported before the env"
    cluster = start_cluster()

    try:
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()


NODES = 3  # start_cluster's head and two nodes
SETTLE_DEADLINE_S = 60.0


@pytest.fixture(autouse=True)
def settled_cluster(request: pytest.FixtureRequest) -> None:
    """Before a test on the shared cluster: its three nodes alive, every CPU free, and no
    actor or placement group of an earlier run left. Ray releases a killed actor's or a
    removed group's resources asynchronously; a test that started before that could not
    place its own group, and one that leaked would otherwise fail a later test obscurely."""
    if "ray_cluster" not in request.fixturenames:
        return
    request.getfixturevalue("ray_cluster")
    import ray

    def leftovers() -> str | None:
        """What keeps the cluster from being settled; None when nothing does."""
        alive = sum(bool(n["Alive"]) for n in ray.nodes())
        free, total = ray.available_resources().get("CPU", 0.0), ray.cluster_resources()
        groups, actors = live_groups(), live_actor_names()
        if alive == NODES and free == total.get("CPU", 0.0) and not groups and not actors:
            return None
        return (
            f"alive nodes {alive}/{NODES}, CPU free {free} of {total.get('CPU', 0.0)}, "
            f"groups {groups}, actors {actors}\n{census()}"
        )

    poll_until(
        lambda: leftovers() is None,
        "the shared cluster to settle",
        SETTLE_DEADLINE_S,
        explain=lambda: leftovers() or "settled",
    )


@pytest.fixture(scope="module")
def slow_workspace(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A workspace with ``slow_graph`` (support.slow_workspace), one per test module."""
    for root in home_workspace(tmp_path_factory, "ray_slow", {}):
        write_slow_workspace(root)
        yield root


@pytest.fixture(scope="module")
def reference(request: pytest.FixtureRequest, slow_workspace: Path) -> EvalRun:
    """The uninterrupted run on the local engine, one worker, of the module's ``EPISODES``
    per task: what every Ray run of the module must equal."""
    episodes = request.module.EPISODES
    return asyncio.run(
        run_graph(slow_workspace, "slow_graph", episode_count=episodes, worker_count=1)
    )
