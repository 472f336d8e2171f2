"""Markers by folder: ``slow`` for tests that start backends, browsers or clusters, ``browser``
for the dashboard's Chromium tests.

``make test`` runs everything; ``make test-fast`` (``pytest -m "not slow"``) is the inner loop.
A module elsewhere that is slow says so itself with ``pytestmark = pytest.mark.slow``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

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
