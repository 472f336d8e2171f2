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
from support.ray_cluster import run_graph, start_cluster
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
