"""What a node is: its function's shape, the context of each call, and its definition.

Internal to the node API (`nodes.base` builds on it; authors import from `agentcanvas.nodes`).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from agentcanvas.errors import NodeSetError
from agentcanvas.nodes.manifest import NodeTypeSpec, PortSpec

__all__ = ["BatchFn", "BatchItem", "CallContext", "NodeDef", "NodeFn", "check_examples"]

NodeFn = Callable[[dict[str, Any], dict[str, Any], Any, "CallContext"], Any]
BatchItem = tuple[dict[str, Any], "CallContext"]
BatchFn = Callable[[list[BatchItem], dict[str, Any], Any], list[dict[str, Any]]]


@dataclass(frozen=True)
class CallContext:
    """Per-call facts a node may use. Seeds come from episode identity, never a worker slot."""

    node_id: str
    step: int
    episode_key: str = ""
    episode_seed: int = 0
    task: str = ""
    asset_dir: str = ""
    client: str = ""  # which worker sent the call: for batching only, never for results


@dataclass
class NodeDef:
    """One node of a node set: its spec, its function and how its config is checked."""

    spec: NodeTypeSpec
    fn: NodeFn
    config_model: type[BaseModel] | None
    batch_fn: BatchFn | None = None
    examples: tuple[dict[str, Any], ...] = ()
    """Example inputs of a batched node: the start-up batch-invariance check runs on them."""

    is_async: bool = field(init=False)
    """Whether ``fn`` is a coroutine function (asked on every call: answered once)."""

    def __post_init__(self) -> None:
        self.is_async = inspect.iscoroutinefunction(self.fn)


def check_examples(
    nodeset: str, node: str, ports: list[PortSpec], examples: Sequence[Mapping[str, Any]] | None
) -> tuple[dict[str, Any], ...]:
    """Declared examples as dicts; each must give every required input port a value."""
    if examples is None:
        return ()
    if isinstance(examples, Mapping | str) or not isinstance(examples, Sequence):
        raise NodeSetError(f"{nodeset}.{node}: examples must be a list of inputs dicts")
    required = {p.name for p in ports if p.required}
    declared = []
    for i, example in enumerate(examples):
        if not isinstance(example, Mapping):
            raise NodeSetError(
                f"{nodeset}.{node}: examples[{i}] is a {type(example).__name__}, not an inputs dict"
            )
        missing = sorted(required - set(example))
        if missing:
            raise NodeSetError(
                f"{nodeset}.{node}: examples[{i}] has no value for the required input(s) {missing}"
            )
        declared.append(dict(example))
    return tuple(declared)
