"""Admission: which queued jobs may start now. Plain synchronous code, no event loop.

Rules (design note § 3, with priority honoured):
- nothing starts while the canvas holds the ExecutionGuard;
- an exclusive-GPU job starts only when nothing runs, and nothing starts while one runs;
- per resource, the job's estimate must fit what is left:
  - memory (``ram``, ``vram``, in MB), measured: ``estimate ≤ free − Σ reservations``
    (reservation = the part of a running job's estimate not yet visible in its measured use);
  - CPU (``cpu``, in cores × oversubscription), measured: a running job holds its whole
    estimate (its processes) for its lifetime, whatever it uses at the moment, and only the
    load of other processes is subtracted (``free + Σ used − Σ estimates``);
  - a declared capacity is a ledger: ``estimate ≤ capacity − Σ estimates``; it alone decides
    where a resource cannot be measured, and caps the measured figure where it can;
- the queue always makes progress: when none of our jobs runs (none running, none started
  earlier in the same decision), the first job in queue order that fits memory starts
  whatever the CPU reading says. CPU is elastic — a busy machine, or a job larger than the
  budget, only makes runs slower — while memory is not;
- a job that does not fit is skipped, not blocking; order is priority (high first), then
  FIFO within a priority;
- but a job that has waited ``STARVATION_WAIT_S`` or longer holds its reservation while it
  waits, so a stream of smaller jobs behind it cannot starve it forever (a reservation is
  not a running job: it never stops the progress rule above);
- a job that waits for something besides this host's resources (``waits_for``: its shared
  models still loading, or, for a Ray-engine job on a cluster, its placement group) waits
  with that reason and holds nothing of this host, however long it has waited.

A waiting job's reason says in plain words what it waits for, naming the first resource
that refuses it (memory before CPU), e.g. ``waiting for memory: this run needs 900 MB of
RAM, 500 MB are free`` or ``waiting for CPU: this run asks for 2 cores, 0.2 are free (other
processes use the rest); it starts at the latest when no other run of this queue is
running``. "Cores" there are the CPU budget's units: each core counts ``oversubscription``
times (``--cpu-oversubscription``), and a run asks for one per process.
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
    ``capacity[r]``: a declared capacity of ``r`` (the ledger; for ``cpu``, the total)."""
    decision = Decision()
    if canvas_locked:
        for job in queued:
            decision.waiting[job.run_id] = job.waits_for or "canvas holds the execution guard"
        return decision
    ours = list(running)  # running, and started by this decision
    claims: list[RunningLoad] = []  # reservations of jobs that have waited too long
    for job in queue_order(queued):
        if job.waits_for:  # not ready: this host keeps nothing aside for it
            decision.waiting[job.run_id] = job.waits_for
            continue
        reason = _blocked(job, ours, claims, free, capacity)
        if reason:
            if job.waited_s >= STARVATION_WAIT_S:  # later jobs may not take what it needs
                claims.append(RunningLoad(job.run_id, job.estimates, {}, job.exclusive_gpu))
                reason += (
                    f"; it has waited {job.waited_s:.0f} s, so runs queued after it may not "
                    "take what it needs (it holds its reservation)"
                )
            decision.waiting[job.run_id] = reason
            continue
        decision.start.append(job.run_id)
        ours.append(RunningLoad(job.run_id, job.estimates, {}, job.exclusive_gpu))
    return decision


def _blocked(
    job: JobDemand,
    ours: Sequence[RunningLoad],
    claims: Sequence[RunningLoad],
    free: Mapping[str, float | None],
    capacity: Mapping[str, float],
) -> str | None:
    if any(r.exclusive_gpu for r in ours):
        return "waiting for the GPU: an exclusive-GPU run is running; it starts after that one"
    if any(r.exclusive_gpu for r in claims):
        return "waiting for the GPU: an exclusive-GPU run queued before it goes first"
    if job.exclusive_gpu and (ours or claims):
        return (
            "waiting for the GPU: this run asks for it alone (exclusive_gpu); it starts once "
            "no other run of this queue is running"
        )
    load = [*ours, *claims]
    for resource in sorted(job.estimates, key=_check_rank):
        need = job.estimates[resource]
        budget = _budget(resource, load, free.get(resource), capacity.get(resource))
        if budget is None or need <= 0.0 or need <= budget:  # needing none of it always fits
            continue
        if resource in HELD_RESOURCES and not ours:
            continue  # elastic, and none of ours runs: start rather than wait for ever
        return _shortfall(resource, need, budget, load, free.get(resource), capacity)
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


_MEMORY_WORDS = {"ram": ("memory", "RAM"), "vram": ("GPU memory", "VRAM")}


def _shortfall(
    resource: str,
    need: float,
    budget: float,
    load: Sequence[RunningLoad],
    free: float | None,
    capacity: Mapping[str, float],
) -> str:
    """Why ``need`` does not fit ``budget``, in plain words."""
    left = max(budget, 0.0)
    held = sum(r.estimates.get(resource, 0.0) for r in load)
    if resource == "cpu":
        return _cpu_shortfall(need, left, load, free, capacity.get("cpu"))
    what, unit = _MEMORY_WORDS.get(resource, (resource, resource))
    reason = f"waiting for {what}: this run needs {need:.0f} MB of {unit}, {left:.0f} MB are free"
    declared = capacity.get(resource)
    if declared is not None and declared - held <= budget:
        holders = f", runs of this queue hold {held:.0f} MB" if held > 0 else ""
        reason += f" (of the {declared:.0f} MB declared{holders})"
    elif load and (kept := sum(r.reservation(resource) for r in load)) > 0:
        reason += f" (besides {kept:.0f} MB kept for runs of this queue that may still use it)"
    return reason


def _cpu_shortfall(
    need: float,
    left: float,
    load: Sequence[RunningLoad],
    free: float | None,
    total: float | None,
) -> str:
    held = sum(r.estimates.get("cpu", 0.0) for r in load)
    used = sum(r.used.get("cpu", 0.0) for r in load)
    parts = []
    if held > 0:
        parts.append(f"{_cores(held)} held by runs of this queue")
    outside = None if free is None or total is None else max(0.0, total - free - used)
    if outside is None or outside >= 0.05:
        others = "the rest" if outside is None or not parts else _cores(outside)
        parts.append(f"other processes use {others}")
    free_now = _cores(left)
    return (
        f"waiting for CPU: this run asks for {_cores(need, 'core')}, {free_now} "
        f"{'is' if free_now == '1' else 'are'} free ({', '.join(parts)}); it starts at the "
        "latest when no other run of this queue is running"
    )


def _cores(value: float, noun: str = "") -> str:
    """``value`` to a tenth (``2``, ``0.5``), followed by ``noun`` in the right number."""
    figure = f"{value:.1f}".removesuffix(".0")
    if not noun:
        return figure
    return f"{figure} {noun}" + ("" if figure == "1" else "s")
