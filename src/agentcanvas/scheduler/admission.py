"""Admission: which queued jobs may start now. Plain synchronous code, no event loop.

Rules (design note § 3, with priority honoured):
- nothing starts while the canvas holds the ExecutionGuard;
- an exclusive-GPU job starts only when nothing runs, and nothing starts while one runs;
- per measurable resource, the job's estimate must fit: ``estimate ≤ free − Σ reservations``
  (reservation = the part of a running job's estimate not yet visible in its measured use);
  where a resource cannot be measured, a static ledger against a declared capacity is used;
- a job that does not fit is skipped, not blocking; order is priority (high first), then
  FIFO within a priority;
- but a job that has waited ``STARVATION_WAIT_S`` or longer holds its reservation while it
  waits, so a stream of smaller jobs behind it cannot starve it forever.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class JobDemand:
    """What a queued job needs, per resource (MB), and how it is ordered."""

    run_id: str
    priority: int
    seq: int
    estimates_mb: Mapping[str, float]
    exclusive_gpu: bool = False
    waited_s: float = 0.0


STARVATION_WAIT_S = 300.0


@dataclass(frozen=True)
class RunningLoad:
    """A running job's estimate and current measured use, per resource (MB)."""

    run_id: str
    estimates_mb: Mapping[str, float]
    used_mb: Mapping[str, float]
    exclusive_gpu: bool = False

    def reservation(self, resource: str) -> float:
        return max(0.0, self.estimates_mb.get(resource, 0.0) - self.used_mb.get(resource, 0.0))


@dataclass
class Decision:
    """Jobs to start now, and why each other job waits."""

    start: list[str] = field(default_factory=list)
    waiting: dict[str, str] = field(default_factory=dict)


def queue_order(jobs: Sequence[JobDemand]) -> list[JobDemand]:
    """Priority first (higher first), FIFO (submission sequence) within a priority."""
    return sorted(jobs, key=lambda j: (-j.priority, j.seq))


def decide(
    queued: Sequence[JobDemand],
    running: Sequence[RunningLoad],
    free_mb: Mapping[str, float | None],
    capacity_mb: Mapping[str, float],
    canvas_locked: bool,
) -> Decision:
    """Which jobs start now. ``free_mb[r] is None``: resource ``r`` is not measurable."""
    decision = Decision()
    if canvas_locked:
        for job in queued:
            decision.waiting[job.run_id] = "canvas holds the execution guard"
        return decision
    load = list(running)
    for job in queue_order(queued):
        reason = _blocked(job, load, free_mb, capacity_mb)
        if reason:
            if job.waited_s >= STARVATION_WAIT_S:  # later jobs may not take what it needs
                load.append(RunningLoad(job.run_id, job.estimates_mb, {}, job.exclusive_gpu))
                reason += f" (waiting {job.waited_s:.0f} s: holds its reservation)"
            decision.waiting[job.run_id] = reason
            continue
        decision.start.append(job.run_id)
        load.append(RunningLoad(job.run_id, job.estimates_mb, {}, job.exclusive_gpu))
    return decision


def _blocked(
    job: JobDemand,
    load: Sequence[RunningLoad],
    free_mb: Mapping[str, float | None],
    capacity_mb: Mapping[str, float],
) -> str | None:
    if any(r.exclusive_gpu for r in load):
        return "an exclusive-GPU job is running"
    if job.exclusive_gpu and load:
        return "exclusive GPU: waiting for running jobs to finish"
    for resource, need in sorted(job.estimates_mb.items()):
        free = free_mb.get(resource)
        if free is None:  # static ledger: declared capacity minus declared estimates
            if resource not in capacity_mb:
                continue
            budget = capacity_mb[resource] - sum(r.estimates_mb.get(resource, 0.0) for r in load)
        else:
            budget = free - sum(r.reservation(resource) for r in load)
        if need > budget:
            return f"{resource}: needs {need:.0f} MB, {max(budget, 0.0):.0f} MB available"
    return None
