"""Markers by folder: ``slow`` for tests that start backends, browsers or clusters, ``browser``
for the dashboard's Chromium tests.

``make test`` runs everything, on pytest-xdist workers (``work_unit``: whole modules, and the
cluster folder, where every test starts Ray, on one worker); ``make test-fast`` (``pytest -m
"not slow"``) is the inner loop, and does not even import the slow modules. Slow modules outside
those folders (real runs through servers or subprocesses, taking seconds each) are listed in
``SLOW_MODULES``; add a module there when its tests start real runs, and move its entry with it
(a name that no longer exists stops the session).
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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
    "api/test_failures_retry_api.py",
    "api/test_idempotency.py",
    "api/test_large_runs.py",
    "api/test_leaderboard.py",
    "api/test_live_progress.py",
    "api/test_openapi_schemathesis.py",
    "api/test_overlay_rest.py",
    "api/test_run_meta_api.py",
    "api/test_start_checks.py",
    "api/test_start_options.py",
    "api/test_tampered_run_folders.py",
    "cli/test_cli.py",
    "cli/test_cli_backend.py",
    "cli/test_cli_eval.py",
    "cli/test_cli_eval_view.py",
    "cli/test_cli_run_health.py",
    "cli/test_cli_run_meta.py",
    "cli/test_cli_validate.py",
    "cli/test_compare_gate.py",
    "cli/test_failures_retry.py",
    "cli/test_run_names.py",
    "cli/test_run_options.py",
    "cli/test_submit_retry.py",
    "eval/test_batch_audit_runs.py",
    "eval/test_crash_consistency.py",
    "eval/test_frames_runner.py",
    "eval/test_interrupt.py",
    "eval/test_invariance_builtin.py",
    "eval/test_retry.py",
    "eval/test_runlock.py",
    "eval/test_runner.py",
    "eval/test_slow_local_node.py",
    "eval/test_step_timeouts.py",
    "eval/test_supervision.py",
    "eval/test_termination.py",
    "eval/test_work_stealing.py",
    "models/test_text_encoder.py",  # MiniLM at every batch size and position, two thread counts
    "models/test_text_encoder_server.py",
    "nodesets/test_metaworld.py",  # MuJoCo envs made and stepped in most of its tests
    "server/test_call_deadlines.py",  # waits out real call deadlines of hung servers
    "server/test_nodeset_isolation.py",
    "server/test_shared_slow_node.py",
    "test_export.py",
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


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """``-m "not slow"`` deselects every test of a slow folder or module, so it does not
    import them either (some take seconds to collect)."""
    if config.getoption("markexpr") != "not slow" or not collection_path.is_relative_to(TESTS):
        return None
    relative = collection_path.relative_to(TESTS)
    if relative.parts and relative.parts[0] in SLOW_FOLDERS:
        return True
    return True if relative.as_posix() in SLOW_MODULES else None


def work_unit(nodeid: str) -> str:
    """What one pytest-xdist worker runs whole, in order: a module (so its module-scoped
    fixtures, a backend or finished runs, are made once), and the cluster folder, where every
    test starts Ray, as one unit (two Ray clusters never start side by side)."""
    module = nodeid.split("::", 1)[0]
    return "cluster" if module.removeprefix("tests/").startswith("cluster/") else module


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist (`make test` runs with -n)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    from xdist.scheduler import LoadScopeScheduling

    class ByWorkUnit(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

    return ByWorkUnit(config, log)


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
