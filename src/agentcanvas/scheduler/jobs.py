"""The scheduler's record of a run (a :class:`Job`, with its lifecycle), its hooks into the
backend, and what a queued run's spec decides for it: its calibration key, its placement on a
Ray cluster, the environment of its eval process.

A job's lifecycle (one table, :data:`_JOB_MOVES`; :meth:`Job.move_to` is the only way its
state changes, :class:`JobStateError` the error for a wrong move)::

    loading ──► queued ──► running ──► cancelling ──► ended
       │          │           └───────────────────────► ended
       └──────────┴──────────────────────────────────► ended  (cancelled or failed before
                                                                 it ran)

``loading``: the backend starts the shared node sets (models) the run borrows, off the
event loop and off the request that queued it (``api.shared_loads``); the run is ``queued``
for everyone else, and waits with a reason that names them.

A job is the scheduler's view of one submission; the run's own status (summary.json) has
its lifecycle in :mod:`agentcanvas.eval.run_state`. A resumed run is a new job.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agentcanvas.cluster.placement import PlacementPlan, plan_placement
from agentcanvas.errors import StateError
from agentcanvas.eval.run_spec import RunSpec
from agentcanvas.eval.store import RunDir
from agentcanvas.scheduler.calibration import graph_fingerprint
from agentcanvas.scheduler.estimates import Estimate, explained
from agentcanvas.scheduler.resources import ProcessTreeMonitor
from agentcanvas.server.procs import ChildProcess

__all__ = [
    "Job",
    "JobState",
    "JobStateError",
    "RunningJob",
    "SchedulerHooks",
    "calibration_key",
    "queued_view",
    "running_view",
]


class JobState(enum.Enum):
    """Where a job is in the scheduler."""

    LOADING = "loading"
    """Queued; the backend starts the shared node sets it borrows (admission waits)."""
    QUEUED = "queued"
    """Waiting for admission."""
    RUNNING = "running"
    """Its eval process runs."""
    CANCELLING = "cancelling"
    """Asked to cancel (SIGINT to its eval process); killed when its grace period ends."""
    ENDED = "ended"
    """Out of the scheduler: reaped, cancelled or failed before it ran, or left at shutdown."""


_JOB_MOVES: dict[JobState, frozenset[JobState]] = {
    JobState.LOADING: frozenset({JobState.QUEUED, JobState.ENDED}),
    JobState.QUEUED: frozenset({JobState.RUNNING, JobState.ENDED}),
    JobState.RUNNING: frozenset({JobState.CANCELLING, JobState.ENDED}),
    JobState.CANCELLING: frozenset({JobState.ENDED}),
    JobState.ENDED: frozenset(),
}


class JobStateError(StateError):
    """A job was asked to move between two states its lifecycle does not connect."""


@dataclass
class Job:
    """One submission of a run to the scheduler (mirrors its spec.json scheduling block)."""

    run_id: str
    run_dir: RunDir
    graph_name: str
    graph_key: str
    worker_count: int
    priority: int
    seq: float
    marginal_vram_mb: float
    exclusive_gpu: bool
    shared_urls: dict[str, str]
    """The backend's shared servers it holds (refcounted), by node set: its shared_urls.json."""
    loading: list[str] = field(default_factory=list)
    """Shared node sets the backend still starts for it (state ``loading``)."""
    active_workspace_dir: str | None = None
    ray_address: str | None = None
    placement: PlacementPlan | None = None
    """Engine ray on a cluster: the placement group it waits for (None: admitted locally)."""
    state: JobState = field(default=JobState.QUEUED)

    def move_to(self, new: JobState) -> None:
        """Change the job's state; JobStateError when its lifecycle has no such move."""
        if new is not self.state and new not in _JOB_MOVES[self.state]:
            raise JobStateError(
                f"job of run {self.run_id} cannot go from {self.state.value} to {new.value}"
            )
        self.state = new

    @property
    def shared_nodesets(self) -> list[str]:
        """The shared node sets it holds (released when it ends)."""
        return sorted(self.shared_urls)

    def waiting_for_models(self) -> str | None:
        """What a ``loading`` job waits for, in plain words (None once loaded)."""
        if self.state is not JobState.LOADING:
            return None
        names = ", ".join(self.loading)
        return f"loading the shared model{'s' if len(self.loading) > 1 else ''} {names}"

    @classmethod
    def from_spec(cls, run_dir: RunDir, spec: RunSpec, shared_urls: dict[str, str]) -> Job:
        """A job of ``spec``; it holds ``shared_urls`` and is ``loading`` while the spec's
        other shared node sets are to be started for it."""
        config, scheduling = spec.config, spec.scheduling
        on_cluster = config.engine == "ray" and bool(config.ray_address)
        loading = [n for n in spec.shared_nodesets if n not in shared_urls]
        return cls(
            state=JobState.LOADING if loading else JobState.QUEUED,
            run_id=run_dir.root.name,
            run_dir=run_dir,
            graph_name=config.graph_name,
            graph_key=calibration_key(spec),
            worker_count=config.worker_count,
            priority=scheduling.priority,
            seq=scheduling.submitted_at or time.time(),
            marginal_vram_mb=scheduling.marginal_vram_mb,
            exclusive_gpu=scheduling.exclusive_gpu,
            shared_urls=dict(shared_urls),
            loading=loading,
            active_workspace_dir=spec.active_workspace_dir,
            ray_address=config.ray_address if on_cluster else None,
            placement=(
                plan_placement(config.worker_count, scheduling.model_resources)
                if on_cluster
                else None
            ),
        )


