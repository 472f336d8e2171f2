"""The six ways an episode ends, each made to really happen, each a populated EpisodeResult
that says why it ended (``end_reason``), which node is to blame, and where it was raised.

A replicated test env ``tenv`` (its own auto_host server, found through ``AGENTCANVAS_HOME``)
and a local glue node set ``tglue`` live in a real workspace under ``tmp_path``. An episode of
``tenv`` is a pure function of the panel seed: it lasts ``3 + seed % 3`` actions. The policy
node ``tglue.act`` can be told to sleep, raise or return ``{"error": ...}`` at a given step.
One server is started for the whole module and shared by every run.
"""

from __future__ import annotations

import asyncio
import textwrap
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from agentcanvas.eval.config import EvalConfig, EvalRun
from agentcanvas.eval.events import Broadcast, EvalProgress, LiveEvent
from agentcanvas.eval.run_context import RunContext
from agentcanvas.eval.runner import BatchEvalRunner
from agentcanvas.eval.seeding import episode_seed
from agentcanvas.eval.store import RunDir
from agentcanvas.fileio import read_json, read_jsonl
from agentcanvas.graph.model import Graph, parse_graph
from agentcanvas.server.registry import WorkspaceComponentRegistry
from support.counting_env import TENV
from support.eval_runs import wait_for_firings
from support.registry import started_registry
from support.workspace import home_workspace

pytestmark = pytest.mark.asyncio(loop_scope="module")

RUN_DEADLINE_S = 60.0  # a broken runner fails the test instead of hanging it
POLL_DEADLINE_S = 20.0

TGLUE = textwrap.dedent(
    '''
    """tglue: a policy that can be told to sleep, raise or report an error at a step."""

    import asyncio

    from pydantic import BaseModel

    from agentcanvas.nodes.base import NodeSet
    from agentcanvas.nodes.manifest import PortSpec


    class ActConfig(BaseModel):
        nap_at: int | None = None
        nap_s: float = 60.0
        raise_at: int | None = None
        error_at: int | None = None


    NODESET = NodeSet(name="tglue", parallelism="local")


    @NODESET.node("act", inputs=[PortSpec(name="obs")],
                  outputs=[PortSpec(name="action", type="int")], config=ActConfig)
    async def act(inputs, config, state, ctx):
        cfg = ActConfig.model_validate(config)
        if cfg.nap_at is not None and ctx.step >= cfg.nap_at:
            await asyncio.sleep(cfg.nap_s)
        if cfg.raise_at == ctx.step:
            raise RuntimeError(f"act failed at step {ctx.step}")
        if cfg.error_at == ctx.step:
            return {"error": f"act refused step {ctx.step}"}
        return {"action": 1}
    '''
)


def make_graph(
    name: str,
    *,
    tasks: tuple[str, ...] = ("ok",),
    act: dict[str, Any] | None = None,
    graph_out: bool = True,
    fields: dict[str, Any] | None = None,
    success: int | None = None,
) -> Graph:
    """``success``: a constant the graph scores as its success, whatever the env says."""
    nodes: list[dict[str, Any]] = [
        {"id": "env", "type": "tenv.step"},
        {"id": "policy", "type": "tglue.act", "config": act or {}},
    ]
    edges: list[dict[str, Any]] = [
        {"source": "env.obs", "target": "policy.obs"},
        {"source": "policy.action", "target": "env.action", "next_iteration": True},
    ]
    if graph_out:
        nodes.append({"id": "out", "type": "core.graphOut"})
        edges.append({"source": "env.metrics", "target": "out.metrics"})
    if success is not None:  # a port after "metrics": its value wins the harvest
        nodes.append({"id": "zero", "type": "core.constant", "config": {"value": success}})
        edges.append({"source": "zero.value", "target": "out.success"})
    env = {"nodeset": "tenv", "fields": fields or {}, "tasks": list(tasks)}
    return parse_graph({"version": 1, "name": name, "env": env, "nodes": nodes, "edges": edges})


