"""Timeouts and panels, each made to really happen on real env servers.

A replicated test env ``renv`` (auto_host children, found through ``AGENTCANVAS_HOME``) and a
local policy ``rglue`` live in a real workspace under ``tmp_path``. An episode of ``renv``
lasts ``3 + seed % 3`` actions and reports the env's action ``counter`` as a metric.

- Task ``slow``: its first action blocks inside the server until the next episode is set on
  the same panel (or ``LATE_CAP_S`` passes), then adds ``LATE_BUMP`` to the counter. So a
  step left running by a timed-out episode lands, deterministically, in the next one: the
  panel's ``play`` releases it and waits for it to land.
- Task ``hang``: every action sleeps ``HANG_S`` in the server, past a short call deadline.
- Task ``fancy``: its cascade sets the panel field ``mode`` (which the graph's env.fields do
  not set) to ``"fancy"``; other tasks allow either value, so without a panel reset the value
  would carry over into the next episode. Every episode reports ``fancy`` (0 or 1).
"""

from __future__ import annotations

import asyncio
import textwrap
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from agentcanvas.eval.config import EpisodeResult, EvalConfig, EvalRun
from agentcanvas.eval.invariance import diff_runs
from agentcanvas.eval.run_context import RunContext
from agentcanvas.eval.runner import BatchEvalRunner
from agentcanvas.eval.store import RunDir
from agentcanvas.graph.model import Graph, parse_graph
from agentcanvas.server.registry import WorkspaceComponentRegistry
from support.registry import scanned, started_registry
from support.workspace import home_workspace

pytestmark = pytest.mark.asyncio(loop_scope="module")

RUN_DEADLINE_S = 60.0  # a broken runner fails the test instead of hanging it
CALL_DEADLINE_S = 1.0  # (b): the run's per-step timeout, every node-set call's deadline

RENV = textwrap.dedent(
    '''
    """renv: a replicated env with a late-landing step, a hanging task and a cascade field."""

    import threading
    import time

    from agentcanvas.nodes.base import NodeSet, Panel
    from agentcanvas.nodes.manifest import FieldSpec, LoadInfo, PanelSpec, PortSpec

    LATE_BUMP = 100  # what a late step of an ended episode adds to the counter
    LATE_CAP_S = 3.0  # the longest a slow step waits for the next episode
    HANG_S = 2.5  # every action of task "hang" takes this long


    class State:
        def __init__(self):
            self.task, self.seed, self.index, self.mode = "", 0, 0, ""
            self.length, self.counter = 0, 0
            self.late_pending = threading.Event()  # a step of an ended episode still runs
            self.next_set = threading.Event()  # play: the next episode is now set
            self.late_landed = threading.Event()  # the late step has written its bump


    class RPanel(Panel):
        spec = PanelSpec(
            fields=[
                FieldSpec(name="task_id", kind="str", default="ok"),
                FieldSpec(name="episode_index", kind="int", default=0),
                FieldSpec(name="seed", kind="int", default=0),
                FieldSpec(name="mode", kind="str", default="plain", depends_on="task_id"),
            ],
            actions=["play", "reset"],
        )

        def choices(self, name):
            if name == "mode":
                return ["fancy"] if self.values["task_id"] == "fancy" else ["plain", "fancy"]
            return super().choices(name)

        def on_action(self, name):
            if name != "play":
                return super().on_action(name)
            s = self.state
            s.task, s.seed = str(self.values["task_id"]), int(self.values["seed"])
            s.index, s.mode = int(self.values["episode_index"]), str(self.values["mode"])
            s.length, s.counter = 3 + s.seed % 3, 0
            if s.late_pending.is_set():  # let the late step land in this episode, now
                s.next_set.set()
                s.late_landed.wait(LATE_CAP_S)
            return dict(self.values)

        def on_load(self):
            s = self.state
            return LoadInfo(episode_id=f"{s.task}/{s.index}", step_budget=s.length + 5)


    NODESET = NodeSet(name="renv", parallelism="replicated", state_factory=State,
                      panel_class=RPanel)


    def _late_step(s):
        s.late_landed.clear()
        s.late_pending.set()
        s.next_set.wait(LATE_CAP_S)
        s.next_set.clear()
        s.counter += LATE_BUMP
        s.late_pending.clear()
        s.late_landed.set()


    @NODESET.node("step", inputs=[PortSpec(name="action", required=False)],
                  outputs=[PortSpec(name="obs", type="int"), PortSpec(name="done", type="bool"),
                           PortSpec(name="metrics", type="dict")],
                  done_port="done", blocking=True)
    def step(inputs, config, state, ctx):
        s = state
        if inputs.get("action") is not None and s.counter < s.length:
            if s.task == "slow" and s.counter == 0:
                _late_step(s)
            elif s.task == "hang":
                time.sleep(HANG_S)
            s.counter += 1
        done = s.counter >= s.length
        metrics = {"success": int(done), "counter": s.counter, "fancy": int(s.mode == "fancy"),
                   "score": (s.seed % 1000) / 1000.0}
        return {"obs": s.seed + s.counter, "done": done, "metrics": metrics}
    '''
)

RGLUE = textwrap.dedent(
    '''
    """rglue: a policy that always acts."""

    from agentcanvas.nodes.base import NodeSet
    from agentcanvas.nodes.manifest import PortSpec

    NODESET = NodeSet(name="rglue", parallelism="local")


    @NODESET.node("act", inputs=[PortSpec(name="obs")],
                  outputs=[PortSpec(name="action", type="int")])
    def act(inputs, config, state, ctx):
        return {"action": 1}
    '''
)


