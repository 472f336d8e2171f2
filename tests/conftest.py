"""Markers by folder: ``slow`` for tests that start backends, browsers or clusters, ``browser``
for the dashboard's Chromium tests.

``make test`` runs everything; ``make test-fast`` (``pytest -m "not slow"``) is the inner loop.
A module elsewhere that is slow says so itself with ``pytestmark = pytest.mark.slow``.
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


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        folder = Path(item.path).relative_to(TESTS).parts[0]
        if folder in SLOW_FOLDERS:
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
