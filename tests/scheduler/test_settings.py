"""Admission settings from ``serve`` flags and the environment, validated; bad ones exit 1."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agentcanvas.errors import ConfigError
from agentcanvas.scheduler.settings import (
    CPU_OVERSUBSCRIPTION_ENV,
    VRAM_CAPACITY_ENV,
    AdmissionSettings,
)
from support.cli import run_cli

CLI_DEADLINE_S = 60.0


def test_defaults_without_flags_or_environment() -> None:
    settings = AdmissionSettings.resolve(environ={})

    assert settings == AdmissionSettings(cpu_oversubscription=2.0, vram_capacity_mb=None)
    assert settings.capacity_mb() == {}


def test_environment_is_read_and_a_flag_wins_over_it() -> None:
    env = {CPU_OVERSUBSCRIPTION_ENV: "1.5", VRAM_CAPACITY_ENV: " 24000 "}

    from_env = AdmissionSettings.resolve(environ=env)
    from_flags = AdmissionSettings.resolve("3", "1000", environ=env)

    assert (from_env.cpu_oversubscription, from_env.vram_capacity_mb) == (1.5, 24_000.0)
    assert from_env.capacity_mb() == {"vram": 24_000.0}
    assert (from_flags.cpu_oversubscription, from_flags.vram_capacity_mb) == (3.0, 1_000.0)


@pytest.mark.parametrize("raw", ["lots", "0", "-2", "nan", "inf", ""])
def test_a_bad_flag_is_named(raw: str) -> None:
    with pytest.raises(ConfigError, match=r"^--vram-capacity-mb: must be a number > 0"):
        AdmissionSettings.resolve(vram_capacity_mb=raw, environ={})
    with pytest.raises(ConfigError, match=r"^--cpu-oversubscription: must be a number > 0"):
        AdmissionSettings.resolve(cpu_oversubscription=raw, environ={})


@pytest.mark.parametrize(
    "variable", [CPU_OVERSUBSCRIPTION_ENV, VRAM_CAPACITY_ENV, "AGENTCANVAS_FAKE_VRAM_MB"]
)
def test_a_bad_variable_is_named(variable: str) -> None:
    with pytest.raises(ConfigError, match=f"^{variable}: must be a number > 0"):
        AdmissionSettings.resolve(environ={variable: "-5"})


def test_serve_exits_1_naming_a_bad_flag(tmp_path: Path) -> None:
    done = run_cli(
        "serve",
        "--port",
        "0",
        "--vram-capacity-mb",
        "lots",
        workspace=tmp_path,
        timeout_s=CLI_DEADLINE_S,
    )

    assert done.returncode == 1, done.stderr
    assert "--vram-capacity-mb: must be a number > 0" in done.stderr
    assert "Traceback" not in done.stderr


def test_serve_exits_1_naming_a_bad_variable(tmp_path: Path) -> None:
    env = {**os.environ, CPU_OVERSUBSCRIPTION_ENV: "0"}

    done = run_cli("serve", "--port", "0", workspace=tmp_path, timeout_s=CLI_DEADLINE_S, env=env)

    assert done.returncode == 1, done.stderr
    assert f"{CPU_OVERSUBSCRIPTION_ENV}: must be a number > 0" in done.stderr
    assert "Traceback" not in done.stderr
