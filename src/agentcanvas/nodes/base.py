"""The node API for authors: declare a node set, its nodes and (for environments) its panel.

A node set module exposes ``NODESET = NodeSet(...)``; each node is a plain function::

    NODESET = NodeSet("my_glue", parallelism="local")

    @NODESET.node("double", inputs=[PortSpec(name="x", type="float")],
                  outputs=[PortSpec(name="y", type="float")])
    def double(inputs, config, state, ctx):
        return {"y": 2 * inputs["x"]}

``state`` is the node set's per-process state (``state_factory()``), shared by its nodes and
its panel; ``ctx`` is a :class:`CallContext`. A node reports a failure by raising or by
returning ``{"error": "..."}``. See ``docs/nodesets.md``.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import inspect
import json
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, ValidationError

from agentcanvas.errors import NodeSetError, UserInputError
from agentcanvas.nodes.blocking import run_blocking
from agentcanvas.nodes.definitions import (
    BatchFn,
    BatchItem,
    CallContext,
    NodeDef,
    NodeFn,
    check_examples,
)
from agentcanvas.nodes.handles import NodeSetHandle
from agentcanvas.nodes.manifest import (
    LoadInfo,
    MetricSpec,
    NodeSetManifest,
    NodeSetResources,
    NodeTypeSpec,
    PanelSpec,
    Parallelism,
    PortSpec,
)

__all__ = [
    "BatchFn",
    "BatchItem",
    "CallContext",
    "ClosableState",
    "LocalNodeSet",
    "NodeFn",
    "NodeSet",
    "NodeSetHandle",
    "Panel",
    "start_episode",
]


class Panel:
    """Base class of an environment panel: fields with cascades, actions, and ``on_load``.

    Subclasses implement :meth:`choices` (for cascading fields), :meth:`on_action` and
    :meth:`on_load`. Field values live in ``self.values``.
    """

    spec: PanelSpec = PanelSpec()

    def __init__(self, state: Any) -> None:
        self.state = state
        self.values: dict[str, Any] = {f.name: f.default for f in self.spec.fields}

    def choices(self, name: str) -> list[Any] | None:
        """Allowed values of a field given the current values of the fields above it."""
        spec = self.spec.field(name)
        return None if spec is None else spec.choices

    def on_field_change(self, name: str, value: Any) -> dict[str, Any]:
        """Set a field, reset the fields that depend on it, and return all values."""
        if self.spec.field(name) is None:
            known = ", ".join(f.name for f in self.spec.fields)
            raise UserInputError(f"panel has no field {name!r} (fields: {known})")
        allowed = self.choices(name)
        if allowed is not None and value not in allowed:
            raise UserInputError(f"panel field {name!r}: {value!r} is not one of {allowed}")
        self.values[name] = value
        self._reset_dependents(name)
        return dict(self.values)

    def _reset_dependents(self, name: str) -> None:
        for spec in self.spec.fields:
            if spec.depends_on == name:
                options = self.choices(spec.name)
                if options is not None and self.values.get(spec.name) not in options:
                    self.values[spec.name] = options[0] if options else None
                    self._reset_dependents(spec.name)

    def on_action(self, name: str) -> dict[str, Any]:
        """``reset`` restores every field's default; subclasses add their own actions."""
        if name == "reset":
            self.values = {f.name: f.default for f in self.spec.fields}
            return dict(self.values)
        raise UserInputError(f"panel has no action {name!r}")

    def on_load(self) -> LoadInfo:
        raise NodeSetError("this panel does not implement on_load")


