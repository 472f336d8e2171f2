"""How refusals are answered: one JSON shape (:class:`~.models.ErrorBody`) for every 4xx.

Errors from agentcanvas's tree map by class (:data:`STATUS_BY_TYPE`: not found → 404, a
damaged run-folder file → 422, bad input → 400, wrong state → 409, a node-set server out of
protocol → 502, a full outputs disk → 507); anything else is a real bug and stays a 500.
Validation errors name the field with its location
(``body.episode_count: Input should be a valid integer``).
"""

from __future__ import annotations

from typing import Any, Final

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from agentcanvas.errors import (
    AgentCanvasError,
    DamagedRunError,
    DiskFullError,
    NotFoundError,
    ProtocolError,
    StateError,
    UserInputError,
)

__all__ = ["STATUS_BY_TYPE", "install_error_handlers", "problem_of", "status_of"]

MAX_SHOWN_INPUT = 80
_NOT_AN_OBJECT = frozenset({"missing", "model_attributes_type", "dict_type", "model_type"})


STATUS_BY_TYPE: Final[tuple[tuple[type[AgentCanvasError], int], ...]] = (
    (NotFoundError, 404),  # before its base, UserInputError
    (DamagedRunError, 422),  # a run folder's file off its model; before UserInputError
    (UserInputError, 400),
    (StateError, 409),
    (ProtocolError, 502),  # a node-set server answered out of protocol (or another version)
    (DiskFullError, 507),  # Insufficient Storage: the outputs disk is full; nothing was written
)
"""The status of each branch of the exception tree, most specific first; the rest is a 500."""


def status_of(exc: AgentCanvasError) -> int:
    """The HTTP status of an agentcanvas error, by its class (never by its message)."""
    return next((status for kind, status in STATUS_BY_TYPE if isinstance(exc, kind)), 500)


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= MAX_SHOWN_INPUT else f"{text[:MAX_SHOWN_INPUT]}... ({len(text)})"


def problem_of(item: dict[str, Any]) -> dict[str, str]:
    """One validation error as {field, location, message}, the message fit to be read."""
    loc = [str(p) for p in item.get("loc", ())]
    kind, ctx = item.get("type", ""), item.get("ctx") or {}
    message = str(item.get("msg", ""))
    if kind == "json_invalid":
        position = loc[1] if len(loc) > 1 else "?"
        message = f"invalid JSON at position {position}: {ctx.get('error', message)}"
        loc = loc[:1]
    elif loc == ["body"] and kind in _NOT_AN_OBJECT:
        message = "a JSON object is required"
    elif kind == "string_pattern_mismatch":
        message = f"{_shown(item.get('input'))} does not match the pattern {ctx.get('pattern')}"
    field = ".".join(loc[1:]) if loc[:1] in (["body"], ["path"], ["query"]) else ".".join(loc)
    return {"field": field, "location": ".".join(loc), "message": message}


def install_error_handlers(app: FastAPI) -> None:
    """Register the handlers of agentcanvas errors and of request validation."""

    @app.exception_handler(AgentCanvasError)
    async def agentcanvas_error(request: Request, exc: AgentCanvasError) -> JSONResponse:
        body = {"detail": str(exc), "error": type(exc).__name__}
        return JSONResponse(body, status_code=status_of(exc))

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = [problem_of(dict(item)) for item in exc.errors()]
        text = "; ".join(f"{p['location']}: {p['message']}" for p in problems)
        return JSONResponse({"detail": text, "problems": problems}, status_code=422)