def episode_length(seed: int) -> int:
    return 3 + seed % 3


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    # AGENTCANVAS_HOME: the auto_host children find tenv here
    yield from home_workspace(tmp_path_factory, "termination_ws", {"tenv": TENV, "tglue": TGLUE})


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def registry(workspace: Path) -> AsyncIterator[WorkspaceComponentRegistry]:
    async with started_registry(workspace, make_graph("warmup"), worker_count=1) as reg:
        yield reg


class Run:
    """One BatchEvalRunner run in its own folder under tmp_path."""

    def __init__(
        self,
        registry: WorkspaceComponentRegistry,
        graph: Graph,
        root: Path,
        broadcast: Broadcast | None = None,
        **config: Any,
    ) -> None:
        registry.validate(graph)
        self.config = EvalConfig(graph_name=graph.name, **config)
        self.run_dir = RunDir(root / "run")
        self.runner = BatchEvalRunner(
            RunContext(
                registry, graph, self.config, self.run_dir, "20260101_000000", broadcast=broadcast
            )
        )

    async def execute(self) -> EvalRun:
        return await asyncio.wait_for(self.runner.execute(), RUN_DEADLINE_S)


def assert_identity(summary: EvalRun, tasks: list[str], n: int, seed: int = 0) -> None:
    """Every record, whatever its ending, says which episode it was."""
    expected = [(t, i) for t in tasks for i in range(n)]
    assert [(e.task, e.episode_index) for e in summary.episodes] == expected
    for position, ep in enumerate(summary.episodes):
        assert ep.index == position
        assert ep.seed == episode_seed(seed, ep.task, ep.episode_index)
        assert ep.attempts == 1


async def test_completed_episodes_carry_metrics_and_load_info(
    registry: WorkspaceComponentRegistry, tmp_path: Path
) -> None:
    run = Run(registry, make_graph("ok"), tmp_path, episode_count=3)
    summary = await run.execute()

    assert summary.status == "completed"
    assert summary.status_counts == {"completed": 3}
    assert_identity(summary, ["ok"], 3)
    for ep in summary.episodes:
        length = episode_length(ep.seed)
        assert ep.status == "completed" and ep.error is None and ep.node_errors == {}
        assert ep.steps == length + 1  # the first iteration observes, then `length` actions
        assert ep.metrics == {"score": (ep.seed % 1000) / 1000.0, "steps": length, "success": 1}
        assert ep.step_budget == length + 5  # the env's budget, reported by on_load
        assert ep.episode_id == f"ok/{ep.episode_index}"
        assert ep.instruction == f"take {length} steps"
        assert ep.scene_id == f"scene{ep.seed % 5}"
        assert ep.end_reason == "success" and ep.failed_node is None and ep.traceback is None
    assert summary.determinism.guaranteed
    assert summary.aggregate_metrics["success"].n == 3


async def test_timeout_keeps_partial_steps_and_withdraws_the_guarantee(
    registry: WorkspaceComponentRegistry, tmp_path: Path
) -> None:
    graph = make_graph("naps", act={"nap_at": 2, "nap_s": 60.0})
    # The episode's limit (0.5 s) ends the nap before the call's own deadline (30 s) does.
    run = Run(
        registry,
        graph,
        tmp_path,
        episode_count=1,
        step_budget=4,
        per_step_timeout_s=30.0,
        episode_timeout_s=0.5,
    )
    started = time.perf_counter()
    summary = await run.execute()
    elapsed_s = time.perf_counter() - started

    assert elapsed_s < 25.0, "the episode's safety net (0.5 s) did not cut the 60 s nap short"
    assert summary.status == "completed"
    assert_identity(summary, ["ok"], 1)
    (ep,) = summary.episodes
    assert ep.status == "timeout"
    assert ep.error is not None and "timeout after 0.5 s" in ep.error
    assert ep.steps == 2  # iterations 0 and 1 finished before the policy fell asleep
    assert ep.metrics == {}  # not scored: what it harvested is kept apart
    assert ep.partial_metrics["steps"] == 2  # graphOut fired in iteration 2, before the nap
    assert ep.partial_metrics["score"] == (ep.seed % 1000) / 1000.0
    assert ep.step_budget == 4
    assert ep.end_reason == "timeout"
    assert ep.failed_node == "policy"  # what the episode was waiting for when it was cut
    assert summary.determinism.guaranteed is False
    assert any("timeout" in reason and "[0]" in reason for reason in summary.determinism.reasons)
    on_disk = EvalRun.model_validate(read_json(run.run_dir.summary_path))
    assert on_disk.determinism.guaranteed is False
    assert on_disk.episodes[0].status == "timeout"


