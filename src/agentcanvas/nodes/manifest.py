"""Node-set manifests: what a node set declares about itself.

A manifest is data (pydantic), so it travels over HTTP unchanged: a node-set server serves its
manifest, and a borrower builds proxies from it without importing the node set's code.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = [
    "MANIFEST_VERSION",
    "FieldKind",
    "FieldSpec",
    "LoadInfo",
    "MetricKind",
    "MetricSpec",
    "NodeSetManifest",
    "NodeTypeSpec",
    "PanelSpec",
    "Parallelism",
    "PortSpec",
    "PortType",
]

Parallelism = Literal["local", "shared", "replicated"]
PortType = Literal["any", "float", "int", "bool", "str", "array", "dict", "list"]
FieldKind = Literal["choice", "int", "float", "bool", "str"]
MANIFEST_VERSION: Literal[1] = 1
MetricKind = Literal["binary", "bounded", "count", "continuous"]


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class MetricSpec(_Frozen):
    """What kind of number a metric is; its interval follows from it.

    ``binary``: 0/1 (success); ``bounded``: a value in ``[lo, hi]`` (SPL, progress in
    [0, 1]); ``count``: a non-negative whole number (steps); ``continuous``: any real value
    (return).
    """

    kind: MetricKind
    lo: float | None = Field(default=None, description="bounded: the smallest value possible.")
    hi: float | None = Field(default=None, description="bounded: the largest value possible.")
    description: str = ""

    @model_validator(mode="after")
    def _range_fits_kind(self) -> MetricSpec:
        if self.kind == "bounded":
            if self.lo is None or self.hi is None or not self.lo < self.hi:
                raise ValueError("a bounded metric needs a range lo < hi (e.g. lo=0, hi=1)")
        elif self.lo is not None or self.hi is not None:
            raise ValueError(f"only a bounded metric has a range, not a {self.kind} one")
        return self


class PortSpec(_Frozen):
    """A typed input or output port."""

    name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    type: PortType = "any"
    required: bool = Field(
        default=True, description="Inputs only: a node whose required input is absent is skipped."
    )
    description: str = ""


class NodeTypeSpec(_Frozen):
    """One node type of a node set."""

    name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    description: str = ""
    inputs: list[PortSpec] = Field(default_factory=list)
    outputs: list[PortSpec] = Field(default_factory=list)
    dynamic_inputs: bool = Field(
        default=False, description="Accepts input ports of any name (e.g. graphOut)."
    )
    config_schema: dict[str, Any] = Field(
        default_factory=dict, description="JSON Schema of the node's config."
    )
    done_port: str | None = Field(
        default=None, description="Output port whose truthy value ends the episode loop."
    )
    blocking: bool = Field(
        default=False, description="Runs in a worker thread (simulators, models) when local."
    )
    batched: bool = Field(
        default=False,
        description="A model node whose calls a shared server coalesces into batches "
        "(declared with NODESET.batched_node); its outputs must not depend on the batch.",
    )
    batch_examples: int = Field(
        default=0,
        ge=0,
        description="Batched nodes: how many example inputs it declares; a shared server "
        "checks batch invariance on them at start-up (0: checked only by the running audit).",
    )
    external: bool = Field(
        default=False,
        description="Its outputs come from a service outside the run (a policy server "
        "reached by URL): a run that uses it is at most 'unverified' for determinism.",
    )

    def input(self, name: str) -> PortSpec | None:
        return next((p for p in self.inputs if p.name == name), None)

    def output(self, name: str) -> PortSpec | None:
        return next((p for p in self.outputs if p.name == name), None)


class FieldSpec(_Frozen):
    """A panel field; ``depends_on`` names the field whose change resets this one (cascade)."""

    name: str
    kind: FieldKind
    default: Any = None
    choices: list[Any] | None = None
    depends_on: str | None = None
    description: str = ""


class PanelSpec(_Frozen):
    """An environment's panel: fields (with cascades) and actions such as ``play``."""

    fields: list[FieldSpec] = Field(default_factory=list)
    actions: list[str] = Field(default_factory=lambda: ["play", "reset"])

    def field(self, name: str) -> FieldSpec | None:
        return next((f for f in self.fields if f.name == name), None)


class LoadInfo(_Frozen):
    """What an environment reports after ``play`` commits an episode."""

    episode_id: str
    scene_id: str = ""
    instruction: str = ""
    step_budget: int | None = None
    extra: dict[str, Any] = Field(default_factory=dict)


class NodeSetResources(_Frozen):
    """What one instance of a shared node set reserves on a cluster (the Ray engine's model
    actor); the local engine does not read it."""

    num_cpus: float = Field(default=0.0, ge=0, le=1024, description="CPUs (may be fractional).")
    num_gpus: float = Field(default=0.0, ge=0, le=64, description="GPUs (may be fractional).")
    memory_mb: float = Field(default=0.0, ge=0, le=16_777_216, description="Memory, MiB.")


class NodeSetManifest(_Frozen):
    """Everything a node set declares: name, version, parallelism, node types, panel."""

    manifest_version: Literal[1] = MANIFEST_VERSION
    name: str = Field(pattern=r"^[a-z][a-z0-9_]{0,47}$")
    version: str = "0.1.0"
    parallelism: Parallelism = "local"
    description: str = ""
    forkable: bool = Field(
        default=True,
        description="Whether its servers may be forked from a loaded template process; false "
        "for node sets whose loading starts threads or CUDA (torch models): those are spawned.",
    )
    nodes: list[NodeTypeSpec] = Field(default_factory=list)
    panel: PanelSpec | None = None
    episode_start_s: float = Field(
        default=0.0,
        ge=0,
        le=3600,
        description="Envs: how long starting an episode may take (building the simulator on "
        "a task switch, reset, settling), when that is longer than the run's per-step "
        "deadline; 0: the per-step deadline.",
    )
    resources: NodeSetResources = Field(default_factory=NodeSetResources)
    metrics: dict[str, MetricSpec] = Field(
        default_factory=dict,
        description="The kind of each metric its nodes report (by metric name): the run's "
        "intervals follow it; an undeclared metric's kind is inferred from its values.",
    )

    def node_type(self, name: str) -> NodeTypeSpec | None:
        return next((n for n in self.nodes if n.name == name), None)
