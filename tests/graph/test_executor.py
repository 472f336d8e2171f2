"""GraphExecutor and LoopRunner, driven through a real test node set in a real workspace.

The node set ``probe`` is written to ``<tmp>/workspace/graph_nodes/probe/__init__.py`` and
discovered by ``WorkspaceComponentRegistry.scan_all()``, exactly as a user's node set is.
"""

from __future__ import annotations

import asyncio
import textwrap
from pathlib import Path
from typing import Any

import pytest

from agentcanvas.errors import ConfigError
from agentcanvas.eval.episode import resolve_step_budget
from agentcanvas.graph.executor import (
    EpisodeContext,
    ExecutionPrinciples,
    ExecutionResult,
    GraphExecutor,
)
from agentcanvas.graph.loop_runner import LoopRunner
from agentcanvas.graph.model import DEFAULT_STEP_BUDGET, Graph, parse_graph
from agentcanvas.nodes.base import CallContext, LocalNodeSet
from agentcanvas.nodes.manifest import LoadInfo, NodeSetManifest
from agentcanvas.server.registry import WorkspaceComponentRegistry
from support.registry import scanned
from support.workspace import write_nodeset

RUN_DEADLINE_S = 20.0  # a broken executor fails the test instead of hanging it

PROBE_NODESET = textwrap.dedent(
    '''
    """probe: nodes that make the executor's rules observable."""

    import asyncio
    import threading
    from collections import defaultdict

    import numpy as np
    from pydantic import BaseModel

    from agentcanvas.nodes.base import NodeSet
    from agentcanvas.nodes.manifest import PortSpec


    class ProbeState:
        def __init__(self):
            self.events = defaultdict(asyncio.Event)
            self.barrier = threading.Barrier(2, timeout=5.0)
            self.calls = []


    class MeetConfig(BaseModel):
        me: str
        other: str


    NODESET = NodeSet(name="probe", parallelism="local", state_factory=ProbeState)
    MET = [PortSpec(name="met", type="bool")]
    ANY_IN = [PortSpec(name="x", required=False)]


    @NODESET.node("meet", outputs=MET, config=MeetConfig)
    async def meet(inputs, config, state, ctx):
        """Sets its own event, then waits for its partner's: deadlocks if run alone."""
        key = (ctx.episode_key, ctx.step)
        state.events[(*key, config["me"])].set()
        await asyncio.wait_for(state.events[(*key, config["other"])].wait(), 5.0)
        return {"met": True}


    @NODESET.node("meet_blocking", outputs=MET, blocking=True)
    def meet_blocking(inputs, config, state, ctx):
        """A blocking node: both must be inside the barrier at the same time."""
        state.barrier.wait()
        return {"met": True}


    @NODESET.node("record", inputs=ANY_IN, outputs=[PortSpec(name="x")])
    def record(inputs, config, state, ctx):
        state.calls.append(ctx)
        return {"x": inputs.get("x")}


    @NODESET.node("fail", inputs=ANY_IN, outputs=[PortSpec(name="y")])
    def fail(inputs, config, state, ctx):
        return {"error": "bad thing happened"}


    @NODESET.node("explode", inputs=ANY_IN, outputs=[PortSpec(name="y")])
    def explode(inputs, config, state, ctx):
        raise RuntimeError("kaboom")


    @NODESET.node("not_a_dict", outputs=[PortSpec(name="y")])
    def not_a_dict(inputs, config, state, ctx):
        return 42


    @NODESET.node("soft_fail", outputs=[PortSpec(name="error", type="str")])
    def soft_fail(inputs, config, state, ctx):
        """Declares an 'error' output port: its 'error' is a value, not a failure."""
        return {"error": "just a value"}


    @NODESET.node("even_steps", outputs=[PortSpec(name="y", type="int")])
    def even_steps(inputs, config, state, ctx):
        """Outputs y only on even steps."""
        return {"y": ctx.step} if ctx.step % 2 == 0 else {}


    @NODESET.node("needs", inputs=[PortSpec(name="x")], outputs=[PortSpec(name="y")])
    def needs(inputs, config, state, ctx):
        return {"y": inputs["x"]}


    @NODESET.node("numpy_out", outputs=[PortSpec(name="metrics", type="dict"),
                                        PortSpec(name="image", type="array")])
    def numpy_out(inputs, config, state, ctx):
        metrics = {"i64": np.int64(3), "arr1": np.array([2.5]), "nan": float("nan")}
        return {"metrics": metrics, "image": np.zeros((7, 7, 3), dtype=np.uint8)}
    '''
)


