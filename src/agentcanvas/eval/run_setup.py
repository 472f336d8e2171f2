"""The start of a run, shared by the foreground ``eval`` and the eval subprocess.

A run gets its own registry (:func:`run_registry`): the caller's catalogue with a fleet whose
servers log into the run folder. :func:`prepare_run` borrows the backend's shared servers,
validates the graph against what it now knows, has the run's engine start what the graph
needs (locally: N tagged servers per replicated node set; on Ray: actors), measures the
determinism block, and returns the runner, ready to ``execute()``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from agentcanvas.catalogue import NodeSetCatalogue
from agentcanvas.eval.config import EpisodeResult, EvalConfig
from agentcanvas.eval.engine import Engine, LocalEngine
from agentcanvas.eval.events import Broadcast
from agentcanvas.eval.run_context import RunContext
from agentcanvas.eval.runner import BatchEvalRunner
from agentcanvas.eval.store import RunDir, new_run_id
from agentcanvas.graph.model import Graph
from agentcanvas.server.launcher import LocalProcessLauncher
from agentcanvas.server.registry import WorkspaceComponentRegistry

__all__ = ["RunSetup", "new_run_dir", "prepare_run", "run_registry", "scanned_catalogue"]


def scanned_catalogue(workspace: Path | None, overlay: Path | None = None) -> NodeSetCatalogue:
    """The catalogue of ``workspace`` (with ``overlay`` over it), scanned."""
    catalogue = NodeSetCatalogue(workspace, overlay)
    catalogue.scan_all()
    return catalogue


def new_run_dir(runs_dir: Path) -> RunDir:
    """A fresh run folder under ``runs_dir``, reserved (see ``store.new_run_id``)."""
    return RunDir(runs_dir / new_run_id(runs_dir))


def run_registry(catalogue: NodeSetCatalogue, run_dir: RunDir) -> WorkspaceComponentRegistry:
    """A registry for one run: ``catalogue``, and local servers logging to ``servers/``.

    Servers of a forkable node set are forked from one template per node set
    (`server.forkserver`; its log is ``servers/template_<nodeset>.log``), the others spawned;
    ``AGENTCANVAS_FORK_SERVERS=0`` spawns them all."""
    log_dir = run_dir.root / "servers"
    log_dir.mkdir(parents=True, exist_ok=True)
    launcher = LocalProcessLauncher(log_dir=log_dir, forkable=catalogue.is_forkable)
    return WorkspaceComponentRegistry(catalogue=catalogue, launcher=launcher)


@dataclass
class RunSetup:
    """What a run starts from besides its registry."""

    run_dir: RunDir
    graph: Graph
    config: EvalConfig
    shared_urls: Mapping[str, str] = field(default_factory=dict)
    """The backend's shared servers to borrow (name → URL), never stopped by the run."""
    broadcast: Broadcast | None = None
    previous: Sequence[EpisodeResult] = ()
    """On resume: the episodes already recorded."""
    marks: dict[str, float] | None = None
    """When given, the start-up phases are timed into it and into the summary's timings."""
    engine: Engine = field(default_factory=LocalEngine)
    """Where the episodes run: this host's node-set servers, or Ray actors (``cluster``)."""


async def prepare_run(registry: WorkspaceComponentRegistry, setup: RunSetup) -> BatchEvalRunner:
    """Borrow, validate, start the servers, read their batch modes; the runner to execute."""
    marks = setup.marks
    for name, url in setup.shared_urls.items():
        await registry.register_remote_nodeset(name, url)
    if marks is not None:
        marks["shared_borrowed_at"] = time.time()
    registry.validate(setup.graph)  # against the borrowed servers' manifests too
    config, engine = setup.config, setup.engine
    run_id = setup.run_dir.root.name
    await engine.start(registry, setup.graph, config, run_id=run_id, broadcast=setup.broadcast)
    if marks is not None:
        marks["servers_ready_at"] = time.time()
    context = RunContext(
        registry,
        setup.graph,
        config,
        setup.run_dir,
        run_id,
        broadcast=setup.broadcast,
        determinism=await engine.determinism(registry, setup.graph),
        previous=setup.previous,
    )
    runner = engine.runner(context)
    if marks is not None:
        runner.run.timings.update(marks)  # the cold start, phase by phase
    return runner
