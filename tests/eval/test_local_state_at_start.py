"""A local node set's state is built as the run starts, not by its first episode.

A workspace node set ``slowstate`` (local, written with only what docs/nodesets.md
documents) drives the built-in replicated ``env_gym`` (CartPole). Its ``state_factory``
stands for a policy's slow imports: it sleeps, then notes when it ran in a file beside the
node set. The run builds it before its clock starts (``timings.started_at``), so no
episode's time and no per-step deadline pays for it. A ``state_factory`` that raises fails
the run before any episode runs, with a NodeSetError naming the node set and its error.
"""

from __future__ import annotations

import asyncio
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentcanvas.errors import NodeSetError
from agentcanvas.eval.config import EvalConfig, EvalRun
from agentcanvas.eval.foreground import run_foreground
from agentcanvas.eval.run_setup import new_run_dir
from agentcanvas.eval.store import RunDir
from agentcanvas.fileio import read_json
from agentcanvas.graph.model import Graph
from agentcanvas.paths import runs_dir
from agentcanvas.server.registry import WorkspaceComponentRegistry
from support.workspace import cartpole_graph, home_workspace

pytestmark = pytest.mark.slow  # real runs: env servers

BUILD_S = 0.6  # longer than the per-step timeout below
PER_STEP_TIMEOUT_S = 0.4
EPISODES = 3
RUN_DEADLINE_S = 90.0

SLOWSTATE = textwrap.dedent(
    '''
    """slowstate: a CartPole policy whose state takes a while to build."""

    import time
    from pathlib import Path
    from typing import Any

    from agentcanvas.nodes import CallContext, NodeSet, PortSpec

    BUILT = Path(__file__).with_name("built_at")


    class State:
        def __init__(self) -> None:
            if BUILT.with_name("fail").exists():
                raise RuntimeError("the weights file is missing")
            time.sleep({build_s})  # a policy's imports, say
            BUILT.write_text(repr(time.time()))


    NODESET = NodeSet(
        name="slowstate",
        version="0.1.0",
        parallelism="local",
        description="A policy whose state is slow to build.",
        state_factory=State,
    )


    @NODESET.node(
        "act",
        inputs=[PortSpec(name="obs", type="array")],
        outputs=[PortSpec(name="action", type="int")],
    )
    def act(inputs: dict, config: dict, state: State, ctx: CallContext) -> dict:
        """Push toward the side the pole leans to."""
        return {{"action": int(float(inputs["obs"][2]) > 0)}}
    '''
).format(build_s=BUILD_S)

GRAPH = cartpole_graph("slow_state", "slowstate.act")


@pytest.fixture
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    yield from home_workspace(tmp_path_factory, "slow_state_ws", {"slowstate": SLOWSTATE}, [GRAPH])


async def run(workspace: Path, graph: Graph, run_dir: RunDir | None = None) -> EvalRun:
    registry = WorkspaceComponentRegistry(workspace=workspace)
    registry.scan_all()
    assert not registry.load_errors, registry.load_errors
    config = EvalConfig(
        graph_name=graph.name,
        episode_count=EPISODES,
        worker_count=2,
        step_budget=5,
        per_step_timeout_s=PER_STEP_TIMEOUT_S,
    )
    outcome = await asyncio.wait_for(
        run_foreground(registry, registry.load_graph(graph.name), config, run_dir=run_dir),
        RUN_DEADLINE_S,
    )
    return outcome.summary


async def test_the_state_is_built_before_the_runs_clock_starts(workspace: Path) -> None:
    summary = await run(workspace, GRAPH)

    assert summary.status_counts == {"completed": EPISODES}, summary.episodes
    built_at = float((workspace / "graph_nodes" / "slowstate" / "built_at").read_text())
    started_at = summary.timings["started_at"]
    assert started_at is not None
    assert built_at < started_at


async def test_a_state_that_cannot_be_built_fails_the_run_naming_its_node_set(
    workspace: Path,
) -> None:
    (workspace / "graph_nodes" / "slowstate" / "fail").write_text("")
    run_dir = new_run_dir(runs_dir(workspace))

    with pytest.raises(NodeSetError) as raised:
        await run(workspace, GRAPH, run_dir)

    message = str(raised.value)
    assert "local node set 'slowstate'" in message
    assert "the weights file is missing" in message
    summary = EvalRun.model_validate(read_json(run_dir.summary_path))
    assert summary.status == "failed"
    assert summary.error is not None and "slowstate" in summary.error
    assert summary.episodes == []