class ListLog:
    """A FiringLog that keeps the records in memory."""

    def __init__(self) -> None:
        self.entries: list[dict[str, Any]] = []

    def record(self, entry: dict[str, Any]) -> None:
        self.entries.append(entry)


class RoutedHandle:
    """A NodeSetHandle reached 'by URL': a real local instance that remembers its URL."""

    def __init__(self, url: str, local: LocalNodeSet) -> None:
        self.url = url
        self.local = local
        self.name = local.name
        self.manifest: NodeSetManifest = local.manifest

    async def call(
        self, node_name: str, config: dict[str, Any], inputs: dict[str, Any], ctx: CallContext
    ) -> dict[str, Any]:
        return await self.local.call(node_name, config, inputs, ctx)

    async def panel_change(self, field_name: str, value: Any) -> dict[str, Any]:
        return await self.local.panel_change(field_name, value)

    async def panel_action(self, action: str) -> dict[str, Any]:
        return await self.local.panel_action(action)

    async def panel_load(self) -> LoadInfo:
        return await self.local.panel_load()

    async def evict(self, episode_key: str) -> None:
        await self.local.evict(episode_key)

    async def close(self) -> None:
        await self.local.close()


@pytest.fixture
def registry(tmp_path: Path) -> WorkspaceComponentRegistry:
    write_nodeset(tmp_path / "workspace", "probe", PROBE_NODESET)
    reg = scanned(tmp_path / "workspace")
    assert reg.origin("probe") == "workspace"
    return reg


def _graph(
    nodes: dict[str, str | tuple[str, dict[str, Any]]],
    edges: list[tuple[str, str] | dict[str, Any]],
    **extra: Any,
) -> Graph:
    """nodes: id -> type or (type, config); edges: ("a.out", "b.in") or a full edge dict."""
    node_list = []
    for node_id, spec in nodes.items():
        node_type, config = (spec, {}) if isinstance(spec, str) else spec
        node_list.append({"id": node_id, "type": node_type, "config": config})
    edge_list = [e if isinstance(e, dict) else {"source": e[0], "target": e[1]} for e in edges]
    return parse_graph({"version": 1, "name": "t", "nodes": node_list, "edges": edge_list, **extra})


async def _run(executor: GraphExecutor) -> ExecutionResult:
    return await asyncio.wait_for(executor.run(), RUN_DEADLINE_S)


def _executor(reg: WorkspaceComponentRegistry, graph: Graph, **kwargs: Any) -> GraphExecutor:
    reg.validate(graph)  # every test graph is a valid graph
    return GraphExecutor(graph, reg, **kwargs)


COUNTING = {"n": "core.counter", "out": "core.graphOut"}
COUNTING_EDGES: list[tuple[str, str] | dict[str, Any]] = [("n.count", "out.count")]


# -- ready queue: independent nodes run concurrently -------------------------------------


async def test_independent_async_nodes_run_concurrently(
    registry: WorkspaceComponentRegistry,
) -> None:
    graph = _graph(
        {
            "a": ("probe.meet", {"me": "a", "other": "b"}),
            "b": ("probe.meet", {"me": "b", "other": "a"}),
            "joined": "core.select",
            "out": "core.graphOut",
        },
        [
            ("a.met", "joined.cond"),
            ("a.met", "joined.a"),
            ("b.met", "joined.b"),
            ("joined.out", "out.both_met"),
        ],
        step_budget=2,
    )
    log = ListLog()
    result = await _run(_executor(registry, graph, log=log))
    assert result.node_errors == {}
    assert (result.status, result.steps, result.metrics) == ("completed", 2, {"both_met": True})
    order = [e["node"] for e in log.entries if e["step"] == 0]
    # a node fires only after every same-iteration input is there
    assert order.index("joined") > max(order.index("a"), order.index("b"))
    assert order.index("out") > order.index("joined")


