"""Markers by folder: ``slow`` for tests that start backends, browsers or clusters, ``browser``
for the dashboard's Chromium tests.

``make test`` runs everything; ``make test-fast`` (``pytest -m "not slow"``) is the inner loop.
Slow modules outside those folders (real runs through servers or subprocesses, taking seconds
each) are listed in ``SLOW_MODULES``; add a module there when its tests start real runs, and
move its entry with it (a name that no longer exists stops the session).
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.backend import Backend

TESTS = Path(__file__).parent
SLOW_FOLDERS = {"integration", "web", "cluster"}
BROWSER_FOLDERS = {"web"}
SLOW_MODULES = {
    "api/test_api_validation.py",
    "api/test_app_shutdown.py",
    "api/test_compare_guards.py",
    "api/test_downloads.py",
    "api/test_episode_video.py",
    "api/test_idempotency.py",
    "api/test_large_runs.py",
    "api/test_leaderboard.py",
    "api/test_live_progress.py",
    "api/test_openapi_schemathesis.py",
    "api/test_overlay_rest.py",
    "api/test_start_checks.py",
    "api/test_start_options.py",
    "api/test_tampered_run_folders.py",
    "cli/test_cli_backend.py",
    "cli/test_cli_eval.py",
    "cli/test_cli_run_health.py",
    "cli/test_cli_run_meta.py",
    "eval/test_batch_audit_runs.py",
    "eval/test_crash_consistency.py",
    "eval/test_frames_runner.py",
    "eval/test_interrupt.py",
    "eval/test_retry.py",
    "eval/test_invariance_builtin.py",
    "eval/test_runlock.py",
    "eval/test_runner.py",
    "eval/test_slow_local_node.py",
    "eval/test_step_timeouts.py",
    "eval/test_supervision.py",
    "eval/test_termination.py",
    "eval/test_work_stealing.py",
    "models/test_text_encoder.py",  # MiniLM at every batch size and position, two thread counts
    "models/test_text_encoder_server.py",
    "server/test_call_deadlines.py",  # waits out real call deadlines of hung servers
    "server/test_shared_slow_node.py",
}


def pytest_configure(config: pytest.Config) -> None:
    """A slow module that moved would silently lose its mark: its old name is refused."""
    missing = sorted(m for m in SLOW_MODULES if not (TESTS / m).is_file())
    missing += sorted(f for f in SLOW_FOLDERS | BROWSER_FOLDERS if not (TESTS / f).is_dir())
    if missing:
        raise pytest.UsageError(f"tests/conftest.py marks files that do not exist: {missing}")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        relative = Path(item.path).relative_to(TESTS)
        folder = relative.parts[0]
        if folder in SLOW_FOLDERS or relative.as_posix() in SLOW_MODULES:
            item.add_marker(pytest.mark.slow)
        if folder in BROWSER_FOLDERS:
            item.add_marker(pytest.mark.browser)


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Processes a test starts: killed (their whole group when they lead one) and reaped at
    the end, whatever happened."""
    started: list[subprocess.Popen[bytes]] = []
    try:
        yield started
    finally:
        for proc in started:
            if proc.poll() is None:
                if os.getpgid(proc.pid) == proc.pid:
                    os.killpg(proc.pid, signal.SIGKILL)
                else:
                    proc.kill()
            proc.wait(30)


@pytest.fixture
def backends() -> Iterator[list[Backend]]:
    """Backends a test starts, each stopped (and its process tree killed) at the end."""
    started: list[Backend] = []
    try:
        yield started
    finally:
        for backend in started:
            backend.close()
