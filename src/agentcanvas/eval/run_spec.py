"""RunSpec: spec.json, the input contract of a run (one versioned model, one reader, one writer).

Written by whoever creates a run folder (the REST submit path through the scheduler, the
foreground ``agentcanvas eval``), rewritten by the scheduler on submit and resume, and read by
restart recovery, the eval subprocess and resume. Every reader goes through
:meth:`RunSpec.read`, which refuses a damaged file with a :class:`ConfigError` naming the
field (``spec.json: config.episode_count: ...``).

The file's version is the ``version`` key, like every file of a run folder; the model calls it
``spec_version``. A spec written by an older version validates: every field added since has a
default. Adding a field is one line here with its default (``engine: Literal["local", "ray"]
= "local"``); fields this version does not know are kept on a rewrite (``extra="allow"``), so
an older backend resuming a newer run does not lose them.
"""

from __future__ import annotations

import math
from typing import Any, Final

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError

from agentcanvas.errors import ConfigError
from agentcanvas.eval.config import EvalConfig
from agentcanvas.eval.store import RunDir
from agentcanvas.fileio import atomic_write_json, read_json
from agentcanvas.graph.model import Graph, parse_graph
from agentcanvas.nodes.manifest import NodeSetResources

__all__ = ["SPEC_VERSION", "RunSpec", "SpecScheduling", "validation_problems"]

SPEC_VERSION: Final = 1
"""The version this code writes; it reads every version from 1 up to this one."""


class SpecScheduling(BaseModel):
    """The scheduling block (what admission reads)."""

    model_config = ConfigDict(extra="allow")

    priority: int = Field(default=0, ge=-100, le=100)
    marginal_vram_mb: float = Field(default=0.0, ge=0)
    exclusive_gpu: bool = False
    submitted_at: float | None = Field(
        default=None, description="Unix time of the (last) submit; FIFO order within a priority."
    )
    model_resources: dict[str, NodeSetResources] = Field(
        default_factory=dict,
        description="Engine ray: what each shared node set's actor reserves (its manifest's "
        "resources at submit); the run's placement group has a bundle for each.",
    )


class RunSpec(BaseModel):
    """spec.json: what a run is to do (config, scheduling block, frozen graph)."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    spec_version: int = Field(
        default=SPEC_VERSION,
        ge=1,
        le=SPEC_VERSION,
        validation_alias=AliasChoices("version", "spec_version"),
        serialization_alias="version",
        description="The file's format version (the ``version`` key on disk).",
    )
    run_id: str | None = Field(default=None, description="Set when the run folder is created.")
    config: EvalConfig
    scheduling: SpecScheduling = Field(default_factory=SpecScheduling)
    graph: dict[str, Any] = Field(description="The graph frozen at submit (Graph JSON).")
    shared_nodesets: list[str] = Field(
        default_factory=list, description="Shared node sets the run borrows from the backend."
    )
    active_workspace_dir: str | None = Field(
        default=None, description="An overlay workspace put before the base one for this run."
    )
    resume: bool = Field(default=False, description="Run only the episodes not yet recorded.")

    @classmethod
    def read(cls, run_dir: RunDir) -> RunSpec:
        """The run's spec.json, validated, graph included.

        RunError when it is missing or not JSON; ConfigError naming the field otherwise."""
        path = run_dir.spec_path
        data = read_json(path)
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: expected a JSON object, got {type(data).__name__}")
        _check_finite(data, "spec.json")
        try:
            spec = cls.model_validate(data)
        except ValidationError as exc:
            raise ConfigError(f"{path}: {validation_problems(exc)}") from exc
        spec.graph_model(source=f"{path} graph")
        return spec

    def write(self, run_dir: RunDir) -> None:
        """Rewrite the run's spec.json atomically."""
        atomic_write_json(run_dir.spec_path, self.to_json())

    def to_json(self) -> dict[str, Any]:
        """The JSON object written to disk."""
        return self.model_dump(mode="json", by_alias=True)

    def graph_model(self, source: str = "spec.json graph") -> Graph:
        """The frozen graph, parsed (ConfigError naming ``source`` when it does not validate)."""
        return parse_graph(self.graph, source=source)


def validation_problems(exc: ValidationError) -> str:
    """``field.path: message`` for each error, joined by ``; ``."""
    return "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())


def _check_finite(value: Any, where: str) -> None:
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{where}: {value} is not a finite number")
    if isinstance(value, dict):
        for key, item in value.items():
            _check_finite(item, f"{where}.{key}")
    elif isinstance(value, list):
        for position, item in enumerate(value):
            _check_finite(item, f"{where}[{position}]")