@dataclass
class NodeSet:
    """Declaration of a node set: its manifest data plus the Python that implements it."""

    name: str
    version: str = "0.1.0"
    parallelism: Parallelism = "local"
    description: str = ""
    forkable: bool = True  # False: its servers are spawned, never forked (threads, CUDA)
    state_factory: Callable[[], Any] | None = None
    panel_class: type[Panel] | None = None
    evict: Callable[[Any, str], None] | None = None
    # Forkable node sets: run once in the fork template before its servers are forked
    # (import heavy libraries there, so each server does not; no threads, no GL, no CUDA).
    preload: Callable[[], None] | None = None
    episode_start_s: float = 0.0  # envs: see NodeSetManifest.episode_start_s
    determinism: Callable[[Any], dict[str, str]] | None = None
    resources: NodeSetResources = field(default_factory=NodeSetResources)  # on a cluster
    # The kind of each metric its nodes report (binary, bounded with a range, count,
    # continuous): a run's intervals follow it.
    metrics: Mapping[str, MetricSpec] = field(default_factory=dict)
    _nodes: dict[str, NodeDef] = field(default_factory=dict)

    def node(
        self,
        name: str,
        *,
        inputs: list[PortSpec] | None = None,
        outputs: list[PortSpec] | None = None,
        config: type[BaseModel] | None = None,
        description: str = "",
        dynamic_inputs: bool = False,
        done_port: str | None = None,
        blocking: bool = False,
        batched: bool = False,
        batch_examples: int = 0,
        external: bool = False,
    ) -> Callable[[NodeFn], NodeFn]:
        """Decorator registering a node function under ``name``; ``external``: its outputs
        come from a service outside the run (see ``NodeTypeSpec.external``)."""

        def register(fn: NodeFn) -> NodeFn:
            spec = NodeTypeSpec(
                name=name,
                description=description or (inspect.getdoc(fn) or "").split("\n")[0],
                inputs=inputs or [],
                outputs=outputs or [],
                dynamic_inputs=dynamic_inputs,
                config_schema=config.model_json_schema() if config else {},
                done_port=done_port,
                blocking=blocking,
                batched=batched,
                batch_examples=batch_examples,
                external=external,
            )
            self._nodes[name] = NodeDef(spec, fn, config)
            return fn

        return register

    def batched_node(
        self,
        name: str,
        *,
        inputs: list[PortSpec] | None = None,
        outputs: list[PortSpec] | None = None,
        config: type[BaseModel] | None = None,
        description: str = "",
        examples: Sequence[Mapping[str, Any]] | None = None,
    ) -> Callable[[BatchFn], BatchFn]:
        """Decorator for a model node that takes a batch: ``fn(items, config, state)``.

        ``items`` is a list of ``(inputs, ctx)``; the function returns one output dict per
        item. A shared server coalesces concurrent calls into such batches; in-process a call
        is a batch of one. Outputs must not depend on the batch (see docs/nodesets.md).
        ``examples``: a few ``inputs`` dicts on which a shared server checks, at start-up,
        that every batch size and position gives the bits of each example run alone.
        """
        declared = check_examples(self.name, name, inputs or [], examples)

        def register(fn: BatchFn) -> BatchFn:
            def single(
                inputs: dict[str, Any], cfg: dict[str, Any], state: Any, ctx: CallContext
            ) -> dict[str, Any]:
                return fn([(inputs, ctx)], cfg, state)[0]

            self.node(
                name,
                inputs=inputs,
                outputs=outputs,
                config=config,
                description=description or (inspect.getdoc(fn) or "").split("\n")[0],
                blocking=True,
                batched=True,
                batch_examples=len(declared),
            )(single)
            self._nodes[name].batch_fn = fn
            self._nodes[name].examples = declared
            return fn

        return register

    def manifest(self) -> NodeSetManifest:
        panel = self.panel_class.spec if self.panel_class else None
        return NodeSetManifest(
            name=self.name,
            version=self.version,
            parallelism=self.parallelism,
            description=self.description,
            forkable=self.forkable,
            nodes=[d.spec for d in self._nodes.values()],
            panel=panel,
            episode_start_s=self.episode_start_s,
            resources=self.resources,
            metrics=dict(self.metrics),
        )

    def definition(self, node_name: str) -> NodeDef:
        try:
            return self._nodes[node_name]
        except KeyError as exc:
            raise NodeSetError(f"node set {self.name!r} has no node {node_name!r}") from exc

    def validate_config(self, node_name: str, config: Mapping[str, Any]) -> dict[str, Any]:
        """Validate a node's config against its model; returns it with defaults filled in."""
        model = self.definition(node_name).config_model
        if model is None:
            return dict(config)
        try:
            return model.model_validate(dict(config)).model_dump()
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise UserInputError(f"config field '{where}': {first['msg']}") from exc