async def test_exception_in_on_load_is_data_and_the_run_goes_on(
    registry: WorkspaceComponentRegistry, tmp_path: Path
) -> None:
    graph = make_graph("loads", tasks=("bad_load", "ok"))
    run = Run(registry, graph, tmp_path, episode_count=1)
    summary = await run.execute()

    assert summary.status == "completed"
    assert summary.status_counts == {"completed": 1, "exception": 1}
    assert_identity(summary, ["bad_load", "ok"], 1)
    bad, good = summary.episodes
    assert bad.status == "exception"
    assert bad.error is not None and "'bad_load' cannot be built" in bad.error
    assert bad.steps == 0 and bad.metrics == {}
    assert bad.end_reason == "exception" and bad.failed_node is None
    # Where it was raised: the traceback, bounded, ends with the error itself.
    assert bad.traceback is not None and bad.traceback.startswith("Traceback")
    assert "cannot be built" in bad.traceback.splitlines()[-1]
    assert good.status == "completed" and good.metrics["success"] == 1
    assert summary.aggregate_metrics["success"].n == 1  # the exception is not a failure


@pytest.mark.parametrize(
    ("act", "message"),
    [({"raise_at": 1}, "RuntimeError: act failed at step 1"), ({"error_at": 1}, "refused step 1")],
    ids=["raises", "returns-error"],
)
async def test_node_error_names_the_node_and_keeps_partial_metrics(
    registry: WorkspaceComponentRegistry, tmp_path: Path, act: dict[str, Any], message: str
) -> None:
    run = Run(registry, make_graph("errs", act=act), tmp_path, episode_count=2)
    summary = await run.execute()

    assert summary.status == "completed"
    assert summary.status_counts == {"error": 2}
    assert_identity(summary, ["ok"], 2)
    for ep in summary.episodes:
        assert ep.status == "error"
        assert ep.error is not None and "policy" in ep.error
        assert list(ep.node_errors) == ["policy"]
        assert message in ep.node_errors["policy"]
        assert ep.steps == 2  # the failing iteration counts; nothing ran after it
        assert ep.partial_metrics["steps"] == 1  # graphOut saw the env after one action
        assert ep.end_reason == "error" and ep.failed_node == "policy"
        assert ep.traceback is None  # the episode itself raised nothing
        if "raise_at" in act:  # an in-process node that raised keeps its traceback
            assert list(ep.node_tracebacks) == ["policy"]
            lines = ep.node_tracebacks["policy"].splitlines()
            assert lines[-1] == message and any("in act" in line for line in lines)
        else:  # an error it returned has no traceback
            assert ep.node_tracebacks == {}
    assert summary.aggregate_metrics == {}
    log = read_jsonl(run.run_dir.episode_log_path(0)).records
    assert [r["status"] for r in log if r["node"] == "policy"] == ["ok", "error"]


