"""Supervised env servers: a worker's env server killed (SIGKILL) is restarted, the episode it
was running is retried with the same seed, and the run's records equal an uninterrupted run's.

``tenv`` is a replicated env in a real workspace under tmp_path (its auto_host servers find it
through ``AGENTCANVAS_HOME``); an episode is a pure function of its seed, with a simulated
step latency so that a kill lands in the middle of an episode.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from agentcanvas.eval.config import EpisodeResult, EvalConfig, EvalRun
from agentcanvas.eval.run_context import RunContext
from agentcanvas.eval.runner import BatchEvalRunner
from agentcanvas.eval.store import RunDir
from agentcanvas.fileio import read_jsonl
from agentcanvas.graph.model import Graph, parse_graph
from agentcanvas.server.registry import WorkspaceComponentRegistry
from support.counting_env import TENV
from support.eval_runs import wait_for_firings
from support.registry import started_registry
from support.workspace import home_workspace

pytestmark = pytest.mark.asyncio(loop_scope="module")

RUN_DEADLINE_S = 60.0
POLL_DEADLINE_S = 20.0
N_EPISODES = 8
N_WORKERS = 2


def make_graph(latency_ms: float) -> Graph:
    return parse_graph(
        {
            "version": 1,
            "name": "supervised",
            "env": {"nodeset": "tenv", "fields": {"step_latency_ms": latency_ms}, "tasks": ["ok"]},
            "nodes": [
                {"id": "act", "type": "core.constant", "config": {"value": 1}},
                {"id": "env", "type": "tenv.step"},
                {"id": "out", "type": "core.graphOut"},
            ],
            "edges": [
                {"source": "act.value", "target": "env.action"},
                {"source": "env.metrics", "target": "out.metrics"},
            ],
        }
    )


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    yield from home_workspace(tmp_path_factory, "supervision_ws", {"tenv": TENV})


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def registry(workspace: Path) -> AsyncIterator[WorkspaceComponentRegistry]:
    async with started_registry(workspace, make_graph(0.0), worker_count=N_WORKERS) as reg:
        yield reg


def new_runner(
    registry: WorkspaceComponentRegistry, root: Path, episode_count: int = N_EPISODES
) -> BatchEvalRunner:
    config = EvalConfig(
        graph_name="supervised", episode_count=episode_count, worker_count=N_WORKERS, max_attempts=2
    )
    return BatchEvalRunner(
        RunContext(registry, make_graph(30.0), config, RunDir(root), run_id="20260101_000000")
    )


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def baseline(
    registry: WorkspaceComponentRegistry, tmp_path_factory: pytest.TempPathFactory
) -> EvalRun:
    """The uninterrupted run every interrupted one is compared with."""
    runner = new_runner(registry, tmp_path_factory.mktemp("baseline"))
    summary = await asyncio.wait_for(runner.execute(), RUN_DEADLINE_S)
    assert summary.status_counts == {"completed": N_EPISODES}
    assert all(e.attempts == 1 for e in summary.episodes)
    return summary


def outcome(ep: EpisodeResult) -> dict[str, Any]:
    """What the episode produced, not how often it ran (identity() leaves out ``attempts``)."""
    record = ep.identity()
    assert "attempts" not in record
    return record


def server_pid(registry: WorkspaceComponentRegistry, key: str) -> int:
    server = registry.fleet.records[key].server
    assert server is not None and server.pid is not None
    return server.pid


async def wait_dead(registry: WorkspaceComponentRegistry, key: str) -> None:
    deadline = time.monotonic() + POLL_DEADLINE_S
    while registry.server_alive(key):
        if time.monotonic() > deadline:
            raise AssertionError(f"{key} still alive after SIGKILL")
        await asyncio.sleep(0.005)


def assert_recovered(summary: EvalRun, baseline: EvalRun, chunk: range) -> EpisodeResult:
    """The run completed, one episode of worker 0's chunk ran twice, results are unchanged."""
    assert summary.status == "completed"
    failed = [
        (e.index, e.status, e.attempts, e.error, e.node_errors)
        for e in summary.episodes
        if e.status != "completed"
    ]
    assert summary.status_counts == {"completed": N_EPISODES}, failed
    retried = [e for e in summary.episodes if e.attempts != 1]
    assert len(retried) == 1, [(e.index, e.attempts) for e in summary.episodes]
    (hit,) = retried
    assert hit.attempts == 2 and hit.index in chunk
    assert [outcome(e) for e in summary.episodes] == [outcome(e) for e in baseline.episodes]
    assert summary.aggregate_metrics == baseline.aggregate_metrics
    assert summary.aggregate_by_task == baseline.aggregate_by_task
    return hit


