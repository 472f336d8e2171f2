"""Where an in-process call runs: a built-in's plain function on the event loop, anyone
else's on a thread of its own under the per-step deadline.

The event loop of an eval process is shared by every episode it runs; a user's node that
held it would stall them all (their replies unread until their deadlines fired), so a node
set from a workspace never runs there. One episode's calls still run one at a time, in
order; different episodes' calls overlap.
"""

from __future__ import annotations

import asyncio
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from agentcanvas.graph.executor import EpisodeContext, ExecutionPrinciples, GraphExecutor
from agentcanvas.graph.model import parse_graph
from agentcanvas.nodes.base import CallContext, LocalNodeSet, NodeSet
from agentcanvas.nodes.boundary import needs_local_deadline
from agentcanvas.nodes.manifest import PortSpec
from agentcanvas.server.registry import WorkspaceComponentRegistry
from support.registry import scanned
from support.workspace import write_nodeset

DEADLINE_S = 10.0  # a broken call path fails the test instead of hanging it

WHERE = textwrap.dedent(
    '''
    """where: a local node that records the thread it ran on, and one that takes its time."""

    import threading
    import time

    from agentcanvas.nodes import NodeSet, PortSpec


    class State:
        def __init__(self):
            self.threads = []


    NODESET = NodeSet(name="where", parallelism="local", state_factory=State)


    @NODESET.node("here", outputs=[PortSpec(name="y", type="int")])
    def here(inputs, config, state, ctx):
        state.threads.append(threading.current_thread())
        return {"y": 1}


    @NODESET.node("nap", outputs=[PortSpec(name="y", type="int")])
    def nap(inputs, config, state, ctx):
        time.sleep(float(config.get("seconds", 0.0)))
        return {"y": 1}
    '''
)

# A user's node set named like a built-in replaces it: it is still user code.
PLANNER_LOOKALIKE = WHERE.replace('name="where"', 'name="planner"')


@pytest.fixture
def registry(tmp_path: Path) -> WorkspaceComponentRegistry:
    workspace = tmp_path / "workspace"
    write_nodeset(workspace, "where", WHERE)
    write_nodeset(workspace, "planner", PLANNER_LOOKALIKE)
    return scanned(workspace)


def run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, DEADLINE_S))


async def call_on_loop(handle: LocalNodeSet, node: str) -> threading.Thread:
    """Call ``node``; the loop's thread."""
    await handle.call(node, {}, {}, CallContext(node, 0, episode_key="e0"))
    return threading.current_thread()


def test_only_builtins_are_trusted_to_run_on_the_loop(
    registry: WorkspaceComponentRegistry,
) -> None:
    assert registry.catalogue.trusted_inline("core")
    assert registry.local_instance("core").inline
    for user in ("where", "planner"):  # "planner" replaces the built-in planner
        assert registry.origin(user) == "workspace"
        assert not registry.catalogue.trusted_inline(user)
        assert not registry.local_instance(user).inline
    assert not registry.catalogue.trusted_inline("no_such_nodeset")


def test_a_builtin_sync_node_runs_on_the_loop_and_a_workspace_one_on_a_thread(
    registry: WorkspaceComponentRegistry, monkeypatch: pytest.MonkeyPatch
) -> None:
    builtin_threads: list[threading.Thread] = []

    def constant(inputs: Any, config: Any, state: Any, ctx: Any) -> dict[str, Any]:
        builtin_threads.append(threading.current_thread())
        return {"value": 1}

    monkeypatch.setattr(registry.nodeset("core").definition("constant"), "fn", constant)
    core, user = registry.local_instance("core"), registry.local_instance("where")

    loop_thread = run(call_on_loop(core, "constant"))
    assert builtin_threads == [loop_thread]  # inline: no thread hop for our own glue
    assert not needs_local_deadline(core, "constant")

    loop_thread = run(call_on_loop(user, "here"))
    (ran_on,) = user.state.threads
    assert ran_on is not loop_thread and ran_on.daemon  # never the shared loop
    assert needs_local_deadline(user, "here")


def test_an_instance_built_without_saying_runs_sync_nodes_on_threads() -> None:
    # The safe default: whoever does not know where a node set comes from treats it as
    # user code.
    nodeset = NodeSet(name="anon", parallelism="local")
    seen: list[threading.Thread] = []

    @nodeset.node("f", outputs=[PortSpec(name="y")])
    def f(inputs: Any, config: Any, state: Any, ctx: Any) -> dict[str, Any]:
        seen.append(threading.current_thread())
        return {"y": 1}

    loop_thread = run(call_on_loop(LocalNodeSet(nodeset), "f"))
    inline_thread = run(call_on_loop(LocalNodeSet(nodeset, inline=True), "f"))
    assert seen[0] is not loop_thread
    assert seen[1] is inline_thread