async def test_independent_blocking_nodes_run_concurrently_in_threads(
    registry: WorkspaceComponentRegistry,
) -> None:
    graph = _graph({"a": "probe.meet_blocking", "b": "probe.meet_blocking"}, [], step_budget=3)
    result = await _run(_executor(registry, graph))
    assert result.node_errors == {}
    assert (result.status, result.steps) == ("completed", 3)


async def test_inline_nodes_first_in_launch_order_fire_before_the_rest_run_concurrently(
    registry: WorkspaceComponentRegistry,
) -> None:
    """Built-in synchronous nodes (``a``, ``b``: they run to their end on the loop) at the
    head of an iteration's launch order fire one after the other, in id order, without a
    task; the nodes after them still run side by side (``y``, ``z`` meet at a barrier)."""
    graph = _graph(
        {
            "a": "core.counter",
            "b": "core.counter",
            "y": "probe.meet_blocking",
            "z": "probe.meet_blocking",
            "out": "core.graphOut",
        },
        [("a.count", "out.a"), ("b.count", "out.b"), ("y.met", "out.y"), ("z.met", "out.z")],
        step_budget=2,
    )
    log = ListLog()
    executor = _executor(registry, graph, log=log)
    fired_in: dict[str, set[asyncio.Task[Any] | None]] = {}
    fire = executor._fire

    async def noted(step: int, node: Any, inputs: dict[str, Any]) -> dict[str, Any]:
        fired_in.setdefault(node.id, set()).add(asyncio.current_task())
        return await fire(step, node, inputs)

    executor._fire = noted  # type: ignore[method-assign]
    episode = asyncio.create_task(executor.run())
    result = await asyncio.wait_for(episode, RUN_DEADLINE_S)
    assert result.node_errors == {}
    assert result.status == "completed"
    assert result.metrics == {"a": 2, "b": 2, "y": True, "z": True}
    for step in (0, 1):
        order = [e["node"] for e in log.entries if e["step"] == step]
        assert order[:2] == ["a", "b"] and set(order[2:4]) == {"y", "z"} and order[4] == "out"
    assert fired_in["a"] == fired_in["b"] == {episode}  # in the episode's task, no task each
    assert episode not in fired_in["y"] | fired_in["z"]  # a task each: they ran side by side


# -- loop bound --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("override", "graph_budget", "expected"),
    [(2, 5, 2), (None, 5, 5), (None, None, DEFAULT_STEP_BUDGET), (3, None, 3)],
)
async def test_loop_bound_resolves_override_then_graph_then_default(
    registry: WorkspaceComponentRegistry,
    override: int | None,
    graph_budget: int | None,
    expected: int,
) -> None:
    graph = _graph(COUNTING, COUNTING_EDGES, step_budget=graph_budget)
    executor = _executor(registry, graph, step_budget_override=override)
    assert executor.resolve_step_budget() == expected
    result = await _run(executor)
    assert (result.status, result.steps, result.done_signalled) == ("completed", expected, False)
    assert result.metrics == {"count": float(expected)}
    assert DEFAULT_STEP_BUDGET == 64


async def test_a_budget_below_one_is_refused(registry: WorkspaceComponentRegistry) -> None:
    executor = _executor(registry, _graph(COUNTING, COUNTING_EDGES), step_budget_override=0)
    with pytest.raises(ConfigError, match="step budget must be >= 1"):
        await _run(executor)


