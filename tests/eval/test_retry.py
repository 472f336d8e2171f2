"""Retrying a run's errored episodes: a real BabyAI run, its retry runs, the same seeds.

The graph is the built-in ``babyai_oracle`` (BFS planner on MiniGrid/BabyAI) with one more
node: ``trap.check``, local glue from this test's workspace, that raises at step 2 of every
episode whose seed is divisible by 3 while ``RETRY_TRAP=on`` — a failure that is a pure
function of the episode, as a bug in a user's node is. The original run errs on those
episodes; a retry of its ``errors`` runs exactly them, with the same seeds, at -w 1 and
-w 2: with the trap still armed each fails exactly as before, record for record; disarmed,
each records what a clean run of the same config records for it. The original's files are
never written again.
"""

from __future__ import annotations

import asyncio
import textwrap
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from agentcanvas.errors import UserInputError
from agentcanvas.eval.comparison import compare_runs
from agentcanvas.eval.config import EpisodeRef, EpisodeResult, EvalConfig, EvalRun
from agentcanvas.eval.foreground import ForegroundRun, run_foreground
from agentcanvas.eval.retry import (
    original_graph,
    parse_indices,
    parse_selection,
    retry_config,
    select_episodes,
)
from agentcanvas.eval.run_setup import new_run_dir, run_registry
from agentcanvas.eval.run_spec import RunSpec
from agentcanvas.eval.seeding import episode_seed
from agentcanvas.eval.store import RunDir
from agentcanvas.eval.triage import triage
from agentcanvas.fileio import read_json
from agentcanvas.graph.model import Graph, load_graph_file, parse_graph
from agentcanvas.paths import runs_dir
from agentcanvas.server.registry import WorkspaceComponentRegistry
from support.workspace import home_workspace

IN_MODULE_LOOP = pytest.mark.asyncio(loop_scope="module")

RUN_DEADLINE_S = 240.0
SEED = 3
PER_TASK = 5
STEP_BUDGET = 24

TRAP = textwrap.dedent(
    '''
    """trap: a glue node that fails on purpose (RETRY_TRAP=on, seeds divisible by 3)."""

    import os

    from agentcanvas.nodes import NodeSet, PortSpec

    NODESET = NodeSet(name="trap", parallelism="local")


    @NODESET.node("check", inputs=[PortSpec(name="pos", required=False)],
                  outputs=[PortSpec(name="ok")])
    def check(inputs, config, state, ctx):
        if os.environ.get("RETRY_TRAP") == "on" and ctx.episode_seed % 3 == 0 and ctx.step == 2:
            raise RuntimeError(f"trap sprung at step {ctx.step} (seed {ctx.episode_seed})")
        return {"ok": 1}
    '''
)


def trap_graph() -> Graph:
    import agentcanvas.graphs

    builtin = Path(agentcanvas.graphs.__file__).parent / "babyai_oracle.json"
    graph = load_graph_file(builtin).model_dump(mode="json")
    graph["name"] = "babyai_trap"
    graph["nodes"].append({"id": "trap", "type": "trap.check"})
    graph["edges"].append({"source": "env.agent_pos", "target": "trap.pos"})
    return parse_graph(graph)


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    yield from home_workspace(tmp_path_factory, "retry_ws", {"trap": TRAP}, [trap_graph()])


async def run(workspace: Path, config: EvalConfig, graph: Graph | None = None) -> ForegroundRun:
    """One run as the CLI runs it: its own folder, its own servers."""
    registry = WorkspaceComponentRegistry(workspace=workspace)
    registry.scan_all()
    run_dir = new_run_dir(runs_dir(workspace))
    ran = run_foreground(
        run_registry(registry.catalogue, run_dir),
        graph or registry.load_graph("babyai_trap"),
        config,
        run_dir=run_dir,
    )
    return await asyncio.wait_for(ran, RUN_DEADLINE_S)


def config(workers: int) -> EvalConfig:
    return EvalConfig(
        graph_name="babyai_trap",
        episode_count=PER_TASK,
        worker_count=workers,
        seed=SEED,
        step_budget=STEP_BUDGET,
    )


def scored(episode: EpisodeResult) -> dict[str, Any]:
    """What must be equal between runs: the record without its place in the run (and what
    identity() leaves out: wall time, attempts, tracebacks)."""
    record = episode.identity()
    del record["index"]
    return record


def folder_bytes(run_dir: RunDir) -> dict[str, bytes]:
    return {
        str(p.relative_to(run_dir.root)): p.read_bytes()
        for p in sorted(run_dir.root.rglob("*"))
        if p.is_file() and p.name in ("summary.json", "spec.json", "episode.json", "log.jsonl")
    }


@pytest.fixture(scope="module")
def armed() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RETRY_TRAP", "on")
        yield


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def original(workspace: Path, armed: None) -> ForegroundRun:
    ran = await run(workspace, config(workers=2))
    assert ran.summary.status == "completed"
    return ran


def errored(summary: EvalRun) -> list[EpisodeResult]:
    return [e for e in summary.episodes if e.status == "error"]


@IN_MODULE_LOOP
async def test_the_original_run_errs_on_the_trapped_episodes_and_triage_groups_them(
    original: ForegroundRun,
) -> None:
    summary = original.summary
    bad = errored(summary)
    assert 0 < len(bad) < summary.episodes_total == 2 * PER_TASK
    for episode in bad:
        assert episode.seed % 3 == 0 and episode.failed_node == "trap"
        assert episode.end_reason == "error" and "trap sprung" in episode.node_tracebacks["trap"]
    report = triage(summary.episodes)
    group = report.groups[0]
    assert (group.kind, group.node, group.count) == ("node_error", "trap", len(bad))
    assert group.cause == "trap.check: RuntimeError: trap sprung at step <n> (seed <n>)"
    assert group.episodes == [e.index for e in bad]


