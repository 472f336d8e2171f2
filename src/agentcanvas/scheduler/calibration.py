"""Calibrated memory estimates per (graph, worker count), persisted as one JSON file.

After a run, the scheduler records the peak memory its process tree used
(``ProcessTreeMonitor.peaks_mb``). Admission then asks ``estimate_mb``: the largest of the
last few peaks times ``SAFETY_MARGIN``, or ``None`` while calibration is incomplete (no
observation yet), in which case the run's declared size is used instead.
"""

from __future__ import annotations

import logging
import math
import os
import time
from pathlib import Path
from typing import Final, Literal

from pydantic import BaseModel, Field, ValidationError

from agentcanvas.errors import RunError
from agentcanvas.eval.store import atomic_write_json

__all__ = [
    "CALIBRATION_FILE_VERSION",
    "DEFAULT_MAX_OBSERVATIONS",
    "SAFETY_MARGIN",
    "CalibrationStore",
]

logger = logging.getLogger(__name__)

CALIBRATION_FILE_VERSION: Final = 1
SAFETY_MARGIN = 1.2
"""Estimates are the recent peak times this factor: peaks vary between runs."""
DEFAULT_MAX_OBSERVATIONS = 5


class _CalibrationEntry(BaseModel):
    """The recent peaks of one (graph, worker count), oldest first."""

    graph_name: str
    worker_count: int = Field(ge=1)
    observations: list[dict[str, float]]
    """One dict per finished run: resource (``ram``, ``vram``) → peak MB."""


class _CalibrationFile(BaseModel):
    """On-disk layout of the calibration store."""

    version: Literal[1] = CALIBRATION_FILE_VERSION
    entries: list[_CalibrationEntry] = Field(default_factory=list)


_Key = tuple[str, int]


class CalibrationStore:
    """Recent peak memory per (graph_name, worker_count), saved after every ``record``."""

    def __init__(
        self,
        path: Path,
        *,
        max_observations: int = DEFAULT_MAX_OBSERVATIONS,
        safety_margin: float = SAFETY_MARGIN,
    ) -> None:
        if max_observations < 1:
            raise ValueError(f"max_observations must be >= 1, got {max_observations}")
        self.path = Path(path)
        self.max_observations = max_observations
        self.safety_margin = safety_margin
        self._observations: dict[_Key, list[dict[str, float]]] = self._load()

    def record(self, graph_name: str, worker_count: int, peaks_mb: dict[str, float]) -> None:
        """Add one run's peaks, keep the last ``max_observations``, and save."""
        if worker_count < 1:
            raise ValueError(f"worker_count must be >= 1, got {worker_count}")
        peaks = {k: float(v) for k, v in peaks_mb.items() if math.isfinite(v) and v >= 0}
        if not peaks:
            return
        recent = self._observations.setdefault((graph_name, worker_count), [])
        recent.append(peaks)
        del recent[: -self.max_observations]
        self._save()

    def estimate_mb(self, graph_name: str, worker_count: int, resource: str) -> float | None:
        """Max recent peak of ``resource`` times the margin; ``None`` when never observed."""
        recent = self._observations.get((graph_name, worker_count), [])
        peaks = [obs[resource] for obs in recent if resource in obs]
        if not peaks:
            return None
        return max(peaks) * self.safety_margin

    def observations(self, graph_name: str, worker_count: int) -> list[dict[str, float]]:
        """The recent peaks kept for this key, oldest first (a copy)."""
        return [dict(obs) for obs in self._observations.get((graph_name, worker_count), [])]

    def _load(self) -> dict[_Key, list[dict[str, float]]]:
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return {}
        except OSError as exc:
            logger.warning("cannot read calibration %s (%s); starting empty", self.path, exc)
            return {}
        try:
            data = _CalibrationFile.model_validate_json(raw)
        except ValidationError as exc:
            self._move_aside(exc)
            return {}
        return {
            (e.graph_name, e.worker_count): e.observations[-self.max_observations :]
            for e in data.entries
        }

    def _move_aside(self, exc: Exception) -> None:
        aside = self.path.with_name(f"{self.path.name}.corrupt-{time.time_ns()}")
        try:
            os.replace(self.path, aside)
        except OSError as move_exc:
            logger.warning("corrupt calibration %s could not be moved: %s", self.path, move_exc)
            return
        logger.warning(
            "calibration file %s is corrupt (%s); moved to %s, starting empty",
            self.path,
            str(exc).splitlines()[0],
            aside,
        )

    def _save(self) -> None:
        data = _CalibrationFile(
            entries=[
                _CalibrationEntry(graph_name=g, worker_count=w, observations=obs)
                for (g, w), obs in sorted(self._observations.items())
            ]
        )
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_json(self.path, data.model_dump(mode="json"))
        except (OSError, RunError) as exc:
            # Calibration only sharpens admission; losing it must not stop the scheduler.
            logger.warning("cannot save calibration %s: %s", self.path, exc)
