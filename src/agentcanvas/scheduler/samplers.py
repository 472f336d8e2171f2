"""Which resource samplers a backend uses: RAM and CPU always, VRAM when there is some.

Kept apart from ``resources`` and ``cpu`` (both samplers live there) so that neither has to
import the other to build the list.
"""

from __future__ import annotations

import math
import os

from agentcanvas.errors import ConfigError
from agentcanvas.scheduler.cpu import DEFAULT_CPU_OVERSUBSCRIPTION, CpuSampler
from agentcanvas.scheduler.resources import (
    FAKE_VRAM_ENV,
    FakeVramSampler,
    NvmlVramSampler,
    RamSampler,
    ResourceSampler,
)

__all__ = ["default_samplers"]


def default_samplers(cpu_oversubscription: float | None = None) -> list[ResourceSampler]:
    """RAM and CPU always; VRAM from ``AGENTCANVAS_FAKE_VRAM_MB`` if set, else NVML if a GPU
    exists. ``cpu_oversubscription``: CPU slots per core (default
    ``cpu.DEFAULT_CPU_OVERSUBSCRIPTION``)."""
    if cpu_oversubscription is None:
        cpu_oversubscription = DEFAULT_CPU_OVERSUBSCRIPTION
    samplers: list[ResourceSampler] = [RamSampler(), CpuSampler(cpu_oversubscription)]
    fake_total = os.environ.get(FAKE_VRAM_ENV)
    if fake_total is not None and fake_total.strip():
        samplers.append(FakeVramSampler(_parse_fake_total(fake_total)))
    elif NvmlVramSampler.available():
        samplers.append(NvmlVramSampler())
    return samplers


def _parse_fake_total(raw: str) -> float:
    try:
        total = float(raw)
    except ValueError:
        total = math.nan
    if not math.isfinite(total) or total <= 0:
        raise ConfigError(f"{FAKE_VRAM_ENV} must be a positive number of MB, got {raw!r}")
    return total