def test_episode_budget_resolves_override_then_env_then_graph_then_default() -> None:
    with_budget = _graph(COUNTING, COUNTING_EDGES, step_budget=9)
    without = _graph(COUNTING, COUNTING_EDGES)
    assert resolve_step_budget(4, 30, with_budget) == 4
    assert resolve_step_budget(None, 30, with_budget) == 30
    assert resolve_step_budget(None, None, with_budget) == 9
    assert resolve_step_budget(None, None, without) == DEFAULT_STEP_BUDGET


# -- node errors -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("node_type", "ledger_entry"),
    [
        ("probe.fail", "probe.fail: bad thing happened"),
        ("probe.explode", "probe.explode: RuntimeError: kaboom"),
        ("probe.not_a_dict", "probe.not_a_dict: probe.not_a_dict returned int, not a dict"),
    ],
)
async def test_node_errors_go_to_the_ledger_and_end_the_run_with_status_error(
    registry: WorkspaceComponentRegistry, node_type: str, ledger_entry: str
) -> None:
    graph = _graph(
        {"bad": node_type, "after": "probe.needs", "n": "core.counter", "out": "core.graphOut"},
        [("bad.y", "after.x"), ("n.count", "out.count")],
        step_budget=10,
    )
    log = ListLog()
    result = await _run(_executor(registry, graph, log=log))
    assert result.status == "error"
    assert result.node_errors == {"bad": ledger_entry}
    assert result.steps == 1  # the run stops after the iteration in which the error happened
    by_node = {e["node"]: e for e in log.entries}
    assert by_node["bad"]["status"] == "error"
    assert by_node["after"]["status"] == "skipped"


async def test_an_error_output_port_is_a_value_not_a_failure(
    registry: WorkspaceComponentRegistry,
) -> None:
    graph = _graph(
        {"soft": "probe.soft_fail", "out": "core.graphOut"},
        [("soft.error", "out.message")],
        step_budget=2,
    )
    result = await _run(_executor(registry, graph))
    assert (result.status, result.node_errors) == ("completed", {})
    assert result.metrics == {"message": "just a value"}


# -- graphOut snapshot and metrics harvest -----------------------------------------------


async def test_graph_out_is_snapshotted_after_the_terminal_iteration(
    registry: WorkspaceComponentRegistry,
) -> None:
    graph = parse_graph(
        {
            "version": 1,
            "name": "t",
            "step_budget": 4,
            "scopes": [{"id": "group"}],
            "nodes": [
                {"id": "n", "type": "core.counter"},
                {"id": "out", "type": "core.graphOut"},
                {"id": "hidden", "type": "core.graphOut", "scope": "group"},
            ],
            "edges": [
                {"source": "n.count", "target": "out.count"},
                {"source": "n.count", "target": "hidden.inner_count"},
            ],
        }
    )
    executor = _executor(registry, graph)
    result = await _run(executor)
    assert result.metrics == {"count": 4.0}  # the last iteration's value; scoped sink ignored
    assert executor.last_inputs["out"] == {"count": 4.0}
    assert executor.last_inputs["hidden"] == {"inner_count": 4.0}


async def test_metrics_dict_is_flattened_and_scalar_ports_are_kept(
    registry: WorkspaceComponentRegistry,
) -> None:
    nested = {
        "success": 1,
        "spl": 0.5,
        "detail": {"a": True, "deeper": {"b": "x"}},
        "ignored_list": [1, 2],
    }
    graph = _graph(
        {
            "m": ("core.constant", {"value": nested}),
            "score": ("core.constant", {"value": 7}),
            "label": ("core.constant", {"value": "hello"}),
            "vector": ("core.constant", {"value": [1, 2, 3]}),
            "out": "core.graphOut",
        },
        [
            ("m.value", "out.metrics"),
            ("score.value", "out.score"),
            ("label.value", "out.label"),
            ("vector.value", "out.vector"),
        ],
        step_budget=1,
    )
    result = await _run(_executor(registry, graph))
    assert result.metrics == {
        "success": 1,
        "spl": 0.5,
        "detail.a": True,
        "detail.deeper.b": "x",
        "score": 7,
        "label": "hello",
    }