@dataclass
class RunningJob:
    """A job whose eval process was spawned: the process, its measured tree, its figures."""

    job: Job
    child: ChildProcess
    monitor: ProcessTreeMonitor
    estimates: dict[str, Estimate]
    started_at: float
    kill_at: float | None = None
    last_summary_mtime: float = 0.0


@dataclass
class SchedulerHooks:
    """Callbacks into the backend: the canvas lock, shared refcounts, progress events."""

    canvas_locked: Callable[[], bool] = lambda: False
    release_shared: Callable[[list[str]], None] = lambda names: None
    drain_unloads: Callable[[], None] = lambda: None
    on_progress: Callable[[str, dict[str, Any]], None] = lambda run_id, summary: None
    on_finished: Callable[[str, str], None] = lambda run_id, status: None


def calibration_key(spec: RunSpec) -> str:
    """Graph content, and the engine for Ray runs: a Ray run's eval process tree is not a
    local run's (on a cluster its workers are elsewhere), so neither calibrates the other."""
    key = graph_fingerprint(spec.graph)
    config = spec.config
    if config.engine != "ray":
        return key
    return f"{key}+ray" + ("-cluster" if config.ray_address else "")


def queued_view(
    job: Job, reason: str, estimates: dict[str, Estimate], placement: dict[str, Any] | None
) -> dict[str, Any]:
    """A queued job as ``GET /api/eval/v2/queue`` shows it."""
    return {
        "run_id": job.run_id,
        "graph_name": job.graph_name,
        "priority": job.priority,
        "worker_count": job.worker_count,
        "waiting_reason": reason,
        "loading": list(job.loading),
        "estimates": explained(estimates),
        "placement": placement,
    }


def running_view(running: RunningJob, placement: dict[str, Any] | None) -> dict[str, Any]:
    """A running job as ``GET /api/eval/v2/queue`` shows it."""
    job = running.job
    return {
        "run_id": job.run_id,
        "graph_name": job.graph_name,
        "pid": running.child.pid,
        "priority": job.priority,
        "worker_count": job.worker_count,
        "started_at": running.started_at,
        "estimates_mb": {k: e.value for k, e in running.estimates.items() if e.unit == "MB"},
        "estimates": explained(running.estimates),
        "placement": placement,
    }