def make_ordered_nodeset() -> tuple[NodeSet, list[tuple[str, str, str]]]:
    """A node set whose ``work`` node logs (episode, name, enter/exit) around a short sleep."""
    nodeset = NodeSet(name="ordered", parallelism="local")
    log: list[tuple[str, str, str]] = []

    @nodeset.node("work", outputs=[PortSpec(name="y")])
    def work(inputs: Any, config: Any, state: Any, ctx: CallContext) -> dict[str, Any]:
        log.append((ctx.episode_key, ctx.node_id, "enter"))
        time.sleep(float(config.get("seconds", 0.02)))
        log.append((ctx.episode_key, ctx.node_id, "exit"))
        return {"y": 1}

    return nodeset, log


def test_one_episodes_calls_run_one_at_a_time_in_the_order_they_were_made() -> None:
    nodeset, log = make_ordered_nodeset()
    instance = LocalNodeSet(nodeset)

    async def go() -> None:
        calls = [
            instance.call("work", {}, {}, CallContext(name, 0, episode_key="e0"))
            for name in ("a", "b", "c")
        ]
        await asyncio.gather(*calls)

    run(go())
    assert log == [("e0", n, step) for n in ("a", "b", "c") for step in ("enter", "exit")]
    assert instance._turns == {}  # nothing kept once the episode's calls are done


def test_a_slow_call_of_one_episode_never_delays_another_episodes_call() -> None:
    nodeset, _ = make_ordered_nodeset()
    instance = LocalNodeSet(nodeset)

    async def go() -> float:
        slow = asyncio.ensure_future(
            instance.call("work", {"seconds": 1.0}, {}, CallContext("a", 0, episode_key="slow"))
        )
        await asyncio.sleep(0.05)  # the slow call is running
        started = time.monotonic()
        await instance.call("work", {"seconds": 0.0}, {}, CallContext("b", 0, episode_key="ok"))
        elapsed = time.monotonic() - started
        assert not slow.done()
        await slow
        return elapsed

    assert run(go()) < 0.5


def test_a_slow_workspace_node_is_abandoned_at_the_per_step_deadline(
    registry: WorkspaceComponentRegistry,
) -> None:
    graph = parse_graph(
        {
            "version": 1,
            "name": "naps",
            "nodes": [
                {"id": "slow", "type": "where.nap", "config": {"seconds": 2.0}},
                {"id": "out", "type": "core.graphOut"},
            ],
            "edges": [{"source": "slow.y", "target": "out.y"}],
        }
    )
    registry.validate(graph)
    executor = GraphExecutor(
        graph,
        registry,
        episode=EpisodeContext(key="e0"),
        principles=ExecutionPrinciples(local_call_timeout_s=0.2),
        step_budget_override=1,
    )
    started = time.monotonic()
    result = run(executor.run())
    assert time.monotonic() - started < 1.5  # the deadline ended it, not the nap
    assert result.timed_out == ["slow"]
    assert result.node_errors["slow"].endswith(
        "in-process node set 'where' did not return 'nap' within 0.2 s (per-step timeout); "
        "the call was abandoned"
    )


async def test_a_config_changed_in_place_is_validated_again() -> None:
    """Repeated calls with the same config dict skip its validation; a change made to that
    dict in place (nested too) is still seen."""
    from pydantic import BaseModel

    class Config(BaseModel):
        gain: float = 1.0
        tags: list[str] = []

    nodeset = NodeSet(name="cfg", parallelism="local")

    @nodeset.node("echo", outputs=[PortSpec(name="y", type="float")], config=Config)
    def echo(inputs: dict[str, Any], config: dict[str, Any], state: Any, ctx: Any) -> Any:
        return {"y": config["gain"] * (1 + len(config["tags"]))}

    local = LocalNodeSet(nodeset, inline=True)
    ctx = CallContext(node_id="n", step=0)
    config: dict[str, Any] = {"gain": 2.0, "tags": []}
    assert (await local.call("echo", config, {}, ctx))["y"] == 2.0
    assert (await local.call("echo", config, {}, ctx))["y"] == 2.0
    config["gain"] = 3.0
    assert (await local.call("echo", config, {}, ctx))["y"] == 3.0
    config["tags"].append("a")
    assert (await local.call("echo", config, {}, ctx))["y"] == 6.0
    assert (await local.call("echo", {"gain": 1.0}, {}, ctx))["y"] == 1.0