def make_graph(name: str, tasks: tuple[str, ...]) -> Graph:
    nodes: list[dict[str, Any]] = [
        {"id": "env", "type": "renv.step"},
        {"id": "policy", "type": "rglue.act"},
        {"id": "out", "type": "core.graphOut"},
    ]
    edges: list[dict[str, Any]] = [
        {"source": "env.obs", "target": "policy.obs"},
        {"source": "policy.action", "target": "env.action", "next_iteration": True},
        {"source": "env.metrics", "target": "out.metrics"},
    ]
    env = {"nodeset": "renv", "fields": {}, "tasks": list(tasks)}
    return parse_graph({"version": 1, "name": name, "env": env, "nodes": nodes, "edges": edges})


def episode_length(seed: int) -> int:
    return 3 + seed % 3


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    # AGENTCANVAS_HOME: the auto_host children find renv here
    yield from home_workspace(
        tmp_path_factory, "review_timeouts_ws", {"renv": RENV, "rglue": RGLUE}
    )


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def registry(workspace: Path) -> AsyncIterator[WorkspaceComponentRegistry]:
    async with started_registry(workspace, make_graph("warmup", ("ok",)), worker_count=1) as reg:
        yield reg


async def run_eval(
    registry: WorkspaceComponentRegistry, graph: Graph, folder: Path, **config: Any
) -> EvalRun:
    registry.validate(graph)
    cfg = EvalConfig(graph_name=graph.name, **config)
    runner = BatchEvalRunner(
        RunContext(registry, graph, cfg, RunDir(folder), run_id="20260101_000000")
    )
    return await asyncio.wait_for(runner.execute(), RUN_DEADLINE_S)


def what_it_scored(episode: EpisodeResult) -> dict[str, Any]:
    """An episode's record without its position in the run, wall time and attempts."""
    return episode.model_dump(exclude={"index", "duration_s", "attempts"})


# -- (a) a timeout replaces the worker's servers --------------------------------------------
async def test_a_step_left_running_by_a_timeout_never_touches_the_next_episode(
    registry: WorkspaceComponentRegistry, tmp_path: Path
) -> None:
    graph = make_graph("late", ("ok", "slow", "after"))
    restarts_before = registry.fleet.records["renv#0"].restarts
    knobs: dict[str, Any] = {"episode_count": 1, "step_budget": 10, "per_step_timeout_s": 0.5}
    summary = await run_eval(registry, graph, tmp_path / "with_slow", worker_count=1, **knobs)
    alone = await run_eval(
        registry, graph, tmp_path / "alone", worker_count=1, tasks=["after"], **knobs
    )

    assert summary.status == "completed"
    first, slow, after = summary.episodes
    assert first.status == "completed"
    assert slow.status == "timeout"
    assert slow.error == "a node-set call hit its wall-clock deadline: env"  # 0.5 s per call
    # The episode after the timeout, on the same worker, is the episode run on its own.
    (reference,) = alone.episodes
    assert reference.status == "completed"
    assert reference.metrics["counter"] == episode_length(reference.seed)
    assert (after.task, after.seed) == (reference.task, reference.seed)
    assert what_it_scored(after) == what_it_scored(reference)
    assert registry.fleet.records["renv#0"].restarts == restarts_before + 1
    assert summary.determinism.guaranteed is False
    assert summary.determinism.reasons == ["wall-clock timeouts decided episodes [1]"]
    assert alone.determinism.guaranteed is True


# -- (b) a call past its deadline makes the episode a timeout --------------------------------
async def test_a_call_past_its_deadline_is_a_timeout_naming_the_node(
    workspace: Path, tmp_path: Path
) -> None:
    # The run's per-step timeout is every call's deadline (server.deadlines).
    reg = scanned(workspace)
    graph = make_graph("hangs", ("hang",))
    try:
        await reg.ensure_nodesets_for_graph(graph, worker_count=1)
        summary = await run_eval(
            reg,
            graph,
            tmp_path / "run",
            episode_count=1,
            step_budget=8,
            per_step_timeout_s=CALL_DEADLINE_S,
        )
        restarts = reg.fleet.records["renv#0"].restarts
    finally:
        await reg.shutdown_all()

    (ep,) = summary.episodes
    assert ep.status == "timeout", ep
    assert ep.error == "a node-set call hit its wall-clock deadline: env"
    assert list(ep.node_errors) == ["env"]
    assert "ServerTimeoutError" in ep.node_errors["env"]
    assert f"did not answer /call/step within {CALL_DEADLINE_S:g} s" in ep.node_errors["env"]
    assert ep.steps == 2  # iteration 0 observed; the first action hung
    assert ep.duration_s < 8 * CALL_DEADLINE_S  # the call deadline ended it, not the safety net
    assert restarts == 1  # its server was replaced like after any timeout
    assert summary.determinism.guaranteed is False
    assert summary.determinism.reasons == ["wall-clock timeouts decided episodes [0]"]


# -- (c) set_episode resets the panel first ---------------------------------------------------
async def test_a_cascade_field_set_by_one_episode_does_not_reach_the_next(
    registry: WorkspaceComponentRegistry, tmp_path: Path
) -> None:
    graph = make_graph("cascade", ("fancy", "ok"))
    await registry.ensure_nodesets_for_graph(graph, worker_count=2)
    # Two workers: each episode on its own server. One worker: "ok" right after "fancy".
    apart = await run_eval(registry, graph, tmp_path / "w2", episode_count=1, worker_count=2)
    together = await run_eval(registry, graph, tmp_path / "w1", episode_count=1, worker_count=1)

    for summary in (apart, together):
        assert summary.status_counts == {"completed": 2}
        fancy, ok = summary.episodes
        assert (fancy.task, fancy.metrics["fancy"]) == ("fancy", 1)
        assert (ok.task, ok.metrics["fancy"]) == ("ok", 0), "mode carried over from 'fancy'"
    assert diff_runs(apart, together) == []
