"""Debian's Chromium driven by Playwright, for the dashboard's browser tests.

``browser_session`` is a generator for a module-scoped fixture (one browser per module);
``new_page`` opens a fresh context whose uncaught script errors are collected, and ``shot``
saves a full-page screenshot under ``test-artifacts/screenshots/`` (repo root, git-ignored).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]
SCREENSHOTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "screenshots"
UI_TIMEOUT_MS = 15_000
NO_CHROMIUM = f"{CHROMIUM} is missing (install it: apt-get install -y chromium)"


def browser_session() -> Iterator[Any]:
    """A launched Chromium (import Playwright only when a test needs it)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


def new_page(browser: Any, width: int = 1400, height: int = 1000) -> tuple[Any, list[str]]:
    """A page in a fresh context, and the list its uncaught script errors go to."""
    context = browser.new_context(viewport={"width": width, "height": height})
    page = context.new_page()
    page.set_default_timeout(UI_TIMEOUT_MS)
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    return page, errors


def shot(page: Any, name: str) -> Path:
    """A full-page screenshot ``name``.png in the test-artifacts folder; its path."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path
