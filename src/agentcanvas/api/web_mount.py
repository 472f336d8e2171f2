"""The web page's static files, mounted at ``/`` without shadowing the API.

A plain ``Mount("/")`` matches every path, so ``GET /api/eval/v2/start`` or an unknown
``/api/...`` path fell through to the static files (a 404 or 405 from them, not the API's).
:class:`WebMount` declines API paths, so the router answers them itself: 405 with ``Allow``
for a known path with another method, a JSON 404 for an unknown one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from starlette.routing import Match, Mount
from starlette.staticfiles import StaticFiles
from starlette.types import Scope

__all__ = ["API_PREFIXES", "WebMount", "web_mount"]

API_PREFIXES: Final = ("/api/", "/api", "/ws", "/openapi.json", "/docs", "/redoc")


def _is_api(path: str) -> bool:
    return any(path == p or path.startswith(p.rstrip("/") + "/") for p in API_PREFIXES)


class WebMount(Mount):
    """A mount at ``/`` that does not match API paths."""

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        if scope.get("type") == "http" and _is_api(str(scope.get("path", ""))):
            return Match.NONE, {}
        return super().matches(scope)


def web_mount(folder: Path) -> WebMount:
    """The web page's files under ``/`` (``index.html`` for ``/``)."""
    return WebMount("/", app=StaticFiles(directory=folder, html=True), name="web")
