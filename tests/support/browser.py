"""Debian's Chromium driven by Playwright, for the dashboard's browser tests.

The browser is /usr/bin/chromium (``apt-get install -y chromium``; Playwright's own download
cannot work offline); without it the browser tests skip. Screenshots go to
``test-artifacts/screenshots/`` at the repository root (git-ignored). ``tests/web/conftest.py``
turns ``chromium_browser`` and ``checked_page`` into the ``browser`` and ``page`` fixtures;
``open_route`` opens a page of a backend's dashboard once its WebSocket is live.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from support.backend import Backend

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
    "--autoplay-policy=no-user-gesture-required",
]
NO_CHROMIUM = f"{CHROMIUM} is missing (install it: apt-get install -y chromium)"
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
SCREENSHOTS = ARTIFACTS / "screenshots"
UI_TIMEOUT_MS = 15_000
DESKTOP = {"width": 1400, "height": 1000}


def require_websocket_support() -> None:
    """Without websockets or wsproto, uvicorn answers the /ws upgrade with 404."""
    if not any(importlib.util.find_spec(name) for name in ("websockets", "wsproto")):
        pytest.fail("uvicorn has no WebSocket library: /ws cannot work; install 'websockets'")


@contextmanager
def chromium_browser() -> Iterator[Any]:
    """A launched Chromium (Playwright's sync API), closed on exit."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


@contextmanager
def checked_page(
    browser: Any, width: int = DESKTOP["width"], height: int = DESKTOP["height"]
) -> Iterator[Any]:
    """A fresh page in its own context; an uncaught script error fails the test."""
    context = browser.new_context(
        viewport={"width": width, "height": height}, accept_downloads=True
    )
    page = context.new_page()
    page.set_default_timeout(UI_TIMEOUT_MS)
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        yield page
    finally:
        context.close()
    assert not errors, f"uncaught errors in the page: {errors}"


def open_route(page: Any, backend: Backend, route: str) -> None:
    """Open the dashboard of ``backend`` at ``route`` (``#/``, ``#/run/<id>``, …) and wait
    until its WebSocket is live, so that pushed updates reach the page from then on."""
    page.goto(f"{backend.url}/{route}")
    page.wait_for_selector("#live-status[data-state='live']")


def shot(page: Any, name: str) -> Path:
    """A full-page screenshot as test-artifacts/screenshots/<name>.png; its path."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path
