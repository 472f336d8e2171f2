"""A MuJoCo simulator that dies mid-episode: its env_metaworld server (forked from the
template, MetaWorld loaded before the fork) is restarted, the episode retried with the same
seed, and the run's records equal an uninterrupted run's."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from agentcanvas.eval.config import EvalConfig, EvalRun
from agentcanvas.eval.run_context import RunContext
from agentcanvas.eval.runner import BatchEvalRunner
from agentcanvas.eval.store import RunDir
from agentcanvas.server.registry import WorkspaceComponentRegistry
from support.eval_runs import wait_for_firings
from support.registry import started_registry

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

TASKS = ["pick-place-v3"]  # about 50 steps an episode: a kill lands inside one
N_EPISODES = 4
N_WORKERS = 2


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def registry(
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[WorkspaceComponentRegistry]:
    workspace = tmp_path_factory.mktemp("metaworld_supervision")
    async with started_registry(workspace, "metaworld_expert", worker_count=N_WORKERS) as reg:
        yield reg


def new_runner(registry: WorkspaceComponentRegistry, root: Path) -> BatchEvalRunner:
    config = EvalConfig(
        graph_name="metaworld_expert",
        episode_count=N_EPISODES,
        worker_count=N_WORKERS,
        tasks=TASKS,
        max_attempts=2,
    )
    graph = registry.load_graph("metaworld_expert")
    return BatchEvalRunner(
        RunContext(registry, graph, config, RunDir(root), run_id="20260101_000000")
    )


async def test_a_killed_mujoco_server_is_restarted_and_its_episode_retried(
    registry: WorkspaceComponentRegistry, tmp_path: Path
) -> None:
    baseline: EvalRun = await asyncio.wait_for(
        new_runner(registry, tmp_path / "baseline").execute(), 120
    )
    assert baseline.status_counts == {"completed": N_EPISODES}
    server = registry.fleet.records["env_metaworld#0"].server
    assert server is not None and server.pid is not None
    victim = server.pid
    runner = new_runner(registry, tmp_path / "killed")
    execution = asyncio.ensure_future(asyncio.wait_for(runner.execute(), 120))
    try:
        await wait_for_firings(runner.run_dir.episode_log_path(0), 10, 30.0, 0.002)
        os.kill(victim, signal.SIGKILL)
        summary = await execution
    finally:
        execution.cancel()
    assert summary.status_counts == {"completed": N_EPISODES}
    retried = [e.index for e in summary.episodes if e.attempts == 2]
    assert retried == [0], [(e.index, e.attempts) for e in summary.episodes]
    assert [e.identity() for e in summary.episodes] == [e.identity() for e in baseline.episodes]
    assert summary.aggregate_metrics == baseline.aggregate_metrics
    restarted = registry.fleet.records["env_metaworld#0"].server
    assert restarted is not None and restarted.pid != victim