@IN_MODULE_LOOP
async def test_a_retry_config_lists_the_errored_episodes_of_the_original(
    original: ForegroundRun,
) -> None:
    retry = retry_config(original.run_dir, "errors")
    bad = errored(original.summary)
    assert retry.retry_of == original.run_id
    assert retry.episodes == [EpisodeRef(task=e.task, episode_index=e.episode_index) for e in bad]
    kept = {"graph_name", "seed", "step_budget", "worker_count", "per_step_timeout_s"}
    for name in kept:
        assert getattr(retry, name) == getattr(original.summary.config, name), name
    assert original_graph(original.run_dir).model_dump() == trap_graph().model_dump()
    # By index, from the original's plan (recorded or not).
    picked = select_episodes(original.run_dir, [0, PER_TASK + 1])
    tasks = trap_graph().default_tasks()
    assert picked == [
        EpisodeRef(task=tasks[0], episode_index=0),
        EpisodeRef(task=tasks[1], episode_index=1),
    ]
    failures = select_episodes(original.run_dir, "failures")
    assert len(failures) >= len(bad) and set(retry.episodes or []) <= set(failures)
    with pytest.raises(UserInputError, match=r"no episode 99 .*0-9"):
        select_episodes(original.run_dir, [99])


@IN_MODULE_LOOP
@pytest.mark.parametrize("workers", [1, 2])
async def test_an_armed_retry_fails_exactly_as_the_original_did(
    workspace: Path, original: ForegroundRun, workers: int
) -> None:
    before = folder_bytes(original.run_dir)
    retry = retry_config(original.run_dir, "errors").model_copy(update={"worker_count": workers})
    again = await run(workspace, retry, original_graph(original.run_dir))
    bad = errored(original.summary)
    assert [e.index for e in again.summary.episodes] == list(range(len(bad)))
    assert again.summary.episodes_total == len(bad)
    assert again.summary.metric_rules.planned_by_task == dict(Counter(e.task for e in bad))
    assert [(e.task, e.episode_index, e.seed) for e in again.summary.episodes] == [
        (e.task, e.episode_index, e.seed) for e in bad
    ]
    for episode in again.summary.episodes:
        assert episode.seed == episode_seed(SEED, episode.task, episode.episode_index)
    assert [scored(e) for e in again.summary.episodes] == [scored(e) for e in bad]
    spec = RunSpec.read(again.run_dir)
    assert spec.config.retry_of == original.run_id and spec.config.episodes == retry.episodes
    assert again.summary.config.retry_of == original.run_id
    assert folder_bytes(original.run_dir) == before  # the original is never written again


@IN_MODULE_LOOP
async def test_a_disarmed_retry_records_what_a_clean_run_records(
    workspace: Path, original: ForegroundRun, monkeypatch: pytest.MonkeyPatch
) -> None:
    retry = retry_config(original.run_dir, "errors")
    monkeypatch.setenv("RETRY_TRAP", "off")
    fixed = await run(workspace, retry, original_graph(original.run_dir))
    clean = await run(workspace, config(workers=1))
    assert fixed.summary.status_counts.get("error", 0) == 0
    by_identity = {(e.task, e.episode_index): e for e in clean.summary.episodes}
    for episode in fixed.summary.episodes:
        assert scored(episode) == scored(by_identity[(episode.task, episode.episode_index)])
    # A comparison with the original pairs every retried episode with its first attempt.
    compared = compare_runs(
        read_json(original.run_dir.summary_path), read_json(fixed.run_dir.summary_path)
    )
    assert compared["paired"] == len(errored(original.summary))


def test_a_selection_names_its_bad_part() -> None:
    assert parse_indices("3, 17,40-45") == [3, 17, 40, 41, 42, 43, 44, 45]
    assert parse_selection("errors") == "errors" and parse_selection("FAILURES") == "failures"
    assert parse_selection("5-5,2") == [2, 5]
    for text, part in [("3,x,5", "'x'"), ("4-", "'4-'"), ("-2", "'-2'"), ("1,,2", "''")]:
        with pytest.raises(UserInputError, match=part):
            parse_indices(text)
    with pytest.raises(UserInputError, match="goes down; write 3-9"):
        parse_indices("9-3")
    with pytest.raises(UserInputError, match="run indices like"):
        parse_selection(" ")


def test_episodes_and_retry_of_are_validated_naming_the_field() -> None:
    ref = {"task": "t", "episode_index": 1}
    with pytest.raises(ValueError, match="retry_of: give the episodes"):
        EvalConfig(graph_name="g", retry_of="20260101_000000")
    with pytest.raises(
        ValueError, match=r"episodes\[1\]: task 't' episode_index 1 is listed twice"
    ):
        EvalConfig(graph_name="g", episodes=[ref, ref])
    with pytest.raises(ValueError, match="tasks: leave it unset"):
        EvalConfig(graph_name="g", episodes=[ref], tasks=["t"])
    with pytest.raises(ValueError, match="start_index: leave it at 0"):
        EvalConfig(graph_name="g", episodes=[ref], start_index=2)
    with pytest.raises(ValueError, match="retry_of"):
        EvalConfig(graph_name="g", episodes=[ref], retry_of="not a run id")