async def test_no_graph_out_is_no_verdict(
    registry: WorkspaceComponentRegistry, tmp_path: Path
) -> None:
    run = Run(registry, make_graph("mute", graph_out=False), tmp_path, episode_count=2)
    summary = await run.execute()

    assert summary.status_counts == {"no_verdict": 2}
    assert_identity(summary, ["ok"], 2)
    for ep in summary.episodes:
        assert ep.status == "no_verdict"
        assert ep.error is not None and "no verdict" in ep.error
        assert ep.metrics == {}
        assert ep.steps == episode_length(ep.seed) + 1  # it ran to its end, it just said nothing
        assert ep.end_reason == "no_verdict"
    assert summary.aggregate_metrics == {}


async def test_a_completed_episode_says_whether_the_env_or_the_step_budget_ended_it(
    registry: WorkspaceComponentRegistry, tmp_path: Path
) -> None:
    """Not a success: the env said done (scored a failure here, its success overridden by a
    constant), or the step budget ran out first."""
    run = Run(registry, make_graph("verdicts", success=0), tmp_path / "env", episode_count=2)
    summary = await run.execute()
    assert summary.status_counts == {"completed": 2}
    for ep in summary.episodes:
        assert ep.metrics["success"] == 0 and ep.steps == episode_length(ep.seed) + 1
        assert ep.end_reason == "env_done" and ep.error is None

    run = Run(registry, make_graph("short"), tmp_path / "budget", episode_count=2, step_budget=2)
    summary = await run.execute()
    assert summary.status_counts == {"completed": 2}
    for ep in summary.episodes:
        assert ep.steps == 2 < episode_length(ep.seed) + 1 and ep.metrics["success"] == 0
        assert ep.end_reason == "budget_exhausted" and ep.error is None


async def test_a_run_cancelled_after_its_last_episode_finished_is_completed(
    registry: WorkspaceComponentRegistry, tmp_path: Path
) -> None:
    def cancel_at_the_end(event: LiveEvent) -> None:
        if isinstance(event, EvalProgress) and event.episodes_done == 2:
            run.runner.cancel()  # the user's cancel arrives just after the last episode

    run = Run(registry, make_graph("ok"), tmp_path, cancel_at_the_end, episode_count=2)
    summary = await run.execute()

    assert run.runner.cancel_event.is_set()
    assert summary.status == "completed", summary.status
    assert summary.episodes_done == summary.episodes_total == 2


async def test_cancel_mid_run_leaves_the_episodes_not_started_missing(
    registry: WorkspaceComponentRegistry, tmp_path: Path
) -> None:
    graph = make_graph("slow", fields={"step_latency_ms": 60.0})
    run = Run(registry, graph, tmp_path, episode_count=4)
    execution = asyncio.ensure_future(run.execute())
    try:
        # Iteration 0 (env, policy, out) and the env of iteration 1: episode 1 is under way.
        await wait_for_firings(run.run_dir.episode_log_path(1), 4, POLL_DEADLINE_S, 0.005)
        run.runner.cancel()
        summary = await execution
    finally:
        execution.cancel()

    assert summary.status == "cancelled"
    assert summary.episodes_total == 4
    # Finished episodes count as done; the one in flight is a cancelled record; the two
    # never started are left missing (no record written one by one for them).
    assert summary.episodes_done == 1
    assert summary.status_counts == {"cancelled": 1, "completed": 1}
    assert_identity(summary, ["ok"], 2)
    first, hit = summary.episodes
    assert first.status == "completed"
    assert hit.status == "cancelled"
    assert 1 <= hit.steps <= episode_length(hit.seed)  # partial: cut short mid-episode
    assert hit.partial_metrics["score"] == (hit.seed % 1000) / 1000.0
    assert hit.partial_metrics["success"] == 0 and hit.metrics == {}
    assert hit.end_reason == "cancelled" and hit.error == "cancelled with the run"
    assert not run.run_dir.episode_dir(2).exists() and not run.run_dir.episode_dir(3).exists()
    on_disk = EvalRun.model_validate(read_json(run.run_dir.summary_path))
    assert on_disk.status == "cancelled"
    assert [e.status for e in on_disk.episodes] == [e.status for e in summary.episodes]
    assert summary.aggregate_metrics["success"].n == 1