async def test_numpy_values_in_a_metrics_dict_become_plain_numbers(
    registry: WorkspaceComponentRegistry,
) -> None:
    graph = _graph(
        {"np": "probe.numpy_out", "out": "core.graphOut"},
        [("np.metrics", "out.metrics"), ("np.image", "out.image")],
        step_budget=1,
    )
    result = await _run(_executor(registry, graph))
    assert result.metrics == {"i64": 3, "arr1": 2.5, "nan": None}
    assert type(result.metrics["i64"]) is int and type(result.metrics["arr1"]) is float


# -- next_iteration edges, initial, done_port, skipping ----------------------------------


def _accumulator(initial: Any) -> Graph:
    loop: dict[str, Any] = {"source": "acc.out", "target": "acc.b", "next_iteration": True}
    if initial is not None:
        loop["initial"] = initial
    return _graph(
        {
            "one": ("core.constant", {"value": 1}),
            "acc": ("core.arith", {"op": "add"}),
            "out": "core.graphOut",
        },
        [("one.value", "acc.a"), loop, ("acc.out", "out.total")],
        step_budget=3,
    )


async def test_next_iteration_edge_carries_values_from_its_initial(
    registry: WorkspaceComponentRegistry,
) -> None:
    log = ListLog()
    result = await _run(_executor(registry, _accumulator(initial=10), log=log))
    assert (result.status, result.metrics) == ("completed", {"total": 13})
    acc_inputs = [e["inputs"] for e in log.entries if e["node"] == "acc"]
    assert acc_inputs == [{"a": 1, "b": 10}, {"a": 1, "b": 11}, {"a": 1, "b": 12}]


async def test_without_initial_a_required_loop_input_is_missing_and_the_node_skipped(
    registry: WorkspaceComponentRegistry,
) -> None:
    log = ListLog()
    result = await _run(_executor(registry, _accumulator(initial=None), log=log))
    assert (result.status, result.node_errors, result.metrics) == ("completed", {}, {})
    acc = [e for e in log.entries if e["node"] == "acc"]
    assert [e["status"] for e in acc] == ["skipped"] * 3
    assert acc[0]["error"] == "missing input ['b']"


async def test_nodes_missing_a_required_input_are_skipped_with_their_dependants(
    registry: WorkspaceComponentRegistry,
) -> None:
    graph = _graph(
        {"src": "probe.even_steps", "first": "probe.needs", "second": "probe.needs"},
        [("src.y", "first.x"), ("first.y", "second.x")],
        step_budget=4,
    )
    log = ListLog()
    result = await _run(_executor(registry, graph, log=log))
    assert (result.status, result.steps, result.node_errors) == ("completed", 4, {})
    statuses = {(e["step"], e["node"]): e["status"] for e in log.entries}
    for step in range(4):
        expected = "ok" if step % 2 == 0 else "skipped"
        assert statuses[(step, "first")] == statuses[(step, "second")] == expected
    assert result.outputs["second"] == {"y": 2}  # last fired at step 2


async def test_done_port_ends_the_loop_after_that_iteration(
    registry: WorkspaceComponentRegistry,
) -> None:
    graph = _graph(
        {
            **COUNTING,
            "three": ("core.constant", {"value": 3}),
            "reached": ("core.compare", {"op": "ge"}),
            "stop": "core.stopWhen",
        },
        [
            *COUNTING_EDGES,
            ("n.count", "reached.a"),
            ("three.value", "reached.b"),
            ("reached.out", "stop.cond"),
        ],
        step_budget=50,
    )
    result = await _run(_executor(registry, graph))
    assert (result.status, result.steps, result.done_signalled) == ("completed", 3, True)
    assert result.metrics == {"count": 3.0}


# -- overrides, context, events, firing log ----------------------------------------------


