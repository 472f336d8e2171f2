"""A node set as its server hosts it: the per-episode operations, on the call socket and HTTP.

`HostedNodeSet`'s operations run on the server's event loop (every op of a shared node
set; a replicated one's async and batched nodes); `DirectCalls` runs a replicated node set's
synchronous calls, its panel and its evictions on the call socket's connection thread (one
caller, its worker: nothing needs the loop between the socket and the simulator). The HTTP
routes (`host_http`) answer with the same operations. A node's failure is data (``{"error": ...}``
outputs); the server lives on.
"""

from __future__ import annotations

import threading
from typing import Any

import msgspec

from agentcanvas.errors import UserInputError
from agentcanvas.nodes.base import CallContext, LocalNodeSet
from agentcanvas.server import protocol
from agentcanvas.server.batched_inference import BatchedInferenceServer
from agentcanvas.server.rpc_server import ON_LOOP, DirectHandler, Handler

__all__ = ["DirectCalls", "HostedNodeSet", "call_node"]


async def call_node(
    instance: LocalNodeSet,
    batcher: BatchedInferenceServer,
    node_name: str,
    config: dict[str, Any],
    inputs: dict[str, Any],
    ctx: CallContext,
) -> dict[str, Any]:
    """Batched model nodes go through the coalescer; everything else is called directly."""
    batch_fn = instance.nodeset.definition(node_name).batch_fn
    if batch_fn is None:
        return await instance.call(node_name, config, inputs, ctx)
    state = instance.state

    def handler(items: list[Any], cfg: dict[str, Any]) -> list[dict[str, Any]]:
        return batch_fn(items, cfg, state)

    result: dict[str, Any] = await batcher.submit(
        node_name, config, (inputs, ctx), ctx.client or "anonymous", handler, ctx.episode_key
    )
    return result


def _call_request(args: dict[str, Any]) -> tuple[protocol.CallRequest, CallContext]:
    where = protocol.call_path(str(args.get("node")))
    try:
        request = msgspec.convert(args, protocol.CallRequest)
        return request, CallContext(**request.ctx)
    except (msgspec.ValidationError, TypeError) as exc:
        raise UserInputError(f"{where}: not a call payload ({exc})") from exc


def _outputs(outputs: dict[str, Any]) -> dict[str, Any]:
    return msgspec.structs.asdict(protocol.CallReply(outputs))


def _failed(exc: Exception) -> dict[str, Any]:
    """A node's failure as its outputs: data for the caller; the server lives on."""
    return _outputs({"error": f"{type(exc).__name__}: {exc}"})


class HostedNodeSet:
    """The node set a server hosts (its instance and batcher) and its per-episode operations
    on the event loop: `handlers` for the call socket, the same methods for HTTP."""

    def __init__(
        self, instance: LocalNodeSet, batcher: BatchedInferenceServer, tag: int | None = None
    ) -> None:
        self.instance, self.batcher, self.tag = instance, batcher, tag

    def handlers(self) -> dict[str, Handler]:
        """The event-loop handler of each rpc op."""
        return {
            protocol.OP_CALL: self.call,
            protocol.OP_PANEL_EPISODE: self.panel_episode,
            protocol.OP_EVICT: self.evict,
        }

    async def call(self, args: dict[str, Any]) -> dict[str, Any]:
        """A node call (a `protocol.CallRequest`); the node's failure is data."""
        request, ctx = _call_request(args)
        try:
            outputs = await call_node(
                self.instance, self.batcher, request.node, request.config, request.inputs, ctx
            )
        except Exception as exc:  # the node's failure is data; the server lives on
            return _failed(exc)
        return _outputs(outputs)

    async def panel_episode(self, args: dict[str, Any]) -> dict[str, Any]:
        """Reset, set fields, play and load (a `protocol.PanelEpisodeRequest`)."""
        request = protocol.parse(args, protocol.PanelEpisodeRequest, protocol.PANEL_EPISODE)
        return (await self.instance.panel_episode(request.fields)).model_dump(mode="json")

    async def evict(self, args: dict[str, Any]) -> bool:
        """Evict an episode; whether the node set keeps per-episode state at all: False
        tells a client that later evictions can be skipped (one round trip less per
        episode)."""
        request = protocol.parse(args, protocol.EvictRequest, protocol.EVICT)
        await self.instance.evict(request.episode_key)
        return self.instance.nodeset.evict is not None


class DirectCalls:
    """The per-episode operations of a replicated node set, run on the rpc connection's own
    thread: it has one caller (its worker), so no thread hop per call. Concurrency stays as
    on the loop: blocking nodes and the panel may overlap (they would run on worker threads),
    other synchronous nodes and evictions run one at a time. A node that is async or batched
    goes to the event loop (`HostedNodeSet`), as every op of a shared node set does."""

    def __init__(self, instance: LocalNodeSet) -> None:
        self.instance = instance
        self._serial = threading.Lock()  # non-blocking nodes and evictions, one at a time

    def handlers(self) -> dict[str, DirectHandler]:
        """The direct handler of each rpc op."""
        return {
            protocol.OP_CALL: self.call,
            protocol.OP_PANEL_EPISODE: self.panel_episode,
            protocol.OP_EVICT: self.evict,
        }

    def call(self, args: dict[str, Any]) -> Any:
        """A synchronous node's call, here; `ON_LOOP` for any other node."""
        request, ctx = _call_request(args)
        instance = self.instance
        try:
            if not instance.runs_synchronously(request.node):
                return ON_LOOP
            if instance.nodeset.definition(request.node).spec.blocking:  # may overlap, as
                outputs = instance.call_here(  # on the worker threads they had before
                    request.node, request.config, request.inputs, ctx
                )
            else:
                with self._serial:
                    outputs = instance.call_here(request.node, request.config, request.inputs, ctx)
        except Exception as exc:
            return _failed(exc)
        return _outputs(outputs)

    def panel_episode(self, args: dict[str, Any]) -> dict[str, Any]:
        request = protocol.parse(args, protocol.PanelEpisodeRequest, protocol.PANEL_EPISODE)
        return self.instance.panel_episode_here(request.fields).model_dump(mode="json")

    def evict(self, args: dict[str, Any]) -> bool:
        request = protocol.parse(args, protocol.EvictRequest, protocol.EVICT)
        with self._serial:
            self.instance.evict_here(request.episode_key)
        return self.instance.nodeset.evict is not None