async def test_server_killed_mid_episode_is_restarted_and_the_episode_retried(
    registry: WorkspaceComponentRegistry, baseline: EvalRun, tmp_path: Path
) -> None:
    runner = new_runner(registry, tmp_path)
    victim, bystander = server_pid(registry, "tenv#0"), server_pid(registry, "tenv#1")
    restarts_before = registry.fleet.records["tenv#0"].restarts
    execution = asyncio.ensure_future(asyncio.wait_for(runner.execute(), RUN_DEADLINE_S))
    try:
        # Iteration 0 of episode 0 has fired (act, env, out); at least two more actions of
        # 30 ms each remain, so the kill lands inside the episode.
        await wait_for_firings(runner.run_dir.episode_log_path(0), 3, POLL_DEADLINE_S, 0.002)
        os.kill(victim, signal.SIGKILL)
        summary = await execution
    finally:
        execution.cancel()

    hit = assert_recovered(summary, baseline, range(N_EPISODES // N_WORKERS))
    assert hit.index == 0
    assert registry.fleet.records["tenv#0"].restarts == restarts_before + 1
    assert server_pid(registry, "tenv#0") != victim
    assert server_pid(registry, "tenv#1") == bystander  # the other worker was left alone
    # The retry started its log afresh: each step of the episode appears exactly once.
    log = read_jsonl(runner.run_dir.episode_log_path(hit.index)).records
    assert [r["step"] for r in log if r["node"] == "env"] == list(range(hit.steps))
    assert all(r["status"] == "ok" for r in log)


async def test_server_dead_before_the_episode_starts_is_restarted_too(
    registry: WorkspaceComponentRegistry, baseline: EvalRun, tmp_path: Path
) -> None:
    """The death is noticed while the episode is being set on the panel (not in a node)."""
    runner = new_runner(registry, tmp_path)
    os.kill(server_pid(registry, "tenv#0"), signal.SIGKILL)
    await wait_dead(registry, "tenv#0")
    summary = await asyncio.wait_for(runner.execute(), RUN_DEADLINE_S)

    hit = assert_recovered(summary, baseline, range(N_EPISODES // N_WORKERS))
    assert hit.index == 0
    assert registry.server_alive("tenv#0")


async def test_a_stopped_server_is_killed_at_once_and_the_episode_retried(
    registry: WorkspaceComponentRegistry, baseline: EvalRun, tmp_path: Path
) -> None:
    """A SIGSTOPped server misses its deadline and cannot answer /health; it cannot use a
    SIGTERM grace period either, so it is SIGKILLed at once: the episode is retried within
    about the deadline plus the one-second health check, not deadline + 5 s + 5 s."""
    deadline_s = 2.0
    config = EvalConfig(
        graph_name="supervised",
        episode_count=N_EPISODES,
        worker_count=N_WORKERS,
        max_attempts=2,
        per_step_timeout_s=deadline_s,
    )
    runner = BatchEvalRunner(
        RunContext(registry, make_graph(30.0), config, RunDir(tmp_path), run_id="20260101_000000")
    )
    victim = server_pid(registry, "tenv#0")
    execution = asyncio.ensure_future(asyncio.wait_for(runner.execute(), RUN_DEADLINE_S))
    try:
        await wait_for_firings(runner.run_dir.episode_log_path(0), 3, POLL_DEADLINE_S, 0.002)
        stopped_at = time.monotonic()
        os.kill(victim, signal.SIGSTOP)
        await wait_dead(registry, "tenv#0")  # killed, not waited for
        killed_after_s = time.monotonic() - stopped_at
        summary = await execution
    finally:
        execution.cancel()
        with contextlib.suppress(ProcessLookupError):
            os.kill(victim, signal.SIGKILL)

    hit = assert_recovered(summary, baseline, range(N_EPISODES // N_WORKERS))
    assert hit.index == 0 and server_pid(registry, "tenv#0") != victim
    # Deadline, then at most the health check; the old path added a 5 s health timeout and a
    # 5 s SIGTERM grace (12 s in all for a 2 s deadline).
    assert killed_after_s < deadline_s + 1.0 + 2.5, killed_after_s