async def test_env_panel_overrides_route_every_call_to_the_override_handle(
    registry: WorkspaceComponentRegistry,
) -> None:
    override = LocalNodeSet(registry.nodeset("probe"))
    graph = _graph({"a": "probe.record", "b": "probe.record"}, [("a.x", "b.x")], step_budget=2)
    result = await _run(_executor(registry, graph, env_panel_overrides={"probe": override}))
    assert result.status == "completed"
    assert [(c.node_id, c.step) for c in override.state.calls] == [
        ("a", 0),
        ("b", 0),
        ("a", 1),
        ("b", 1),
    ]
    assert registry.local_instance("probe").state.calls == []


class RoutingResolver:
    """A NodeResolver that reaches node sets 'by URL' when the executor passes an override."""

    def __init__(self, registry: WorkspaceComponentRegistry) -> None:
        self.registry = registry
        self.routed: list[RoutedHandle] = []

    def handle_for(self, nodeset: str, url_override: str | None) -> Any:
        if url_override is None:
            return self.registry.local_instance(nodeset)
        self.routed.append(RoutedHandle(url_override, LocalNodeSet(self.registry.nodeset(nodeset))))
        return self.routed[-1]

    def node_spec(self, node_type: str) -> Any:
        return self.registry.node_spec(node_type)


async def test_server_url_overrides_reach_the_resolver_for_every_node_set_call(
    registry: WorkspaceComponentRegistry,
) -> None:
    resolver = RoutingResolver(registry)
    url = "http://127.0.0.1:9/worker3"
    graph = _graph({"a": "probe.record", **COUNTING}, COUNTING_EDGES, step_budget=2)
    registry.validate(graph)
    executor = GraphExecutor(graph, resolver, server_url_overrides={"probe": url})
    result = await _run(executor)
    assert result.status == "completed"
    assert executor.get_server_url("probe") == url and executor.get_server_url("core") is None
    assert [h.url for h in resolver.routed] == [url]
    assert [c.step for c in resolver.routed[0].local.state.calls] == [0, 1]
    assert registry.local_instance("probe").state.calls == []


async def test_every_call_gets_the_episode_context(registry: WorkspaceComponentRegistry) -> None:
    episode = EpisodeContext(key="ep-7", seed=1234, task="t1", asset_dir="/tmp/assets")
    override = LocalNodeSet(registry.nodeset("probe"))
    graph = _graph(
        {"r": "probe.record", "facts": "core.graphIn", "out": "core.graphOut"},
        [("facts.seed", "out.seed"), ("facts.step", "out.step"), ("facts.task", "out.task")],
        step_budget=3,
    )
    executor = _executor(registry, graph, episode=episode, env_panel_overrides={"probe": override})
    result = await _run(executor)
    assert [c.step for c in override.state.calls] == [0, 1, 2]
    for ctx in override.state.calls:
        assert (ctx.node_id, ctx.episode_key, ctx.episode_seed, ctx.task, ctx.asset_dir) == (
            "r",
            "ep-7",
            1234,
            "t1",
            "/tmp/assets",
        )
    assert result.metrics == {"seed": 1234, "step": 2, "task": "t1"}


@pytest.mark.parametrize("suppress", [False, True])
async def test_suppress_nav_events(registry: WorkspaceComponentRegistry, suppress: bool) -> None:
    events: list[dict[str, Any]] = []
    executor = _executor(
        registry,
        _graph(COUNTING, COUNTING_EDGES, step_budget=2),
        principles=ExecutionPrinciples(suppress_nav_events=suppress),
        events=events.append,
    )
    result = await _run(executor)
    assert result.status == "completed"
    if suppress:
        assert events == []
        return
    kinds = [e["type"] for e in events]
    assert kinds[0] == "nav_status" and events[0]["status"] == "running"
    assert events[-1] == {"type": "nav_status", "status": "completed", "steps": 2}
    assert [e["step"] for e in events if e["type"] == "nav_step"] == [0, 1]
    firings = [e for e in events if "node" in e]  # one per node firing
    assert [(e["step"], e["node"], e["status"]) for e in firings] == [
        (0, "n", "ok"),
        (0, "out", "ok"),
        (1, "n", "ok"),
        (1, "out", "ok"),
    ]


