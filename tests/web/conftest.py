"""Fixtures of the dashboard's browser tests: one Chromium per module, a fresh page per test
whose uncaught script errors fail the test (tests/support/browser.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from support.browser import CHROMIUM, NO_CHROMIUM, checked_page, chromium_browser


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not CHROMIUM.exists():
        pytest.skip(NO_CHROMIUM)
    pytest.importorskip("playwright.sync_api")
    with chromium_browser() as chromium:
        yield chromium


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    """A fresh page at desktop size; uncaught script errors fail the test."""
    with checked_page(browser) as page:
        yield page
