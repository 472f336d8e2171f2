"""Debian's Chromium driven by Playwright, for the dashboard's browser tests.

The browser is /usr/bin/chromium (``apt-get install -y chromium``; Playwright's own download
cannot work offline); without it the browser tests skip. Screenshots go to
``test-artifacts/screenshots/`` at the repository root (git-ignored).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
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


def shot(page: Any, name: str) -> Path:
    """A full-page screenshot ``name``.png in the artifacts folder; its path."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path
