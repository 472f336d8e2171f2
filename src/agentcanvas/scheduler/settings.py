"""The backend's admission settings: from ``serve`` flags, else the environment, validated.

- ``--cpu-oversubscription X`` or ``AGENTCANVAS_CPU_OVERSUBSCRIPTION``: CPU slots per core
  (default ``2.0``);
- ``--vram-capacity-mb MB`` or ``AGENTCANVAS_VRAM_CAPACITY_MB``: the VRAM all runs together
  may hold (default: none, VRAM is only measured).

A flag wins over its variable. A bad value (not a finite number > 0) is a ``ConfigError``
naming the flag or the variable, so ``serve`` exits 1 before it binds anything.
``AGENTCANVAS_FAKE_VRAM_MB`` (``resources.FAKE_VRAM_ENV``) is checked here too.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass

from agentcanvas.errors import ConfigError
from agentcanvas.scheduler.cpu import DEFAULT_CPU_OVERSUBSCRIPTION
from agentcanvas.scheduler.resources import FAKE_VRAM_ENV

__all__ = ["CPU_OVERSUBSCRIPTION_ENV", "VRAM_CAPACITY_ENV", "AdmissionSettings"]

CPU_OVERSUBSCRIPTION_ENV = "AGENTCANVAS_CPU_OVERSUBSCRIPTION"
VRAM_CAPACITY_ENV = "AGENTCANVAS_VRAM_CAPACITY_MB"


@dataclass(frozen=True)
class AdmissionSettings:
    """How much the scheduler may admit: CPU slots per core, and a declared VRAM capacity."""

    cpu_oversubscription: float = DEFAULT_CPU_OVERSUBSCRIPTION
    vram_capacity_mb: float | None = None
    """The VRAM all runs together may hold (MB): the only limit where VRAM cannot be
    measured, a cap on the measured figure where it can."""

    @classmethod
    def resolve(
        cls,
        cpu_oversubscription: str | None = None,
        vram_capacity_mb: str | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> AdmissionSettings:
        """Flag values (raw text, ``None`` when not given), else the environment's."""
        env = os.environ if environ is None else environ
        fake = env.get(FAKE_VRAM_ENV, "").strip()
        if fake:
            _positive(fake, FAKE_VRAM_ENV, "MB of the fake GPU, e.g. 24000")
        oversubscription = _pick(
            cpu_oversubscription,
            "--cpu-oversubscription",
            env,
            CPU_OVERSUBSCRIPTION_ENV,
            "CPU slots per core, e.g. 2.0",
        )
        capacity = _pick(
            vram_capacity_mb,
            "--vram-capacity-mb",
            env,
            VRAM_CAPACITY_ENV,
            "MB of GPU memory runs may hold, e.g. 24000",
        )
        return cls(
            cpu_oversubscription=(
                DEFAULT_CPU_OVERSUBSCRIPTION if oversubscription is None else oversubscription
            ),
            vram_capacity_mb=capacity,
        )

    def capacity_mb(self) -> dict[str, float]:
        """The declared capacities for admission's ledger."""
        return {} if self.vram_capacity_mb is None else {"vram": self.vram_capacity_mb}


def _pick(
    flag_value: str | None, flag: str, env: Mapping[str, str], variable: str, what: str
) -> float | None:
    if flag_value is not None:
        return _positive(flag_value, flag, what)
    raw = env.get(variable, "").strip()
    return _positive(raw, variable, what) if raw else None


def _positive(raw: str, name: str, what: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise ConfigError(f"{name}: must be a number > 0 ({what}), got {raw!r}")
    return value
