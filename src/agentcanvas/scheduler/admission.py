"""Admission: which queued jobs may start now. Plain synchronous code, no event loop.

Rules (design note § 3, with priority honoured):
- nothing starts while the canvas holds the ExecutionGuard;
- an exclusive-GPU job starts only when nothing runs, and nothing starts while one runs;
- per resource, the job's estimate must fit what is left:
  - memory (``ram``, ``vram``, in MB), measured: ``estimate ≤ free − Σ reservations``
    (reservation = the part of a running job's estimate not yet visible in its measured use);
  - CPU (``cpu``, in slots: cores × oversubscription), measured: a running job holds its
    whole estimate (its processes) for its lifetime, whatever it uses at the moment, and
    only the load of other processes is subtracted (``free + Σ used − Σ estimates``); when
    none of our jobs holds CPU, the next job is admitted whatever its size or the outside
    load, so a job larger than the budget, or a busy machine, cannot stall the queue;
  - a declared capacity is a ledger: ``estimate ≤ capacity − Σ estimates``; it alone decides
    where a resource cannot be measured, and caps the measured figure where it can;
- a job that does not fit is skipped, not blocking; order is priority (high first), then
  FIFO within a priority;
- but a job that has waited ``STARVATION_WAIT_S`` or longer holds its reservation while it
  waits, so a stream of smaller jobs behind it cannot starve it forever;
- a job that waits for something besides this host's resources (``waits_for``: its shared
  models still loading, or, for a Ray-engine job on a cluster, its placement group) waits
  with that reason and holds nothing of this host, however long it has waited.

A waiting job's reason names the first resource that refuses it (memory before CPU), e.g.
``ram: needs 900 MB, 500 MB available`` or ``cpu: needs 3 of 2 free slots``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

__all__ = [
    "HELD_RESOURCES",
    "STARVATION_WAIT_S",
    "Decision",
    "JobDemand",
    "RunningLoad",
    "decide",
    "queue_order",
]

STARVATION_WAIT_S = 300.0
HELD_RESOURCES = frozenset({"cpu"})
"""Resources a running job holds whole for its lifetime (see the module docstring)."""
_CHECK_ORDER = ("ram", "vram", "cpu")


@dataclass(frozen=True)
class JobDemand:
    """What a queued job needs, per resource (MB; slots for ``cpu``), and how it is ordered."""

    run_id: str
    priority: int
    seq: int
    estimates: Mapping[str, float]
    exclusive_gpu: bool = False
    waited_s: float = 0.0
    waits_for: str | None = None
    """What it waits for besides this host's resources, in plain words: the shared models
    the backend still loads for it, or its placement group on a Ray cluster (None: nothing)."""


@dataclass(frozen=True)
class RunningLoad:
    """A running job's estimate and current measured use, per resource."""

    run_id: str
    estimates: Mapping[str, float]
    used: Mapping[str, float]
    exclusive_gpu: bool = False

    def reservation(self, resource: str) -> float:
        """What admission keeps aside for this job beyond the measured free figure."""
        estimate = self.estimates.get(resource, 0.0)
        if resource in HELD_RESOURCES:
            return estimate
        return max(0.0, estimate - self.used.get(resource, 0.0))


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
    free: Mapping[str, float | None],
    capacity: Mapping[str, float],
    canvas_locked: bool,
) -> Decision:
    """Which jobs start now. ``free[r] is None``: resource ``r`` is not measurable;
    ``capacity[r]``: a declared capacity of ``r`` (the ledger)."""
    decision = Decision()
    if canvas_locked:
        for job in queued:
            decision.waiting[job.run_id] = job.waits_for or "canvas holds the execution guard"
        return decision
    load = list(running)
    for job in queue_order(queued):
        if job.waits_for:  # not ready: this host keeps nothing aside for it
            decision.waiting[job.run_id] = job.waits_for
            continue
        reason = _blocked(job, load, free, capacity)
        if reason:
            if job.waited_s >= STARVATION_WAIT_S:  # later jobs may not take what it needs
                load.append(RunningLoad(job.run_id, job.estimates, {}, job.exclusive_gpu))
                reason += f" (waiting {job.waited_s:.0f} s: holds its reservation)"
            decision.waiting[job.run_id] = reason
            continue
        decision.start.append(job.run_id)
        load.append(RunningLoad(job.run_id, job.estimates, {}, job.exclusive_gpu))
    return decision


def _blocked(
    job: JobDemand,
    load: Sequence[RunningLoad],
    free: Mapping[str, float | None],
    capacity: Mapping[str, float],
) -> str | None:
    if any(r.exclusive_gpu for r in load):
        return "an exclusive-GPU job is running"
    if job.exclusive_gpu and load:
        return "exclusive GPU: waiting for running jobs to finish"
    for resource in sorted(job.estimates, key=_check_rank):
        need = job.estimates[resource]
        budget = _budget(resource, load, free.get(resource), capacity.get(resource))
        if budget is None or need <= budget:
            continue
        if resource in HELD_RESOURCES and not any(r.estimates.get(resource) for r in load):
            continue  # nothing of ours holds it: run, rather than wait for ever
        return _shortfall(resource, need, budget)
    return None


def _check_rank(resource: str) -> tuple[int, str]:
    rank = _CHECK_ORDER.index(resource) if resource in _CHECK_ORDER else len(_CHECK_ORDER)
    return rank, resource


def _budget(
    resource: str, load: Sequence[RunningLoad], free: float | None, capacity: float | None
) -> float | None:
    """What is left of ``resource`` for one more job; ``None``: nothing constrains it."""
    held = sum(r.estimates.get(resource, 0.0) for r in load)
    budgets = []
    if free is not None:
        if resource in HELD_RESOURCES:  # add back our own jobs' use: they hold their estimate
            budgets.append(free + sum(r.used.get(resource, 0.0) for r in load) - held)
        else:
            budgets.append(free - sum(r.reservation(resource) for r in load))
    if capacity is not None:
        budgets.append(capacity - held)
    return min(budgets) if budgets else None


def _shortfall(resource: str, need: float, budget: float) -> str:
    left = max(budget, 0.0)
    if resource == "cpu":
        return f"cpu: needs {_slots(need)} of {_slots(left)} free slots"
    return f"{resource}: needs {need:.0f} MB, {left:.0f} MB available"


def _slots(value: float) -> str:
    return f"{value:.1f}".removesuffix(".0")
