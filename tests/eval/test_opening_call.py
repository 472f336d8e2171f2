"""An episode's opening call travels with its panel request (a round trip fewer).

``topen`` is a replicated env whose step node counts, on the server, how often it ran in the
episode (``calls``) and what it was given (``given``): a call made twice — once with the
panel request and once more by the executor — would show in the counts. The graph is the
usual env loop: ``policy.action -> env.action`` on the next iteration, so the episode's first
firing is an observation with no action, known before the episode starts
(`graph.opening.opening_firing`).
"""

from __future__ import annotations

import asyncio
import textwrap
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from agentcanvas.eval import local_workers
from agentcanvas.eval.config import EvalConfig, EvalRun
from agentcanvas.eval.run_context import RunContext
from agentcanvas.eval.runner import BatchEvalRunner
from agentcanvas.eval.store import RunDir
from agentcanvas.fileio import read_json, read_jsonl
from agentcanvas.graph.model import Graph, parse_graph
from agentcanvas.graph.opening import opening_firing
from agentcanvas.server import rpc_client
from agentcanvas.server.registry import WorkspaceComponentRegistry
from support.registry import scanned, started_registry
from support.workspace import home_workspace

pytestmark = pytest.mark.asyncio(loop_scope="module")

TOPEN = textwrap.dedent(
    '''
    """topen: a replicated env that counts its step calls per episode, on the server."""

    import time

    from agentcanvas.nodes.base import NodeSet, Panel
    from agentcanvas.nodes.manifest import FieldSpec, LoadInfo, PanelSpec, PortSpec


    class State:
        def __init__(self):
            self.seed, self.steps, self.calls, self.given, self.task = 0, 0, 0, [], ""


    class TPanel(Panel):
        spec = PanelSpec(
            fields=[
                FieldSpec(name="task_id", kind="str", default="a"),
                FieldSpec(name="episode_index", kind="int", default=0),
                FieldSpec(name="seed", kind="int", default=0),
            ],
            actions=["play"],
        )

        def on_action(self, name):
            if name != "play":
                return super().on_action(name)
            s = self.state
            s.seed, s.steps, s.calls, s.given = int(self.values["seed"]), 0, 0, []
            s.task = str(self.values["task_id"])
            return dict(self.values)

        def on_load(self):
            budget = 0 if self.values["task_id"].startswith("zero") else 20
            return LoadInfo(episode_id=str(self.values["episode_index"]), step_budget=budget)


    NODESET = NodeSet(name="topen", parallelism="replicated", state_factory=State,
                      panel_class=TPanel)


    @NODESET.node("step", inputs=[PortSpec(name="action", required=False),
                                  PortSpec(name="hint", required=False)],
                  outputs=[PortSpec(name="obs", type="int"), PortSpec(name="calls", type="int"),
                           PortSpec(name="given", type="list"), PortSpec(name="done", type="bool"),
                           PortSpec(name="metrics", type="dict")],
                  done_port="done")
    def step(inputs, config, state, ctx):
        # Refused episodes (budget 0) whose opening call is slow: it must be over before the
        # next episode's panel resets the state, or it would count in that episode.
        if state.task == "zero_slow" and state.calls == 0:
            time.sleep(0.3)
        if state.task == "zero_hang" and state.calls == 0:
            time.sleep(1.5)
        state.calls += 1
        state.given.append([inputs.get("action"), inputs.get("hint"), ctx.step, ctx.node_id])
        if inputs.get("action") is not None:
            state.steps += 1
        done = state.steps >= 2 + state.seed % 3
        return {"obs": state.seed * 10 + state.steps, "calls": state.calls,
                "given": list(state.given), "done": done,
                "metrics": {"success": int(done), "calls": state.calls}}


    @NODESET.node("needs", inputs=[PortSpec(name="action", required=True)],
                  outputs=[PortSpec(name="obs", type="int")])
    def needs(inputs, config, state, ctx):
        return {"obs": 0}
    '''
)


