"""Calibrated memory estimates per (graph content, worker count), persisted as one JSON file.

After a run, the scheduler records the peak memory its process tree used
(``ProcessTreeMonitor.peaks_mb``). Admission then asks ``estimate_mb``: the largest of the
last few peaks times ``SAFETY_MARGIN``, or ``None`` while calibration is incomplete (no
observation yet), in which case the run's declared size is used instead.

The key is the frozen graph's content (``graph_fingerprint`` of the graph JSON a run's spec
holds), not its name: two different graphs saved under one name, or a graph edited between
runs, never share peaks. The name is kept beside the key for people reading the file.
A file of version 1 (keyed by name) is set aside: its peaks cannot be matched to content.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final, Literal

from pydantic import BaseModel, Field, ValidationError

from agentcanvas.errors import RunError
from agentcanvas.fileio import atomic_write_json

__all__ = [
    "CALIBRATION_FILE_VERSION",
    "DEFAULT_MAX_OBSERVATIONS",
    "SAFETY_MARGIN",
    "CalibrationStore",
    "graph_fingerprint",
]

logger = logging.getLogger(__name__)

CALIBRATION_FILE_VERSION: Final = 2
SAFETY_MARGIN = 1.2
"""Estimates are the recent peak times this factor: peaks vary between runs."""
DEFAULT_MAX_OBSERVATIONS = 5


def graph_fingerprint(graph_json: Mapping[str, Any]) -> str:
    """A short hash of a frozen graph's JSON (key order and spacing do not count)."""
    text = json.dumps(graph_json, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class _CalibrationEntry(BaseModel):
    """The recent peaks of one (graph content, worker count), oldest first."""

    graph_key: str = Field(min_length=1)
    """``graph_fingerprint`` of the frozen graph."""
    graph_name: str = ""
    worker_count: int = Field(ge=1)
    observations: list[dict[str, float]]
    """One dict per finished run: resource (``ram``, ``vram``) → peak MB."""


class _CalibrationFile(BaseModel):
    """On-disk layout of the calibration store."""

    version: Literal[2] = CALIBRATION_FILE_VERSION
    entries: list[_CalibrationEntry] = Field(default_factory=list)


_Key = tuple[str, int]


class CalibrationStore:
    """Recent peak memory per (graph_key, worker_count), saved after every ``record``.

    ``graph_key`` is ``graph_fingerprint`` of the frozen graph JSON.
    """

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
        self._names: dict[str, str] = {}
        self._observations: dict[_Key, list[dict[str, float]]] = self._load()

    def record(
        self,
        graph_key: str,
        worker_count: int,
        peaks_mb: dict[str, float],
        graph_name: str = "",
    ) -> None:
        """Add one run's peaks, keep the last ``max_observations``, and save."""
        if worker_count < 1:
            raise ValueError(f"worker_count must be >= 1, got {worker_count}")
        if not graph_key:
            raise ValueError("graph_key must not be empty")
        peaks = {k: float(v) for k, v in peaks_mb.items() if math.isfinite(v) and v >= 0}
        if not peaks:
            return
        if graph_name:
            self._names[graph_key] = graph_name
        recent = self._observations.setdefault((graph_key, worker_count), [])
        recent.append(peaks)
        del recent[: -self.max_observations]
        self._save()

    def estimate_mb(self, graph_key: str, worker_count: int, resource: str) -> float | None:
        """Max recent peak of ``resource`` times the margin; ``None`` when never observed."""
        recent = self._observations.get((graph_key, worker_count), [])
        peaks = [obs[resource] for obs in recent if resource in obs]
        if not peaks:
            return None
        return max(peaks) * self.safety_margin

    def observations(self, graph_key: str, worker_count: int) -> list[dict[str, float]]:
        """The recent peaks kept for this key, oldest first (a copy)."""
        return [dict(obs) for obs in self._observations.get((graph_key, worker_count), [])]

    def _load(self) -> dict[_Key, list[dict[str, float]]]:
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return {}
        except OSError as exc:
            logger.warning("cannot read calibration %s (%s); starting empty", self.path, exc)
            return {}
        if _version_of(raw) == 1:
            self._move_aside(None)
            return {}
        try:
            data = _CalibrationFile.model_validate_json(raw)
        except ValidationError as exc:
            self._move_aside(exc)
            return {}
        self._names = {e.graph_key: e.graph_name for e in data.entries if e.graph_name}
        return {
            (e.graph_key, e.worker_count): e.observations[-self.max_observations :]
            for e in data.entries
        }

    def _move_aside(self, exc: Exception | None) -> None:
        """A corrupt file (``exc``), or one of version 1 (``None``), is renamed, not lost."""
        kind = "corrupt" if exc is not None else "v1"
        aside = self.path.with_name(f"{self.path.name}.{kind}-{time.time_ns()}")
        try:
            os.replace(self.path, aside)
        except OSError as move_exc:
            logger.warning("calibration %s could not be moved: %s", self.path, move_exc)
            return
        if exc is None:
            logger.warning(
                "calibration file %s is keyed by graph name (version 1); moved to %s, "
                "starting empty: peaks are now kept per graph content",
                self.path,
                aside,
            )
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
                _CalibrationEntry(
                    graph_key=key,
                    graph_name=self._names.get(key, ""),
                    worker_count=workers,
                    observations=obs,
                )
                for (key, workers), obs in sorted(self._observations.items())
            ]
        )
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_json(self.path, data.model_dump(mode="json"))
        except (OSError, RunError) as exc:
            # Calibration only sharpens admission; losing it must not stop the scheduler.
            logger.warning("cannot save calibration %s: %s", self.path, exc)


def _version_of(raw: bytes) -> object:
    """The ``version`` of a calibration file's JSON object, ``None`` if it has none."""
    try:
        data = json.loads(raw)
    except ValueError:
        return None
    return data.get("version") if isinstance(data, dict) else None
