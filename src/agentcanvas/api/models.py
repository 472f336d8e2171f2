"""What the API accepts and how it refuses: the request base model, path parameters, errors.

Every request body derives from :class:`RequestModel`: strict types (``"10"``, ``true`` and
``"yes"`` are not numbers or booleans), finite floats only (JSON ``1e999`` parses as
infinity), unknown fields refused. Every path parameter that names something on disk carries
its pattern from :data:`agentcanvas.paths.NAME_PATTERNS`, so the OpenAPI schema says what is
allowed and a mismatch is a 422 before any handler runs. Every refusal has the body of
:class:`ErrorBody`, documented on each route through :func:`error_responses`.
"""

from __future__ import annotations

from typing import Annotated, Any, Final

from fastapi import Path
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from agentcanvas.paths import NAME_PATTERNS

__all__ = [
    "MAX_EPISODE_INDEX",
    "MAX_SEED",
    "TASK_PATTERN",
    "AssetName",
    "EpisodeIndex",
    "ErrorBody",
    "GraphName",
    "JsonInt",
    "NodeSetName",
    "Problem",
    "RequestModel",
    "RunId",
    "StepBudget",
    "error_responses",
    "integral",
]

MAX_EPISODE_INDEX: Final = 999_999_999  # nine digits, as NAME_PATTERNS["episode"]
MAX_SEED: Final = 2**53 - 1  # exact in a JSON number read as a double (the web page, JS)


TASK_PATTERN: Final = r"^[A-Za-z0-9][A-Za-z0-9_.:/+=-]{0,127}$"  # e.g. ALE/Pong-v5


def integral(value: Any) -> Any:
    """JSON Schema counts 2.0 as an integer: take it as 2 (2.5, "2" and true stay refused)."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


JsonInt = Annotated[int, BeforeValidator(integral)]
"""An integer field of a request: strict, except that an integral JSON number is one."""
# Bounds before the validator, or an optional field's schema loses them (pydantic 2.14).
StepBudget = Annotated[int, Field(ge=1, le=10_000_000), BeforeValidator(integral)]


class RequestModel(BaseModel):
    """Base of every request body: strict, finite, closed."""

    model_config = ConfigDict(strict=True, allow_inf_nan=False, extra="forbid")


class Problem(BaseModel):
    """One thing wrong with a request."""

    field: str = Field(description="The field, dotted, without its location (for forms).")
    location: str = Field(description="Where: body.<field>, path.<param> or query.<param>.")
    message: str


class ErrorBody(BaseModel):
    """The body of every 4xx answer."""

    detail: str = Field(description="What is wrong, naming the field, and how to fix it.")
    error: str | None = Field(default=None, description="The error's class, when one was raised.")
    problems: list[Problem] | None = Field(
        default=None, description="Validation failures, one per field (422 only)."
    )


_WHAT: Final[dict[int, str]] = {
    400: "A value the schema allows but the backend refuses (an overlay folder outside the "
    "workspace, a graph that does not validate...); the detail names the field.",
    403: "Foreign Host or Origin, or a missing token.",
    404: "No such run, episode, asset, graph or node set.",
    409: "The request conflicts with the current state (e.g. a run already finished).",
    413: "The request body is larger than the limit.",
    422: "The request does not match its schema (the detail names each field).",
    507: "The outputs disk is full (the detail names the disk and its free space); nothing "
    "was written. Free space there and try again.",
}


def error_responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    """``responses=`` for a route: each code with its description and :class:`ErrorBody`."""
    return {code: {"model": ErrorBody, "description": _WHAT[code]} for code in codes}


def _name_param(kind: str, description: str) -> Any:
    pattern = NAME_PATTERNS[kind]
    return Path(pattern=pattern, max_length=256, description=f"{description} ({pattern})")


RunId = Annotated[str, _name_param("run_id", "A run id")]
NodeSetName = Annotated[str, _name_param("nodeset", "A node-set name")]
GraphName = Annotated[str, _name_param("graph", "A graph name; '..' is refused")]
AssetName = Annotated[str, _name_param("asset", "A file in the episode's assets; '..' refused")]
EpisodeIndex = Annotated[
    int, Path(ge=0, le=MAX_EPISODE_INDEX, description="The episode's index in the run.")
]
