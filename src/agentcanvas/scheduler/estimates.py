"""What a queued run is expected to need, per resource, and where each figure comes from.

- ``cpu``: its processes (the eval process and one env server per worker), in slots; a
  Ray-engine run on a cluster has only its eval process here (its workers' CPUs are in its
  placement group, which the cluster reserves);
- ``ram``: the calibrated peak of earlier runs of the same graph content and worker count
  (``CalibrationStore``), else a default by worker count;
- ``vram``: what the submitter declared (``marginal_vram_mb``), or the calibrated peak when
  that is larger. A calibration below the declaration never replaces it: the submitter may
  know of memory a short earlier run never reached. Each figure says which rule chose it, and
  ``/api/eval/v2/queue`` shows that.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from agentcanvas.scheduler.calibration import SAFETY_MARGIN, CalibrationStore
from agentcanvas.scheduler.cpu import run_cpu_slots

__all__ = [
    "DEFAULT_RAM_MB_BASE",
    "DEFAULT_RAM_MB_PER_WORKER",
    "Estimate",
    "JobShape",
    "estimate_job",
    "explained",
]

DEFAULT_RAM_MB_BASE = 600.0  # an eval subprocess with no calibration yet
DEFAULT_RAM_MB_PER_WORKER = 250.0  # one env server per worker

Source = Literal["calibrated", "declared", "default", "processes"]


@dataclass(frozen=True)
class Estimate:
    """One resource's figure for admission (MB, or slots for ``cpu``) and its origin."""

    value: float
    unit: Literal["MB", "slots"]
    source: Source
    why: str

    def as_json(self) -> dict[str, object]:
        return {"value": self.value, "unit": self.unit, "source": self.source, "why": self.why}


@dataclass(frozen=True)
class JobShape:
    """What of a run the estimates depend on."""

    graph_key: str
    worker_count: int
    declared_vram_mb: float
    on_cluster: bool = False
    """Engine ray with a cluster address: its workers run on the cluster, not here."""

    @property
    def local_workers(self) -> int:
        """Workers whose processes run on this host."""
        return 0 if self.on_cluster else self.worker_count


def estimate_job(
    shape: JobShape, resources: Iterable[str], calibration: CalibrationStore
) -> dict[str, Estimate]:
    """The figure for each of ``resources`` (those the scheduler measures or has a capacity
    for); a resource none of the rules knows is left out."""
    estimates: dict[str, Estimate] = {}
    for resource in sorted(set(resources)):
        if resource == "cpu":
            estimates[resource] = _cpu(shape)
            continue
        calibrated = calibration.estimate_mb(shape.graph_key, shape.worker_count, resource)
        if resource == "vram":
            estimates[resource] = _vram(shape, calibrated)
        elif resource == "ram":
            estimates[resource] = _ram(shape, calibrated)
    return estimates


def explained(estimates: dict[str, Estimate]) -> dict[str, dict[str, object]]:
    """Estimates as JSON for ``/api/eval/v2/queue``: figure, unit, source and why."""
    return {resource: e.as_json() for resource, e in sorted(estimates.items())}


def _cpu(shape: JobShape) -> Estimate:
    slots = run_cpu_slots(shape.local_workers)
    why = f"its processes: the eval process and {shape.worker_count} env server(s)"
    if shape.on_cluster:
        why = "its eval process; its workers are reserved on the Ray cluster"
    return Estimate(slots, "slots", "processes", why)


def _calibrated_why(calibrated: float) -> str:
    return (
        f"peak {calibrated / SAFETY_MARGIN:.0f} MB of earlier runs of this graph content "
        f"and worker count, × {SAFETY_MARGIN:g}"
    )


def _ram(shape: JobShape, calibrated: float | None) -> Estimate:
    if calibrated is not None:
        return Estimate(calibrated, "MB", "calibrated", _calibrated_why(calibrated))
    value = DEFAULT_RAM_MB_BASE + DEFAULT_RAM_MB_PER_WORKER * shape.local_workers
    why = (
        f"no completed run of this graph content and worker count yet: "
        f"{DEFAULT_RAM_MB_BASE:.0f} MB + {DEFAULT_RAM_MB_PER_WORKER:.0f} MB per worker"
    )
    if shape.on_cluster:
        why = (
            f"no completed run of this graph content and worker count yet: "
            f"{DEFAULT_RAM_MB_BASE:.0f} MB for its eval process (its workers are on the cluster)"
        )
    return Estimate(value, "MB", "default", why)


def _vram(shape: JobShape, calibrated: float | None) -> Estimate:
    declared = shape.declared_vram_mb
    if calibrated is None:
        why = "declared by the submitter; no completed run of this graph content yet"
        return Estimate(declared, "MB", "declared", why)
    if calibrated > declared:
        why = f"{_calibrated_why(calibrated)}; above the {declared:.0f} MB declared"
        return Estimate(calibrated, "MB", "calibrated", why)
    why = (
        f"declared by the submitter; the calibrated {calibrated:.0f} MB is lower, and a "
        f"calibration never undercuts a declaration"
    )
    return Estimate(declared, "MB", "declared", why)