def _graph(name: str, nodes: list[dict[str, Any]], edges: list[dict[str, Any]]) -> Graph:
    return parse_graph(
        {
            "version": 1,
            "name": name,
            "env": {"nodeset": "topen", "tasks": ["a", "b"]},
            "nodes": nodes,
            "edges": edges,
        }
    )


LOOP = _graph(
    "topen_loop",
    [
        {"id": "env", "type": "topen.step"},
        {"id": "policy", "type": "core.constant", "config": {"value": 1}},
        {"id": "out", "type": "core.graphOut"},
    ],
    [
        {"source": "policy.value", "target": "env.action", "next_iteration": True},
        {"source": "env.metrics", "target": "out.metrics"},
        {"source": "env.obs", "target": "out.obs"},
    ],
)


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    yield from home_workspace(tmp_path_factory, "opening_ws", {"topen": TOPEN}, [LOOP])


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def registry(workspace: Path) -> AsyncIterator[WorkspaceComponentRegistry]:
    async with started_registry(workspace, "topen_loop", worker_count=2) as reg:
        yield reg


class _Counted:
    """How many pairs `RpcClient.request_then` sent."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.pairs = 0
        original = rpc_client.RpcClient.request_then

        async def counted(client: rpc_client.RpcClient, *args: Any, **kwargs: Any) -> Any:
            self.pairs += 1
            return await original(client, *args, **kwargs)

        monkeypatch.setattr(rpc_client.RpcClient, "request_then", counted)


async def _run(
    registry: WorkspaceComponentRegistry, root: Path, workers: int
) -> tuple[EvalRun, RunDir]:
    run_dir = RunDir(root)
    config = EvalConfig(graph_name="topen_loop", episode_count=4, worker_count=workers, seed=5)
    runner = BatchEvalRunner(
        RunContext(
            registry, registry.load_graph("topen_loop"), config, run_dir, run_id="20260101_000001"
        )
    )
    return await asyncio.wait_for(runner.execute(), 60.0), run_dir


def _firings(run_dir: RunDir, index: int) -> list[dict[str, Any]]:
    """The episode's log without the wall-clock latencies, by step and node: the firings of
    one wave are logged as they finish (env and policy here), which timing decides."""
    entries = read_jsonl(run_dir.episode_log_path(index)).records
    plain = [{k: v for k, v in e.items() if k != "latency_ms"} for e in entries]
    return sorted(plain, key=lambda e: (e["step"], e["node"]))


def _records(run: EvalRun) -> list[dict[str, Any]]:
    return [e.model_dump(exclude={"duration_s"}) for e in run.episodes]


async def test_the_opening_call_rides_with_the_panel_and_runs_once(
    registry: WorkspaceComponentRegistry, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every episode sends one panel+call pair; the server ran each env firing of the log
    exactly once, in the log's order, and the first was the observation (no action)."""
    counted = _Counted(monkeypatch)
    run, run_dir = await _run(registry, tmp_path / "run", workers=2)
    assert run.status == "completed" and run.status_counts == {"completed": 8}
    assert counted.pairs == 8
    for record in run.episodes:
        env = [f for f in _firings(run_dir, record.index) if f["node"] == "env"]
        assert [f["outputs"]["calls"] for f in env] == list(range(1, len(env) + 1))
        given = env[-1]["outputs"]["given"]
        assert given == [[None if k == 0 else 1, None, k, "env"] for k in range(len(env))]
        assert record.metrics["calls"] == len(env)


