"""Headless Debian Chromium through Playwright, and screenshots into test-artifacts/.

Browser tests skip when /usr/bin/chromium is missing (``apt-get install -y chromium``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
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
    "--autoplay-policy=no-user-gesture-required",
]
NO_CHROMIUM = f"{CHROMIUM} is missing (install it: apt-get install -y chromium)"
SCREENSHOTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "screenshots"
UI_TIMEOUT_MS = 15_000


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
def checked_page(browser: Any, width: int = 1400, height: int = 1000) -> Iterator[Any]:
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


def shot(page: Any, name: str) -> Path:
    """A full-page screenshot as test-artifacts/screenshots/<name>.png; its path."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path
