"""The scheduler's records of a run (queued, running), its hooks into the backend, and what a
queued run's spec decides for it: its calibration key, its placement on a Ray cluster, the
environment of its eval process."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agentcanvas.cluster.placement import PLACEMENT_GROUP_ENV, PlacementPlan, plan_placement
from agentcanvas.eval.run_spec import RunSpec
from agentcanvas.eval.store import RunDir
from agentcanvas.scheduler.calibration import graph_fingerprint
from agentcanvas.scheduler.estimates import Estimate
from agentcanvas.scheduler.resources import ProcessTreeMonitor
from agentcanvas.server.procs import ChildProcess

__all__ = ["QueuedJob", "RunningJob", "SchedulerHooks", "calibration_key", "child_env"]


@dataclass
class QueuedJob:
    """A run waiting for admission (mirrors its spec.json scheduling block)."""

    run_id: str
    run_dir: RunDir
    graph_name: str
    graph_key: str
    worker_count: int
    priority: int
    seq: float
    marginal_vram_mb: float
    exclusive_gpu: bool
    shared_nodesets: list[str]
    active_workspace_dir: str | None = None
    ray_address: str | None = None
    placement: PlacementPlan | None = None
    """Engine ray on a cluster: the placement group it waits for (None: admitted locally)."""

    @classmethod
    def from_spec(cls, run_dir: RunDir, spec: RunSpec) -> QueuedJob:
        config, scheduling = spec.config, spec.scheduling
        on_cluster = config.engine == "ray" and bool(config.ray_address)
        return cls(
            run_id=run_dir.root.name,
            run_dir=run_dir,
            graph_name=config.graph_name,
            graph_key=calibration_key(spec),
            worker_count=config.worker_count,
            priority=scheduling.priority,
            seq=scheduling.submitted_at or time.time(),
            marginal_vram_mb=scheduling.marginal_vram_mb,
            exclusive_gpu=scheduling.exclusive_gpu,
            shared_nodesets=list(spec.shared_nodesets),
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
    job: QueuedJob
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


def child_env(active_workspace_dir: str | None, placement_group: str | None) -> dict[str, str]:
    """The eval process's environment: ours, its overlay, and the placement group reserved
    for it (its actors go there)."""
    env = dict(os.environ)
    if active_workspace_dir:
        env["ACTIVE_WORKSPACE_DIR"] = active_workspace_dir
    env.pop(PLACEMENT_GROUP_ENV, None)
    if placement_group:
        env[PLACEMENT_GROUP_ENV] = placement_group
    return env
