"""A whole run in this process: the CLI's foreground ``eval`` (its own "subprocess").

Reserve a run folder, take its writer lock (held to the end: one writer per run folder),
write spec.json, start the shared servers the graph needs and N tagged servers per replicated
node set, execute, and in ``finally`` shut every server down, save the summary and touch
``_DONE`` — also when cancelled or interrupted.

A failure is recorded with its real cause: exception groups (from the runner's TaskGroup) are
unwrapped, and a node-set server lost in mid-run (ServerDiedError, which names the server and
its URL) ends the run ``aborted``, resumable, not ``failed``.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

from agentcanvas.errors import ServerDiedError
from agentcanvas.eval.config import EvalConfig, EvalRun
from agentcanvas.eval.determinism import collect_determinism
from agentcanvas.eval.engine import Engine, LocalEngine
from agentcanvas.eval.events import Broadcast
from agentcanvas.eval.run_spec import RunSpec
from agentcanvas.eval.runlock import RunLock
from agentcanvas.eval.runner import BatchEvalRunner
from agentcanvas.eval.store import RunDir, atomic_write_json, new_run_id
from agentcanvas.graph.model import Graph
from agentcanvas.nodes.registry import WorkspaceComponentRegistry
from agentcanvas.paths import runs_dir
from agentcanvas.server.launcher import LocalProcessLauncher

__all__ = [
    "ForegroundRun",
    "collect_determinism",
    "finalise_run",
    "record_failure",
    "run_foreground",
]


@dataclass
class ForegroundRun:
    run_id: str
    run_dir: RunDir
    summary: EvalRun


def write_spec(run_dir: RunDir, config: EvalConfig, graph: Graph, run_id: str) -> None:
    """spec.json: the input contract of a run (config, scheduling block, frozen graph)."""
    RunSpec(run_id=run_id, config=config, graph=graph.model_dump(mode="json")).write(run_dir)


async def run_foreground(
    registry: WorkspaceComponentRegistry,
    graph: Graph,
    config: EvalConfig,
    broadcast: Broadcast | None = None,
    base_dir: Path | None = None,
    run_dir: RunDir | None = None,
    engine: Engine | None = None,
) -> ForegroundRun:
    """Run ``config`` on ``graph`` here, start to finish; the run folder is always finalised.
    ``engine``: where the episodes run (default: this host's node-set servers)."""
    if run_dir is None:
        folder = base_dir or runs_dir(registry.workspace)
        run_dir = RunDir(folder / new_run_id(folder))
    run_dir.create()
    with RunLock(run_dir).acquire():
        return await _run_locked(
            registry, graph, config, broadcast, run_dir, engine or LocalEngine()
        )


async def _run_locked(
    registry: WorkspaceComponentRegistry,
    graph: Graph,
    config: EvalConfig,
    broadcast: Broadcast | None,
    run_dir: RunDir,
    engine: Engine,
) -> ForegroundRun:
    run_id = run_dir.root.name
    write_spec(run_dir, config, graph, run_id)
    runner: BatchEvalRunner | None = None
    registry.servers.launcher = LocalProcessLauncher(log_dir=run_dir.root / "servers")
    (run_dir.root / "servers").mkdir(exist_ok=True)
    try:
        await engine.start(registry, graph, config)
        runner = engine.runner(
            registry,
            graph,
            config,
            run_dir,
            run_id=run_id,
            broadcast=broadcast,
            determinism=await engine.determinism(registry, graph),
        )
        summary = await runner.execute()
    except BaseException as exc:
        record_failure(run_dir, runner, config, exc)
        raise
    finally:
        await asyncio.shield(finalise_run(registry, runner, run_dir, engine))
    return ForegroundRun(run_id, run_dir, summary)


def record_failure(
    run_dir: RunDir, runner: BatchEvalRunner | None, config: EvalConfig, exc: BaseException
) -> None:
    """A run that raised: ``cancelled`` when interrupted; ``aborted`` (resumable) when its
    parent died or a server was lost in mid-run; else ``failed`` — never ``running``."""
    cause = root_cause(exc)
    interrupted = isinstance(cause, asyncio.CancelledError | KeyboardInterrupt)
    error = f"{type(cause).__name__}: {cause}"
    if runner is not None:
        lost = isinstance(cause, ServerDiedError)
        if runner.aborted or lost:
            runner.run.status = "aborted"
            runner.run.error = f"a node-set server was lost in mid-run: {cause}" if lost else error
        else:
            runner.run.status = "cancelled" if interrupted else "failed"
            runner.run.error = error
        return
    failed = EvalRun(
        run_id=run_dir.root.name,
        graph_name=config.graph_name,
        config=config,
        episodes_total=0,
        status="cancelled" if interrupted else "failed",
        error=error,
    )
    atomic_write_json(run_dir.summary_path, failed.model_dump(mode="json"))


def root_cause(exc: BaseException) -> BaseException:
    """The first real error inside (nested) exception groups; a lost server first of all."""
    if not isinstance(exc, BaseExceptionGroup):
        return exc
    leaves = [root_cause(inner) for inner in exc.exceptions]
    for leaf in leaves:
        if isinstance(leaf, ServerDiedError):
            return leaf
    real = [leaf for leaf in leaves if not isinstance(leaf, asyncio.CancelledError)]
    return (real or leaves)[0]


async def finalise_run(
    registry: WorkspaceComponentRegistry,
    runner: BatchEvalRunner | None,
    run_dir: RunDir,
    engine: Engine | None = None,
) -> None:
    """Stop owned servers (borrowed ones are left alone) and the engine's actors, save, and
    touch ``_DONE`` — except for an aborted run, which stays without ``_DONE`` so it can be
    resumed."""
    try:
        try:
            if engine is not None:
                await engine.close()
        finally:
            await registry.shutdown_all()
    finally:
        if runner is not None:
            runner.save()
        if runner is None or runner.run.status != "aborted":
            run_dir.touch_done()
