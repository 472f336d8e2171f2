"""A 405 whose ``Allow`` lists every method of the path, not only the first route's.

Starlette answers a method no route of a path takes with the ``Allow`` of the first route that
matched the path; a path served by two routes (``GET`` and ``PATCH /runs/{run_id}/meta``)
would then claim to take ``GET`` only. This handler answers with the methods the OpenAPI
schema documents for the path (FastAPI nests included routers, so the schema is where every
route of a path is listed).
"""

from __future__ import annotations

import re

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

__all__ = ["install_method_not_allowed"]


_PARAM = re.compile(r"\\\{[^/]+?\\\}")


def _allowed(app: FastAPI, path: str) -> list[str]:
    methods: set[str] = set()
    for template, operations in app.openapi().get("paths", {}).items():
        if re.fullmatch(_PARAM.sub("[^/]+", re.escape(template)), path):
            methods |= {method.upper() for method in operations}
    return sorted(methods)


def install_method_not_allowed(app: FastAPI) -> None:
    """Register the 405 handler on ``app`` (other HTTP errors keep FastAPI's answer)."""

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
        headers = dict(exc.headers or {})
        if exc.status_code == 405:
            allowed = _allowed(app, request.url.path)
            if allowed:
                headers["Allow"] = ", ".join(allowed)
        return JSONResponse({"detail": exc.detail}, status_code=exc.status_code, headers=headers)