class LocalNodeSet:
    """A node set instantiated in this process (its own state and panel).

    ``inline``: whether :meth:`call` may run its plain synchronous, non-blocking nodes on the
    calling event loop. Whoever builds the instance knows where the node set comes from and
    says so: only our own node sets, tested to return fast, where a thread hop per call would
    cost more than the call (``NodeSetCatalogue.trusted_inline``). Any other synchronous node
    runs on a daemon thread (`run_blocking`), whatever its ``blocking`` flag says: the loop is
    shared by every episode of the process, so a node that is slow or never returns there
    would stall all of them, and no deadline could end it. Off the loop, the caller's deadline
    abandons it, and only the episode that made the call pays.
    """

    def __init__(self, nodeset: NodeSet, *, inline: bool = False) -> None:
        self.nodeset = nodeset
        self.name = nodeset.name
        self.manifest = nodeset.manifest()
        self.inline = inline
        self.state = nodeset.state_factory() if nodeset.state_factory else None
        self.panel = nodeset.panel_class(self.state) if nodeset.panel_class else None
        self._configs: dict[tuple[str, str], dict[str, Any]] = {}
        # node name → (the config last given, a copy of it, its validated form): a graph
        # passes the same dict on every call, so most calls are answered without encoding it
        self._last_config: dict[str, tuple[dict[str, Any], dict[str, Any], dict[str, Any]]] = {}
        self._turns: dict[str, _EpisodeTurn] = {}

    def call_sync(
        self, node_name: str, config: dict[str, Any], inputs: dict[str, Any], ctx: CallContext
    ) -> dict[str, Any]:
        """Run a node function here; a non-dict return is reported as an error result."""
        result = self.nodeset.definition(node_name).fn(inputs, config, self.state, ctx)
        if type(result) is dict:  # the common case, without isawaitable's checks
            return result
        if inspect.isawaitable(result):
            raise NodeSetError(f"{self.name}.{node_name}: use call() for async nodes")
        return _as_result(result, self.name, node_name)

    def _config(self, node_name: str, config: dict[str, Any]) -> dict[str, Any]:
        """The node's config validated with defaults filled in (cached per distinct config)."""
        if self.nodeset.definition(node_name).config_model is None:
            return config
        last = self._last_config.get(node_name)
        if last is not None and last[0] is config and last[1] == config:  # unchanged in place
            return last[2]
        key = (node_name, json.dumps(config, sort_keys=True, default=str))
        if key not in self._configs:
            self._configs[key] = self.nodeset.validate_config(node_name, config)
        self._last_config[node_name] = (config, copy.deepcopy(config), self._configs[key])
        return self._configs[key]

    async def call(
        self, node_name: str, config: dict[str, Any], inputs: dict[str, Any], ctx: CallContext
    ) -> dict[str, Any]:
        definition = self.nodeset.definition(node_name)
        config = self._config(node_name, config)
        if definition.is_async:
            result = await definition.fn(inputs, config, self.state, ctx)
            return _as_result(result, self.name, node_name)
        if definition.spec.blocking:
            return await run_blocking(self.call_sync, node_name, config, inputs, ctx)
        if self.inline:
            return self.call_sync(node_name, config, inputs, ctx)
        async with self._episode_turn(ctx.episode_key):
            return await run_blocking(self.call_sync, node_name, config, inputs, ctx)

    @contextlib.asynccontextmanager
    async def _episode_turn(self, episode_key: str) -> AsyncIterator[None]:
        """The non-blocking synchronous calls of one episode one at a time, in the order they
        were made, as they ran on the loop: an episode's result must not depend on how its
        threads were scheduled. Calls of different episodes overlap, so that one episode's
        slow call never makes another wait. A call abandoned at its deadline gives its turn up
        (its thread may still run; its episode is ending)."""
        turn = self._turns.get(episode_key)
        if turn is None:
            turn = self._turns[episode_key] = _EpisodeTurn()
        turn.callers += 1
        try:
            async with turn.lock:
                yield
        finally:
            turn.callers -= 1
            if turn.callers == 0:
                del self._turns[episode_key]

    def runs_inline(self, node_name: str) -> bool:
        """Whether :meth:`call` runs ``node_name`` to its end on the calling event loop, where
        no deadline can interrupt it: a plain synchronous, non-blocking node of an ``inline``
        instance. Every other call is awaited (a thread, a coroutine) and can be abandoned."""
        definition = self.nodeset.definition(node_name)
        return self.inline and not definition.spec.blocking and not definition.is_async

    def runs_synchronously(self, node_name: str) -> bool:
        """Whether ``node_name`` is a plain function (not async, not batched): `call_here`
        can run it."""
        definition = self.nodeset.definition(node_name)
        return definition.batch_fn is None and not definition.is_async

    def call_here(
        self, node_name: str, config: dict[str, Any], inputs: dict[str, Any], ctx: CallContext
    ) -> dict[str, Any]:
        """`call` of a synchronous node in the calling thread (config validated, defaults
        filled in): a server's connection thread runs a replicated node set's calls so."""
        return self.call_sync(node_name, self._config(node_name, config), inputs, ctx)

    def panel_episode_here(self, fields: list[tuple[str, Any]]) -> LoadInfo:
        """`panel_episode` in the calling thread."""
        return start_episode(self._panel(), fields)

    def evict_here(self, episode_key: str) -> None:
        """`evict` in the calling thread."""
        if self.nodeset.evict is not None:
            self.nodeset.evict(self.state, episode_key)

    def _panel(self) -> Panel:
        if self.panel is None:
            raise NodeSetError(f"node set {self.name!r} has no panel")
        return self.panel

    async def panel_change(self, field_name: str, value: Any) -> dict[str, Any]:
        return self._panel().on_field_change(field_name, value)

    async def panel_action(self, action: str) -> dict[str, Any]:
        return await run_blocking(self._panel().on_action, action)

    async def panel_load(self) -> LoadInfo:
        return self._panel().on_load()

    async def panel_episode(self, fields: list[tuple[str, Any]]) -> LoadInfo:
        """``reset``, set ``fields`` in order, ``play``, ``on_load`` — one round trip."""
        return await run_blocking(self.panel_episode_here, fields)

    async def determinism(self) -> dict[str, str]:
        """Per-node determinism modes (e.g. ``{"embed": "padded"}``) of this instance."""
        hook = self.nodeset.determinism
        return dict(hook(self.state)) if hook is not None else {}

    async def evict(self, episode_key: str) -> None:
        if self.inline:
            self.evict_here(episode_key)
        else:  # someone else's code: off the shared loop, as its nodes
            await run_blocking(self.evict_here, episode_key)

    async def close(self) -> None:
        """Close the node set's state, if it can be closed (sync or async)."""
        if isinstance(self.state, ClosableState):
            closed = self.state.close()
            if inspect.isawaitable(closed):
                await closed


@runtime_checkable
class ClosableState(Protocol):
    """A node set's state that holds something to release (a model, a simulator): its
    ``close`` (plain or async) runs when the instance is closed."""

    def close(self) -> object: ...


@dataclass
class _EpisodeTurn:
    """Whose turn it is among one episode's synchronous calls, and how many wait or run."""

    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    callers: int = 0


def start_episode(panel: Panel, fields: list[tuple[str, Any]]) -> LoadInfo:
    """Commit an episode on a panel: defaults, then ``fields`` in order, ``play``, load."""
    panel.on_action("reset")
    for name, value in fields:
        panel.on_field_change(name, value)
    panel.on_action("play")
    return panel.on_load()


def _as_result(result: Any, nodeset: str, node_name: str) -> dict[str, Any]:
    if result is None:
        return {}
    if not isinstance(result, dict):
        return {"error": f"{nodeset}.{node_name} returned {type(result).__name__}, not a dict"}
    return result
