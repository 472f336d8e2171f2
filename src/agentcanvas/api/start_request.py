"""StartRequest: the body of ``POST /api/eval/v2/start``.

Its run options are :class:`~agentcanvas.eval.config.EvalConfig`'s fields, declared there
once: each comes with its type, range, description and default, under its own name, so a
field added to the config is a field of the start body without a line here. What the REST
body adds to a field is only what an untrusted JSON body needs and a config read from a
trusted file does not: the bounds in :data:`REST_LIMITS` (a graph name or run id pattern,
caps that keep numbers exact in JSON), and integers that accept ``2.0`` (JSON Schema calls it
an integer) while refusing ``"2"`` and ``true`` (the body is strict). Left out, with why:
:data:`NOT_OPTIONS`.

The body's other fields say how the run is queued and named (:class:`StartScheduling`):
``priority``, ``marginal_vram_mb``, ``exclusive_gpu``, ``via_subprocess``,
``active_workspace_dir``, ``name``, ``tags``, ``note``.
"""

from __future__ import annotations

import types
import typing
from typing import TYPE_CHECKING, Annotated, Any, Final, Union

from pydantic import BeforeValidator, Field, create_model
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from agentcanvas.eval.config import EvalConfig
from agentcanvas.eval.run_meta import RunName, RunNote, RunTags
from agentcanvas.paths import NAME_PATTERNS

from .models import (
    MAX_EPISODE_INDEX,
    MAX_SEED,
    TASK_PATTERN,
    JsonInt,
    RequestModel,
    integral,
)
from .overlay import OVERLAY_PATTERN

__all__ = [
    "MAX_TASKS",
    "NOT_OPTIONS",
    "REST_LIMITS",
    "RUN_OPTIONS",
    "StartRequest",
    "StartScheduling",
]

MAX_TASKS: Final = 1000
MAX_TIMEOUT_S: Final = 86_400.0
NOT_OPTIONS: Final[dict[str, str]] = {
    "version": "the config's format version, which the backend writes; not a run option",
}
"""EvalConfig fields a start body does not take, and why."""
REST_LIMITS: Final[dict[str, FieldInfo]] = {
    "graph_name": Field(max_length=64, pattern=NAME_PATTERNS["graph"]),
    "tasks": Field(min_length=1, max_length=MAX_TASKS, json_schema_extra={"uniqueItems": True}),
    "start_index": Field(le=MAX_EPISODE_INDEX),
    "step_budget": Field(le=10_000_000),
    "seed": Field(le=MAX_SEED),
    "per_step_timeout_s": Field(le=MAX_TIMEOUT_S),
    "episode_timeout_s": Field(le=MAX_TIMEOUT_S),
    "until_decided_vs": Field(pattern=NAME_PATTERNS["run_id"]),
}
"""What a JSON body adds to a config field's own rules: patterns of names, and bounds."""
_ITEM_TYPES: Final[dict[str, Any]] = {
    "tasks": list[Annotated[str, Field(pattern=TASK_PATTERN)]],
}
"""Element types a body checks per element (a task id is a name, not any string)."""
RUN_OPTIONS: Final = frozenset(EvalConfig.model_fields) - set(NOT_OPTIONS)
"""The body's fields that are EvalConfig's (its run options)."""


class StartScheduling(RequestModel):
    """How a run is queued and named (the start body's fields that are not run options)."""

    via_subprocess: bool = Field(
        default=True,
        description="Queue the run for an eval process of its own (default); false runs it "
        "inside the backend (the legacy path).",
    )
    priority: JsonInt = Field(
        default=0, ge=-100, le=100, description="Higher starts first; FIFO within a priority."
    )
    marginal_vram_mb: float = Field(
        default=0.0, ge=0, le=1e9, description="GPU memory the run needs beyond what runs now."
    )
    exclusive_gpu: bool = Field(
        default=False, description="Start only when nothing runs, and let nothing start beside."
    )
    active_workspace_dir: str | None = Field(
        default=None,
        min_length=1,
        max_length=1024,
        pattern=OVERLAY_PATTERN,
        description=(
            "A folder of graphs/ and graph_nodes/ inside the workspace, relative to it "
            "(names of letters, digits, '_', '-', '.', not starting with '.'; not outputs/): "
            "404 when there is no such folder."
        ),
    )
    name: RunName | None = Field(default=None, description="A short name for the run.")
    tags: RunTags | None = Field(default=None, description="Labels to filter runs by.")
    note: RunNote | None = Field(default=None, description="Free text about the run.")

    def run_options(self) -> dict[str, Any]:
        """The body's run options, by EvalConfig field name (an EvalConfig's keyword
        arguments)."""
        return self.model_dump(include=set(RUN_OPTIONS))


def _option(name: str, config_field: FieldInfo) -> tuple[Any, FieldInfo]:
    """The body's field for one EvalConfig field: its type with its rules and the REST
    limits, its default and description."""
    original = config_field.annotation
    optional = _optional(original)
    base = _without_none(original) if optional else original
    rules = [*config_field.metadata, *([REST_LIMITS[name]] if name in REST_LIMITS else [])]
    annotated: Any
    if base is int:  # its bounds before the validator, or an optional's schema loses them
        annotated = Annotated[(int, *rules, BeforeValidator(integral))]
        annotated = annotated | None if optional else annotated
    else:
        typed: Any = original
        if name in _ITEM_TYPES:
            typed = _ITEM_TYPES[name] | None if optional else _ITEM_TYPES[name]
        annotated = Annotated[(typed, *rules)] if rules else typed
    default: dict[str, Any] = {}
    if config_field.default_factory is not None:
        default["default_factory"] = config_field.default_factory
    elif config_field.default is not PydanticUndefined:
        default["default"] = config_field.default
    field: FieldInfo = Field(description=config_field.description, **default)
    return annotated, field


def _optional(annotation: Any) -> bool:
    origin = typing.get_origin(annotation)
    union = origin is Union or origin is types.UnionType
    return union and type(None) in typing.get_args(annotation)


def _without_none(annotation: Any) -> Any:
    kept = [a for a in typing.get_args(annotation) if a is not type(None)]
    result = kept[0]
    for other in kept[1:]:
        result = result | other
    return result


def _start_request() -> type[StartScheduling]:
    options: dict[str, Any] = {
        n: _option(n, f) for n, f in EvalConfig.model_fields.items() if n in RUN_OPTIONS
    }
    return create_model(
        "StartRequest",
        __base__=StartScheduling,
        __doc__="A run to queue: its run options (EvalConfig's fields) and how it is queued. "
        "Only ``graph_name`` is required.",
        __module__=__name__,
        **options,
    )


if TYPE_CHECKING:  # its run options are EvalConfig's, read through run_options()
    StartRequest = StartScheduling
else:
    StartRequest = _start_request()
