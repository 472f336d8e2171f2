"""A user's slow in-process node costs its own episode time, never another episode's.

A workspace node set ``lazyglue`` (local, written with only what docs/nodesets.md documents)
drives the built-in replicated ``env_gym`` (CartPole). Its ``act`` node builds a per-episode
table on an episode's first call; for the episodes whose seed is even that build sleeps past
the run's per-step timeout. A plain synchronous node of a workspace node set runs on a
thread of its own under the per-step deadline, so:

- those episodes, and only those, end ``timeout``, blamed on ``policy`` (the slow node);
- every other episode completes, however many workers share the eval process's event loop;
- the records are identical at 1 and 4 workers.

With ``mode: hang`` the build never returns: the run still ends within a bounded time, the
episode ``timeout`` naming the node, and the ``agentcanvas eval`` process exits.
"""

from __future__ import annotations

import asyncio
import json
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentcanvas.eval.config import EpisodeResult, EvalConfig, EvalRun
from agentcanvas.eval.foreground import run_foreground
from agentcanvas.fileio import read_json
from agentcanvas.graph.model import Graph
from agentcanvas.server.registry import WorkspaceComponentRegistry
from support.cli import run_cli
from support.workspace import cartpole_graph, home_workspace

pytestmark = pytest.mark.slow  # real runs: servers and a subprocess (tests/conftest.py)

PER_STEP_TIMEOUT_S = 0.5
SLOW_BUILD_S = 1.5  # three per-step timeouts: long enough to starve other workers' replies
EPISODES = 6  # one task
STEP_BUDGET = 5
RUN_DEADLINE_S = 90.0  # a broken runner fails the test instead of hanging it

LAZYGLUE = textwrap.dedent(
    '''
    """lazyglue: a CartPole policy with a per-episode table built on the episode's first call."""

    import threading
    import time
    from typing import Any

    from pydantic import BaseModel, ConfigDict, Field

    from agentcanvas.nodes import CallContext, NodeSet, PortSpec

    SLOW_BUILD_S = {slow_build_s}


    class State:
        def __init__(self) -> None:
            self.tables: dict[str, list[int]] = {{}}  # episode_key -> the episode's table


    def evict(state: State, episode_key: str) -> None:
        state.tables.pop(episode_key, None)


    NODESET = NodeSet(
        name="lazyglue",
        version="0.1.0",
        parallelism="local",
        description="A policy whose first call of an episode builds a table.",
        state_factory=State,
        evict=evict,
    )


    class ActConfig(BaseModel):
        model_config = ConfigDict(extra="forbid")
        mode: str = Field(default="slow", description="slow: sleep; hang: never return.")


    @NODESET.node(
        "act",
        inputs=[PortSpec(name="obs", type="array")],
        outputs=[PortSpec(name="action", type="int")],
        config=ActConfig,
    )
    def act(inputs: dict, config: dict, state: State, ctx: CallContext) -> dict:
        """Push toward the side the pole leans to."""
        cfg = ActConfig.model_validate(config)
        if ctx.episode_key not in state.tables:  # an ordinary lazy initialisation
            if ctx.episode_seed % 2 == 0:
                if cfg.mode == "hang":
                    threading.Event().wait()  # never returns
                time.sleep(SLOW_BUILD_S)
            state.tables[ctx.episode_key] = [0, 1]
        return {{"action": state.tables[ctx.episode_key][int(float(inputs["obs"][2]) > 0)]}}
    '''
).format(slow_build_s=SLOW_BUILD_S)


SLOW_GRAPH = cartpole_graph("lazy_slow", "lazyglue.act", {"mode": "slow"})
HANG_GRAPH = cartpole_graph("lazy_hang", "lazyglue.act", {"mode": "hang"})


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    yield from home_workspace(
        tmp_path_factory, "slow_local_ws", {"lazyglue": LAZYGLUE}, (SLOW_GRAPH, HANG_GRAPH)
    )


async def foreground_eval(workspace: Path, graph: Graph, workers: int) -> EvalRun:
    """One run through the foreground path, with its own registry (stopped at the end)."""
    registry = WorkspaceComponentRegistry(workspace=workspace)
    registry.scan_all()
    assert not registry.load_errors, registry.load_errors
    config = EvalConfig(
        graph_name=graph.name,
        episode_count=EPISODES,
        worker_count=workers,
        step_budget=STEP_BUDGET,
        per_step_timeout_s=PER_STEP_TIMEOUT_S,
    )
    run = await asyncio.wait_for(
        run_foreground(registry, registry.load_graph(graph.name), config), RUN_DEADLINE_S
    )
    return run.summary


def slow_ones(episodes: list[EpisodeResult]) -> set[int]:
    return {e.index for e in episodes if e.seed % 2 == 0}


def assert_blamed_on_the_slow_node(episode: EpisodeResult) -> None:
    assert episode.status == "timeout", episode
    assert episode.error == "a node-set call hit its wall-clock deadline: policy"
    assert list(episode.node_errors) == ["policy"]
    message = episode.node_errors["policy"]
    assert "in-process node set 'lazyglue' did not return 'act'" in message
    assert f"within {PER_STEP_TIMEOUT_S:g} s (per-step timeout)" in message


async def test_a_slow_user_node_times_out_its_own_episode_at_any_worker_count(
    workspace: Path,
) -> None:
    one = await foreground_eval(workspace, SLOW_GRAPH, workers=1)
    four = await foreground_eval(workspace, SLOW_GRAPH, workers=4)

    slow = slow_ones(one.episodes)
    assert 0 < len(slow) < EPISODES, "the run seed must give both kinds of episode"
    for summary in (one, four):
        assert summary.status == "completed"
        assert len(summary.episodes) == EPISODES
        for episode in summary.episodes:
            if episode.index in slow:
                assert_blamed_on_the_slow_node(episode)
            else:  # innocent: never blamed for another episode's slowness
                assert episode.status == "completed", episode
                assert episode.node_errors == {}
    assert [e.identity() for e in four.episodes] == [e.identity() for e in one.episodes]


def test_a_user_node_that_never_returns_ends_its_episode_and_the_eval_exits(
    workspace: Path,
) -> None:
    started = time.monotonic()
    proc = run_cli(
        "eval",
        HANG_GRAPH.name,
        "-n",
        "2",
        "-w",
        "2",
        "--step-budget",
        str(STEP_BUDGET),
        "--per-step-timeout",
        str(PER_STEP_TIMEOUT_S),
        "--json",
        workspace=workspace,
        timeout_s=RUN_DEADLINE_S,
    )
    elapsed = time.monotonic() - started
    assert proc.returncode == 3, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr[-4000:]}"
    summary: dict[str, Any] = json.loads(proc.stdout)
    run = EvalRun.model_validate(
        read_json(workspace / "outputs/eval_runs" / summary["run_id"] / "summary.json")
    )
    slow = slow_ones(run.episodes)
    assert slow, "the run seed must give a hanging episode"
    for episode in run.episodes:
        if episode.index in slow:
            assert_blamed_on_the_slow_node(episode)
        else:
            assert episode.status == "completed", episode
    assert elapsed < 45.0  # bounded: the deadline ended it, and the process did exit
