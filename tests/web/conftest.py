"""Fixtures of the dashboard's browser tests: one Chromium per module, a fresh page per test
whose uncaught script errors fail the test."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from support.browser import CHROMIUM, CHROMIUM_ARGS, DESKTOP, NO_CHROMIUM, UI_TIMEOUT_MS


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not CHROMIUM.exists():
        pytest.skip(NO_CHROMIUM)
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    """A fresh page at desktop size; uncaught script errors fail the test."""
    context = browser.new_context(viewport=DESKTOP)
    page = context.new_page()
    page.set_default_timeout(UI_TIMEOUT_MS)
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    yield page
    context.close()
    assert not errors, f"uncaught errors in the page: {errors}"