async def test_records_and_logs_are_the_same_with_the_opening_call_and_without(
    registry: WorkspaceComponentRegistry, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with_opening, with_dir = await _run(registry, tmp_path / "with", workers=2)
    monkeypatch.setattr(local_workers, "opening_firing", lambda *args: None)
    counted = _Counted(monkeypatch)
    without, without_dir = await _run(registry, tmp_path / "without", workers=1)
    assert counted.pairs == 0
    assert _records(with_opening) == _records(without)
    for record in with_opening.episodes:
        assert _firings(with_dir, record.index) == _firings(without_dir, record.index)
    summary = read_json(with_dir.summary_path)
    assert summary["aggregate_metrics"] == read_json(without_dir.summary_path)["aggregate_metrics"]


@pytest.mark.parametrize("refused", ["zero", "zero_slow"])
async def test_an_episode_that_ends_before_its_first_firing_waits_for_its_opening_call(
    registry: WorkspaceComponentRegistry, tmp_path: Path, refused: str
) -> None:
    """Tasks ``zero*`` load with step budget 0: refused before the executor runs, so the
    opening's answer is never claimed. It is waited for (``zero_slow``: 0.3 s) before the
    worker's next episode starts — else it would still run beside that episode's panel and
    count in it — and the next episodes run their env call once each."""
    run_dir = RunDir(tmp_path / refused)
    config = EvalConfig(
        graph_name="topen_loop", tasks=[refused, "a"], episode_count=3, worker_count=1, seed=5
    )
    graph = registry.load_graph("topen_loop")
    run = await BatchEvalRunner(RunContext(registry, graph, config, run_dir, run_id="z")).execute()
    assert run.status_counts == {"completed": 3, "error": 3}
    assert [e.status for e in run.episodes] == ["error"] * 3 + ["completed"] * 3
    assert all("step budget 0 < 1" in (e.error or "") for e in run.episodes[:3])
    for record in run.episodes[3:]:
        env = [f for f in _firings(run_dir, record.index) if f["node"] == "env"]
        assert [f["outputs"]["calls"] for f in env] == list(range(1, len(env) + 1))
        assert env[0]["inputs"] == {} and record.metrics["calls"] == len(env)


async def test_an_opening_call_that_never_answers_makes_a_timeout_and_fresh_servers(
    registry: WorkspaceComponentRegistry, tmp_path: Path
) -> None:
    """``zero_hang``'s opening call outlasts the per-step deadline: the episode is a
    timeout naming it (wall clock decided), the worker's servers are replaced as after any
    timeout, and the next episodes are right."""
    run_dir = RunDir(tmp_path / "hang")
    config = EvalConfig(
        graph_name="topen_loop",
        tasks=["zero_hang", "a"],
        episode_count=1,
        worker_count=1,
        seed=5,
        per_step_timeout_s=0.5,
    )
    graph = registry.load_graph("topen_loop")
    run = await BatchEvalRunner(RunContext(registry, graph, config, run_dir, run_id="h")).execute()
    hung, after = run.episodes
    assert hung.status == "timeout"
    assert "the episode's opening call: no answer within 0.5 s" in (hung.error or "")
    assert not run.determinism.guaranteed  # a wall-clock timeout decided an episode
    assert after.status == "completed"
    env = [f for f in _firings(run_dir, after.index) if f["node"] == "env"]
    assert [f["outputs"]["calls"] for f in env] == list(range(1, len(env) + 1))


async def test_the_opening_firing_is_known_only_when_the_first_wave_has_one_call_to_the_env(
    workspace: Path,
) -> None:
    reg = scanned(workspace)
    assert reg.load_graph("babyai_oracle").env is not None
    node, inputs = opening_firing(reg.load_graph("babyai_oracle"), "env_minigrid", reg) or (
        None,
        None,
    )
    assert node is not None and node.id == "env" and inputs == {}
    found = opening_firing(LOOP, "topen", reg)
    assert found is not None and (found[0].id, found[1]) == ("env", {})
    env = {"id": "env", "type": "topen.step"}
    policy = {"id": "policy", "type": "core.constant", "config": {"value": 1}}
    carry = {"source": "policy.value", "target": "env.action", "next_iteration": True}
    initial = _graph("g1", [env, policy], [{**carry, "initial": 3}])
    found = opening_firing(initial, "topen", reg)
    assert found is not None and found[1] == {"action": 3}  # its first input is the initial
    same_iteration = _graph("g2", [env, policy], [{**carry, "next_iteration": False}])
    assert opening_firing(same_iteration, "topen", reg) is None  # it waits for the policy
    two = _graph("g3", [env, {"id": "env2", "type": "topen.step"}], [])
    assert opening_firing(two, "topen", reg) is None  # which goes first is the executor's
    needs = {"id": "env", "type": "topen.needs"}
    assert opening_firing(_graph("g4", [needs, policy], [carry]), "topen", reg) is None