async def test_firing_log_records_every_firing(registry: WorkspaceComponentRegistry) -> None:
    log = ListLog()
    graph = _graph(
        {"np": "probe.numpy_out", "bad": "probe.needs", "out": "core.graphOut"},
        [("np.image", "out.image")],
        step_budget=2,
    )
    # 'bad' has no edge into its required input: validation refuses such a graph (the
    # node would never fire); run unvalidated here to see the executor log each skip.
    await _run(GraphExecutor(graph, registry, log=log))
    assert [(e["step"], e["node"]) for e in log.entries] == [
        (0, "bad"),
        (0, "np"),
        (0, "out"),
        (1, "bad"),
        (1, "np"),
        (1, "out"),
    ]
    for entry in log.entries:
        assert {"step", "node", "type", "status", "latency_ms", "inputs", "outputs"} <= set(entry)
        assert entry["latency_ms"] >= 0.0
    first_np = log.entries[1]
    assert (first_np["type"], first_np["status"]) == ("probe.numpy_out", "ok")
    # Arrays are summarised: dtype, shape and their first values, with how many were cut.
    image = {"dtype": "uint8", "shape": [7, 7, 3], "values": [0] * 8, "cut": 7 * 7 * 3 - 8}
    assert first_np["outputs"]["image"] == image
    assert first_np["outputs"]["metrics"] == {
        "i64": 3,
        "arr1": {"dtype": "float64", "shape": [1], "values": [2.5]},
        "nan": "nan",
    }
    assert log.entries[2]["inputs"] == {"image": image}
    assert log.entries[0]["status"] == "skipped" and "error" in log.entries[0]
    assert "error" not in first_np


# -- LoopRunner: a fresh executor per episode --------------------------------------------


async def test_loop_runner_builds_a_fresh_executor_per_run(
    registry: WorkspaceComponentRegistry,
) -> None:
    runner = LoopRunner(registry)
    failing = _graph({"bad": "probe.fail", **COUNTING}, COUNTING_EDGES, step_budget=3)
    healthy = _accumulator(initial=0)
    first = await asyncio.wait_for(runner.run(failing, EpisodeContext(key="e1")), RUN_DEADLINE_S)
    first_executor = runner.executor
    second = await asyncio.wait_for(runner.run(healthy, EpisodeContext(key="e2")), RUN_DEADLINE_S)
    third = await asyncio.wait_for(runner.run(healthy, EpisodeContext(key="e3")), RUN_DEADLINE_S)
    assert (first.status, first.steps) == ("error", 1)
    assert runner.executor is not first_executor
    for result in (second, third):
        assert (result.status, result.steps, result.node_errors) == ("completed", 3, {})
        assert result.metrics == {"total": 3}
        assert result.done_signalled is False


async def test_loop_runner_carries_its_overrides_into_each_executor(
    registry: WorkspaceComponentRegistry,
) -> None:
    override = LocalNodeSet(registry.nodeset("probe"))
    runner = LoopRunner(
        registry,
        env_panel_overrides={"probe": override},
        principles=ExecutionPrinciples(suppress_nav_events=True),
    )
    graph = _graph({"r": "probe.record"}, [], step_budget=2)
    for key in ("e1", "e2"):
        result = await asyncio.wait_for(runner.run(graph, EpisodeContext(key=key)), RUN_DEADLINE_S)
        assert result.status == "completed"
    assert runner.executor is not None and runner.executor.principles.suppress_nav_events
    assert [c.episode_key for c in override.state.calls] == ["e1", "e1", "e2", "e2"]
    assert registry.local_instance("probe").state.calls == []


async def test_loop_runner_step_budget_override_wins(registry: WorkspaceComponentRegistry) -> None:
    runner = LoopRunner(registry)
    graph = _graph(COUNTING, COUNTING_EDGES, step_budget=10)
    result = await asyncio.wait_for(
        runner.run(graph, EpisodeContext(key="k"), step_budget_override=2), RUN_DEADLINE_S
    )
    assert result.steps == 2
