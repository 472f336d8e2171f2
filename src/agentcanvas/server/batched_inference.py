"""BatchedInferenceServer: coalesce concurrent calls of K workers into one forward pass.

Calls are keyed by ``(function_name, config_hash)``: identical configs share one queue,
different checkpoints stay apart. A server-level ``_inference_lock`` keeps one forward pass
in flight (peak device memory bounded by one batch). Each request has its own future; the
number of outputs is checked against the inputs; a failing batch fails each of its requests
and the server lives on; cancelled requests are dropped before the forward pass.

No background task: every waiting caller may flush its queue when it is due, so whoever
waits longest does the work and nothing is left without an owner.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections.abc import Callable, Sequence
from typing import Any

from agentcanvas.errors import ServerError
from agentcanvas.server.batching import BatchQueue, FlushPolicy, PendingRequest, flush_due_at

BatchHandler = Callable[[list[Any], dict[str, Any]], Sequence[Any]]


def config_hash(config: dict[str, Any]) -> str:
    """A stable hash of a node config (sorted JSON)."""
    text = json.dumps(config, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class BatchedInferenceServer:
    """Coalesces requests per key under a flush policy; counts forward passes."""

    def __init__(
        self, policy: FlushPolicy | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.policy = policy or FlushPolicy()
        self._clock = clock
        self._queues: dict[tuple[str, str], BatchQueue] = {}
        self._inference_lock = asyncio.Lock()
        self.clients: set[str] = set()
        self.forward_passes = 0
        self.requests_served = 0
        self.batch_sizes: list[int] = []

    def attach(self, client: str) -> int:
        self.clients.add(client)
        return len(self.clients)

    def detach(self, client: str) -> int:
        self.clients.discard(client)
        return len(self.clients)

    async def submit(
        self,
        function_name: str,
        config: dict[str, Any],
        item: Any,
        client: str,
        handler: BatchHandler,
    ) -> Any:
        """Queue ``item``; resolve with its output once its batch has run."""
        key = (function_name, config_hash(config))
        queue = self._queues.setdefault(key, BatchQueue())
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        queue.pending.append(PendingRequest(client, self._clock(), item, future))
        while not future.done():
            due = flush_due_at(self.policy, queue, len(self.clients), self._clock())
            if due is None:
                break
            delay = due - self._clock()
            if delay <= 0:
                await self._flush(queue, config, handler)
                continue
            try:
                await asyncio.wait([future], timeout=delay)
            except asyncio.CancelledError:
                future.cancel()  # dropped from its batch before the forward pass
                raise
        return await future

    async def _flush(self, queue: BatchQueue, config: dict[str, Any], handler: BatchHandler) -> None:
        batch = queue.take(self.policy.max_batch)  # taken before any await: no double flush
        if not batch:
            return
        async with self._inference_lock:
            batch = [r for r in batch if not r.future.done()]  # cancelled while waiting
            if not batch:
                return
            try:
                outputs = await asyncio.to_thread(handler, [r.item for r in batch], config)
                if len(outputs) != len(batch):
                    raise ServerError(
                        f"batch handler returned {len(outputs)} outputs for {len(batch)} inputs"
                    )
            except Exception as exc:  # fail every request of this batch; the server lives on
                for request in batch:
                    if not request.future.done():
                        request.future.set_exception(exc)
                return
            finally:
                self.forward_passes += 1
                self.batch_sizes.append(len(batch))
        for request, output in zip(batch, outputs, strict=True):
            if not request.future.done():
                request.future.set_result(output)
                self.requests_served += 1

    def stats(self) -> dict[str, Any]:
        return {
            "policy": self.policy.kind,
            "forward_passes": self.forward_passes,
            "requests_served": self.requests_served,
            "attached": len(self.clients),
        }
