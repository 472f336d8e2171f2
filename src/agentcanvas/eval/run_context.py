"""RunContext: everything a run's runner starts from, in one frozen value.

Built once per run (``run_setup.prepare_run`` for the foreground eval and the eval
subprocess; tests build their own) and handed to the engine, which makes the runner from it
(``Engine.runner(context)``); the runner, its workers and its recorder read it, nobody
changes it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from agentcanvas.eval.config import DeterminismInfo, EpisodeResult, EvalConfig
from agentcanvas.eval.events import Broadcast
from agentcanvas.eval.store import RunDir
from agentcanvas.graph.model import Graph
from agentcanvas.server.registry import WorkspaceComponentRegistry

__all__ = ["RunContext"]


@dataclass(frozen=True)
class RunContext:
    """One run's inputs: where it runs, what it runs, where it writes, who listens."""

    registry: WorkspaceComponentRegistry
    """The run's catalogue, fleet and node-set handles."""
    graph: Graph
    """The graph to run (the runner freezes a copy of it)."""
    config: EvalConfig
    run_dir: RunDir
    run_id: str
    broadcast: Broadcast | None = field(default=None, kw_only=True)
    """Live events (episode done, progress, complete); None: nobody listens."""
    determinism: DeterminismInfo | None = field(default=None, kw_only=True)
    """The determinism block measured at start (None: an empty one)."""
    previous: Sequence[EpisodeResult] = field(default=(), kw_only=True)
    """On resume: the episodes already recorded (they are not run again)."""
