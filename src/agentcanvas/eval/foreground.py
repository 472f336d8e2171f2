"""A whole run in this process: the CLI's foreground ``eval`` (its own "subprocess").

Reserve a run folder, take its writer lock (held to the end: one writer per run folder),
write spec.json, start the servers the graph needs (`run_setup.prepare_run`), execute, and
in ``finally`` shut every server down, save the summary and touch ``_DONE`` — also when
cancelled or interrupted.

A failure is recorded with its real cause: exception groups (from the runner's TaskGroup) are
unwrapped, and a node-set server lost in mid-run (ServerDiedError, which names the server and
its URL) ends the run ``aborted``, resumable, not ``failed``. An interrupted run (Ctrl-C)
ends ``cancelled`` with a sentence for its error — how far it got and how to resume it — and
:func:`outcome` reads it back: a caller that reserved the folder (``run_setup.new_run_dir``)
and passed it as ``run_dir`` knows the run also when ``run_foreground`` was interrupted.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from agentcanvas.errors import DiskFullError, ServerDiedError, describe
from agentcanvas.eval.config import EvalConfig, EvalRun
from agentcanvas.eval.engine import Engine, LocalEngine
from agentcanvas.eval.events import Broadcast
from agentcanvas.eval.records import read_summary
from agentcanvas.eval.run_setup import RunSetup, new_run_dir, prepare_run
from agentcanvas.eval.run_spec import RunSpec
from agentcanvas.eval.run_state import RunStatus
from agentcanvas.eval.runlock import RunLock
from agentcanvas.eval.runner import BatchEvalRunner
from agentcanvas.eval.store import RunDir
from agentcanvas.fileio import atomic_write_json
from agentcanvas.graph.model import Graph
from agentcanvas.paths import runs_dir
from agentcanvas.server.registry import WorkspaceComponentRegistry

__all__ = [
    "ForegroundRun",
    "finalise_run",
    "interrupted_error",
    "outcome",
    "record_failure",
    "run_foreground",
]


@dataclass
class ForegroundRun:
    """A run this process ran: its id, its folder and its final summary."""

    run_id: str
    run_dir: RunDir
    summary: EvalRun


def outcome(run_dir: RunDir) -> ForegroundRun:
    """The run in ``run_dir`` as it ended, read from its summary — also one interrupted
    (status ``cancelled``, its ``error`` says after how many episodes and how to resume)."""
    summary = EvalRun.model_validate(read_summary(run_dir.summary_path))
    return ForegroundRun(run_dir.root.name, run_dir, summary)


def interrupted_error(run_id: str, by: str, progress: tuple[int, int] | None) -> str:
    """The error of a run interrupted ``by`` something (``Ctrl-C``) after ``progress``
    (episodes done, planned; None: while it was starting), and how to resume it."""
    if progress is None:
        where = "while it was starting, before any episode ran"
    else:
        where = f"after {progress[0]} of {progress[1]} episodes"
    return f"interrupted ({by}) {where}; resume with agentcanvas resume {run_id}"


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
    shared_urls: Mapping[str, str] | None = None,
    engine: Engine | None = None,
) -> ForegroundRun:
    """Run ``config`` on ``graph`` here with ``registry`` (and its fleet's launcher: see
    ``run_setup.run_registry``), start to finish; the run folder is always finalised, and
    every server the registry knows is stopped at the end (borrowed ones only let go).
    ``engine``: where the episodes run (default: this host's node-set servers). Give
    ``run_dir`` to know the run when this is interrupted (then read it with `outcome`)."""
    if run_dir is None:
        run_dir = new_run_dir(base_dir or runs_dir(registry.workspace))
    run_dir.create()
    setup = RunSetup(
        run_dir, graph, config, shared_urls or {}, broadcast, engine=engine or LocalEngine()
    )
    with RunLock(run_dir).acquire():
        return await _run_locked(registry, setup)


async def _run_locked(registry: WorkspaceComponentRegistry, setup: RunSetup) -> ForegroundRun:
    run_dir, config = setup.run_dir, setup.config
    write_spec(run_dir, config, setup.graph, run_dir.root.name)
    runner: BatchEvalRunner | None = None
    try:
        runner = await prepare_run(registry, setup)
        summary = await runner.execute()
    except BaseException as exc:
        record_failure(run_dir, runner, config, exc)
        raise
    finally:
        await asyncio.shield(finalise_run(registry, runner, run_dir, setup.engine))
    return ForegroundRun(run_dir.root.name, run_dir, summary)


def record_failure(
    run_dir: RunDir,
    runner: BatchEvalRunner | None,
    config: EvalConfig,
    exc: BaseException,
    interrupted_by: str = "Ctrl-C",
) -> None:
    """A run that raised: ``cancelled`` when interrupted (by ``interrupted_by``: its error
    says how far it got and how to resume); ``aborted`` (resumable) when its parent died or a
    server was lost in mid-run; else ``failed`` — never ``running``."""
    cause = root_cause(exc)
    interrupted = isinstance(cause, asyncio.CancelledError | KeyboardInterrupt)
    error = describe(cause)
    run_id = run_dir.root.name
    if interrupted:
        progress = (runner.run.episodes_done, runner.run.episodes_total) if runner else None
        error = interrupted_error(run_id, interrupted_by, progress)
    if runner is not None:
        lost = isinstance(cause, ServerDiedError)
        if isinstance(cause, DiskFullError):  # resumable once space is freed
            runner.recorder.end_for_full_disk(cause)
        elif runner.aborted or lost:
            lost_error = f"a node-set server was lost in mid-run: {cause}"
            runner.run.move_to(RunStatus.ABORTED, lost_error if lost else error)
        else:
            runner.run.move_to(RunStatus.CANCELLED if interrupted else RunStatus.FAILED, error)
        return
    failed = EvalRun(
        run_id=run_id,
        graph_name=config.graph_name,
        config=config,
        episodes_total=0,
        status=RunStatus.CANCELLED if interrupted else RunStatus.FAILED,
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
        try:
            if runner is not None:
                runner.save()
            if runner is None or runner.run.status != "aborted":
                run_dir.touch_done()
        finally:
            run_dir.release_reserve()
