"""GraphExecutor: runs one episode of a graph, iteration by iteration, off a ready queue.

Within an iteration, nodes fire as soon as their same-iteration inputs exist; independent
nodes run concurrently. Every error-shaped result or raised exception goes into the
``node_errors`` ledger (an in-process node's exception with its traceback, bounded, in
``node_tracebacks``) and ends the run with status ``error``. The nodes whose call is under
way are ``in_flight``: those an episode cut short (a timeout) was waiting for. After the
terminal iteration the inputs of graph-scope ``core.graphOut`` nodes are snapshotted and
harvested as metrics.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import numpy as np

from agentcanvas.errors import ConfigError, ServerTimeoutError, describe
from agentcanvas.graph.harvest import harvest
from agentcanvas.graph.model import DEFAULT_STEP_BUDGET, GRAPH_SCOPE_ID, Graph, Node
from agentcanvas.graph.ready import ReadySet, same_iteration_deps
from agentcanvas.graph.summarize import Summaries, format_traceback
from agentcanvas.nodes.assets import save_frame
from agentcanvas.nodes.base import CallContext, NodeSetHandle
from agentcanvas.nodes.boundary import (
    is_in_process,
    needs_local_deadline,
    runs_to_its_end,
    with_boundary,
)
from agentcanvas.nodes.manifest import NodeTypeSpec

__all__ = [
    "GRAPH_OUT_TYPE",
    "EpisodeContext",
    "EventSink",
    "ExecStatus",
    "ExecutionPrinciples",
    "ExecutionResult",
    "FiringLog",
    "GraphExecutor",
    "NodeResolver",
]

GRAPH_OUT_TYPE = "core.graphOut"
ExecStatus = Literal["running", "completed", "error", "cancelled"]
EventSink = Callable[[dict[str, Any]], None]


class NodeResolver(Protocol):
    """Finds the handle (in-process or proxy) and node spec for a node set."""

    def handle_for(self, nodeset: str, url_override: str | None) -> NodeSetHandle: ...

    def node_spec(self, node_type: str) -> NodeTypeSpec: ...


class FiringLog(Protocol):
    """Receives one record per node firing (the episode's log.jsonl)."""

    def record(self, entry: dict[str, Any]) -> None: ...


@dataclass(frozen=True)
class ExecutionPrinciples:
    """Run-wide switches. Batch eval suppresses per-node UI events.

    ``local_call_timeout_s`` is the deadline of a call to an in-process node set (a server's
    call has its own): past it the call is abandoned and the node timed out, exactly as when
    a server's call misses its deadline.
    """

    suppress_nav_events: bool = False
    local_call_timeout_s: float | None = None


@dataclass(frozen=True)
class EpisodeContext:
    """Identity of the episode being executed; seeds derive from it."""

    key: str = "episode"
    seed: int = 0
    task: str = ""
    asset_dir: str = ""
    client: str = ""


@dataclass
class ExecutionResult:
    """What an execution produced so far (also valid after a timeout or cancel)."""

    status: ExecStatus
    steps: int
    done_signalled: bool
    node_errors: dict[str, str]
    metrics: dict[str, Any]
    outputs: dict[str, dict[str, Any]] = field(default_factory=dict)
    timed_out: list[str] = field(default_factory=list)
    node_tracebacks: dict[str, str] = field(default_factory=dict)
    in_flight: list[str] = field(default_factory=list)
    """Nodes whose call was under way (sorted): those a cut-short episode waited for."""


class GraphExecutor:
    """Executes a graph for one episode. A fresh executor per episode: no state carries over."""

    def __init__(
        self,
        graph: Graph,
        resolver: NodeResolver,
        *,
        episode: EpisodeContext | None = None,
        env_panel_overrides: Mapping[str, NodeSetHandle] | None = None,
        server_url_overrides: Mapping[str, str] | None = None,
        principles: ExecutionPrinciples | None = None,
        step_budget_override: int | None = None,
        log: FiringLog | None = None,
        events: EventSink | None = None,
    ) -> None:
        self.graph = graph
        self.episode = episode or EpisodeContext()
        self.env_panel_overrides = dict(env_panel_overrides or {})
        self.server_url_overrides = dict(server_url_overrides or {})
        self.principles = principles or ExecutionPrinciples()
        self.step_budget_override = step_budget_override
        self._resolver = resolver
        self._log = log
        self._events = events
        self._deps = same_iteration_deps(graph)
        self._ready = ReadySet(self._deps)  # reset at each iteration
        self._summaries = Summaries()  # this iteration's, for the firing log: cleared too
        self._nodes = {n.id: n for n in graph.nodes}
        # Per node, where each input comes from: (port, source node, source port, whether
        # from the previous iteration); read at every firing, so plain tuples.
        self._sources: dict[str, list[tuple[str, str, str, bool]]] = {n.id: [] for n in graph.nodes}
        for edge in graph.edges:
            if edge.target.node in self._sources:
                self._sources[edge.target.node].append(
                    (edge.target.port, edge.source.node, edge.source.port, edge.next_iteration)
                )
        self._carried = [
            (e.source.node, e.source.port, (e.target.node, e.target.port))
            for e in graph.edges
            if e.next_iteration
        ]
        self._specs = {n.id: resolver.node_spec(n.type) for n in graph.nodes}
        self._required = {
            node_id: tuple(p.name for p in spec.inputs if p.required)
            for node_id, spec in self._specs.items()
        }
        self._wire_handles()
        self.status: ExecStatus = "running"
        self.steps = 0
        self.done_signalled = False
        self.node_errors: dict[str, str] = {}
        self.node_tracebacks: dict[str, str] = {}
        self.timed_out: list[str] = []
        self.in_flight: set[str] = set()
        self.last_inputs: dict[str, dict[str, Any]] = {}
        self.last_outputs: dict[str, dict[str, Any]] = {}

    def get_server_url(self, nodeset: str) -> str | None:
        """This worker's URL for a node set, or None to use the baked-in one."""
        return self.server_url_overrides.get(nodeset)

    def _wire_handles(self) -> None:
        """Each node set's handle, and which nodes' calls run in this process."""
        graph = self.graph
        self._handles = {ns: self._handle(ns) for ns in graph.nodesets()}
        self._local_deadlines = {
            n.id for n in graph.nodes if needs_local_deadline(self._handles[n.nodeset], n.node_name)
        }
        # A traceback raised here shows the node's own code; a server's error arrives as a
        # message (its traceback would show only the proxy), so only these keep theirs.
        self._in_process = {n.id for n in graph.nodes if is_in_process(self._handles[n.nodeset])}
        self._to_its_end = {
            n.id for n in graph.nodes if runs_to_its_end(self._handles[n.nodeset], n.node_name)
        }

    def _handle(self, nodeset: str) -> NodeSetHandle:
        if nodeset in self.env_panel_overrides:
            return with_boundary(self.env_panel_overrides[nodeset])
        return with_boundary(self._resolver.handle_for(nodeset, self.get_server_url(nodeset)))

    def resolve_step_budget(self) -> int:
        """step_budget_override → graph.step_budget → DEFAULT_STEP_BUDGET."""
        for budget in (self.step_budget_override, self.graph.step_budget):
            if budget is not None:
                return budget
        return DEFAULT_STEP_BUDGET

    async def run(self) -> ExecutionResult:
        """Run iterations until a done signal, a node error, or the step budget."""
        budget = self.resolve_step_budget()
        if budget < 1:
            raise ConfigError(f"step budget must be >= 1, got {budget}")
        self._emit({"type": "nav_status", "status": "running", "budget": budget})
        carry = self._initial_carry()
        try:
            for step in range(budget):
                outputs = await self._run_iteration(step, carry)
                self.steps = step + 1
                self._emit({"type": "nav_step", "step": step})
                if self.node_errors or self.done_signalled:
                    break
                carry = self._next_carry(outputs)
        except asyncio.CancelledError:
            self.status = "cancelled"
            raise
        self.status = "error" if self.node_errors else "completed"
        self._emit({"type": "nav_status", "status": self.status, "steps": self.steps})
        return self.result()

    def result(self) -> ExecutionResult:
        """Snapshot of what was harvested so far (partial after a timeout or cancel)."""
        return ExecutionResult(
            status=self.status,
            steps=self.steps,
            done_signalled=self.done_signalled,
            node_errors=dict(self.node_errors),
            metrics=self.harvest_metrics(),
            timed_out=list(self.timed_out),
            outputs={k: dict(v) for k, v in self.last_outputs.items()},
            node_tracebacks=dict(self.node_tracebacks),
            in_flight=sorted(self.in_flight),
        )

    def harvest_metrics(self) -> dict[str, Any]:
        """Metrics from graph-scope graphOut sinks: a ``metrics`` dict is flattened."""
        sinks = [
            self.last_inputs.get(node.id, {})
            for node in self.graph.nodes
            if node.type == GRAPH_OUT_TYPE and node.scope == GRAPH_SCOPE_ID
        ]
        return harvest(sinks)

    def _initial_carry(self) -> dict[tuple[str, str], Any]:
        return {
            (e.target.node, e.target.port): e.initial
            for e in self.graph.edges
            if e.next_iteration and e.initial is not None
        }

    def _next_carry(self, outputs: dict[str, dict[str, Any]]) -> dict[tuple[str, str], Any]:
        carry: dict[tuple[str, str], Any] = {}
        for source, port, target in self._carried:
            produced = outputs.get(source)
            if produced is not None and port in produced:
                carry[target] = produced[port]
        return carry

    def _inputs_for(
        self, node_id: str, outputs: dict[str, dict[str, Any]], carry: dict[tuple[str, str], Any]
    ) -> dict[str, Any]:
        inputs: dict[str, Any] = {}
        for port, source, source_port, carried in self._sources[node_id]:
            if carried:
                key = (node_id, port)
                if key in carry:
                    inputs[port] = carry[key]
            else:
                produced = outputs.get(source)
                if produced is not None and source_port in produced:
                    inputs[port] = produced[source_port]
        return inputs

    def _missing_required(self, node_id: str, inputs: dict[str, Any]) -> list[str]:
        return [name for name in self._required[node_id] if name not in inputs]

    async def _run_iteration(
        self, step: int, carry: dict[tuple[str, str], Any]
    ) -> dict[str, dict[str, Any]]:
        ready = self._ready
        ready.start_iteration()
        self._summaries.clear()
        outputs: dict[str, dict[str, Any]] = {}
        running: dict[asyncio.Task[dict[str, Any]], str] = {}
        left: list[tuple[Node, dict[str, Any]]] = []  # launchable, not yet launched
        try:
            while not ready.complete:
                launch = left + self._launchable(step, ready, outputs, carry)
                left = []
                if not running and launch and launch[0][0].id in self._to_its_end:
                    # Nodes that run to their end without suspending, at the head of the
                    # launch order: their tasks would each run whole, in this order, before
                    # any other — so they fire here, in that order, without a task.
                    first = 0
                    while first < len(launch) and launch[first][0].id in self._to_its_end:
                        node, inputs = launch[first]
                        outputs[node.id] = await self._fire(step, node, inputs)
                        ready.finish(node.id)
                        first += 1
                    left = launch[first:]
                    continue
                if len(launch) == 1 and not running:
                    # Alone: nothing could run beside it, so it fires in this task (a task
                    # and a wait per firing cost more than a fast node itself).
                    node, inputs = launch[0]
                    outputs[node.id] = await self._fire(step, node, inputs)
                    ready.finish(node.id)
                    continue
                for node, inputs in launch:
                    running[asyncio.create_task(self._fire(step, node, inputs))] = node.id
                if not running:
                    break
                finished, _ = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
                for task in finished:
                    node_id = running.pop(task)
                    outputs[node_id] = task.result()
                    ready.finish(node_id)
        finally:
            await _cancel_all(running)
        return outputs

    def _launchable(
        self,
        step: int,
        ready: ReadySet,
        outputs: dict[str, dict[str, Any]],
        carry: dict[tuple[str, str], Any],
    ) -> list[tuple[Node, dict[str, Any]]]:
        """The ready nodes that can fire, with their inputs, in launch order (by id); a node
        missing a required input is recorded as skipped (which may ready others)."""
        launch: list[tuple[Node, dict[str, Any]]] = []
        while batch := ready.take_ready():
            for node_id in batch:
                inputs = self._inputs_for(node_id, outputs, carry)
                missing = self._missing_required(node_id, inputs)
                if missing:  # after a node error the iteration still finishes (deterministic)
                    self._record(
                        step, node_id, "skipped", 0.0, inputs, {}, f"missing input {missing}"
                    )
                    outputs[node_id] = {}
                    ready.finish(node_id)
                    continue
                launch.append((self._nodes[node_id], inputs))
        return launch

    async def _fire(self, step: int, node: Node, inputs: dict[str, Any]) -> dict[str, Any]:
        spec = self._specs[node.id]
        ctx = call_context(node, step, self.episode)
        started = time.perf_counter()
        raised: Exception | None = None
        self.in_flight.add(node.id)
        try:
            result = await self._call(node, inputs, ctx)
        except asyncio.CancelledError:
            raise  # left in flight: an episode cut here was waiting for this call
        except ServerTimeoutError as exc:  # wall clock decided: the episode is a timeout
            self.timed_out.append(node.id)
            result = {"error": describe(exc)}
        except Exception as exc:  # a node's failure is data in the ledger, never an escape
            result, raised = {"error": describe(exc)}, exc
        self.in_flight.discard(node.id)
        latency_ms = (time.perf_counter() - started) * 1000.0
        if "error" in result and spec.output("error") is None:
            self.node_errors[node.id] = f"{node.type}: {result['error']}"
            if raised is not None and node.id in self._in_process:
                self.node_tracebacks[node.id] = format_traceback(raised)
            self._record(step, node.id, "error", latency_ms, inputs, {}, str(result["error"]))
            return {}
        if self.episode.asset_dir and isinstance(result.get("frame"), np.ndarray):
            save_frame(result["frame"], ctx)  # into the episode's recording (nodes.assets)
        if node.type == GRAPH_OUT_TYPE:
            # Per port, the latest value: an iteration whose upstream failed (the port left
            # without a value) keeps what the episode had harvested before, its partial result.
            self.last_inputs.setdefault(node.id, {}).update(inputs)
        self.last_outputs[node.id] = result
        if spec.done_port is not None and bool(result.get(spec.done_port)):
            self.done_signalled = True
        self._record(step, node.id, "ok", latency_ms, inputs, result, None)
        return result

    async def _call(self, node: Node, inputs: dict[str, Any], ctx: CallContext) -> dict[str, Any]:
        """One node call; an in-process one under ``principles.local_call_timeout_s``."""
        handle = self._handles[node.nodeset]
        timeout_s = self.principles.local_call_timeout_s
        if timeout_s is None or node.id not in self._local_deadlines:
            return await handle.call(node.node_name, node.config, inputs, ctx)
        deadline = asyncio.timeout(timeout_s)
        try:
            async with deadline:
                return await handle.call(node.node_name, node.config, inputs, ctx)
        except TimeoutError as exc:
            if not deadline.expired():
                raise
            raise ServerTimeoutError(
                f"in-process node set {node.nodeset!r} did not return {node.node_name!r} "
                f"within {timeout_s:g} s (per-step timeout); the call was abandoned"
            ) from exc

    def _record(
        self,
        step: int,
        node_id: str,
        status: str,
        latency_ms: float,
        inputs: dict[str, Any],
        outputs: dict[str, Any],
        error: str | None,
    ) -> None:
        events = self._events is not None and not self.principles.suppress_nav_events
        if self._log is None and not events:
            return  # no log and no one listening: nothing to summarise
        ins, outs = self._summaries.firing(inputs, outputs, node_id in self._in_process)
        entry = {
            "step": step,
            "node": node_id,
            "type": self._nodes[node_id].type,
            "status": status,
            "latency_ms": round(latency_ms, 3),
            "inputs": ins,
            "outputs": outs,
        }
        if error is not None:
            entry["error"] = error
        if self._log is not None:
            self._log.record(entry)
        if events:
            self._emit({**entry, "node_type": entry["type"], "type": "exec_log"})

    def _emit(self, event: dict[str, Any]) -> None:
        if self._events is not None and not self.principles.suppress_nav_events:
            self._events(event)


def call_context(node: Node, step: int, episode: EpisodeContext) -> CallContext:
    """What a firing of ``node`` at ``step`` tells its node set about itself."""
    return CallContext(
        node_id=node.id,
        step=step,
        episode_key=episode.key,
        episode_seed=episode.seed,
        task=episode.task,
        asset_dir=episode.asset_dir,
        client=episode.client,
    )


async def _cancel_all(running: dict[asyncio.Task[dict[str, Any]], str]) -> None:
    for task in running:
        task.cancel()
    if running:
        await asyncio.gather(*running, return_exceptions=True)
    running.clear()
