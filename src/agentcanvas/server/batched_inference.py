"""BatchedInferenceServer: coalesce concurrent calls of K workers into one forward pass.

Calls are keyed by ``(function_name, config_hash)``: identical configs share one queue,
different checkpoints stay apart. A server-level ``_inference_lock`` keeps one forward pass
in flight (peak device memory bounded by one batch). Each request has its own future; the
number of outputs is checked against the inputs; a failing batch fails each of its requests
and the server lives on; cancelled requests are dropped before the forward pass.

No background task: every waiting caller may flush its queue when it is due, so whoever
waits longest does the work and nothing is left without an owner. A batch is taken from its
queue only once the lock is held, so requests that queued while another pass ran join the
next pass. A caller cancelled while its pass runs in a thread still waits for the pass (the
lock covers it to the end) and hands the other requests their outputs before re-raising.

With a ``BatchAuditor`` (``server.batch_audit``) every function's batch invariance is
audited: after a sampled batch of more than one request has handed out its outputs, one of
its rows is recomputed alone, still under the inference lock, and compared bit for bit; a
function found batch-dependent (here or by its start-up check) runs per request from then on.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from agentcanvas.errors import ServerError
from agentcanvas.server.batch_audit import BatchAuditor
from agentcanvas.server.batching import BatchQueue, FlushPolicy, PendingRequest, flush_due_at

__all__ = ["BatchHandler", "BatchedInferenceServer", "config_hash"]

BatchHandler = Callable[[list[Any], dict[str, Any]], Sequence[Any]]


def config_hash(config: dict[str, Any]) -> str:
    """A stable hash of a node config (sorted JSON)."""
    text = json.dumps(config, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class BatchedInferenceServer:
    """Coalesces requests per key under a flush policy; counts forward passes."""

    def __init__(
        self,
        policy: FlushPolicy | None = None,
        clock: Callable[[], float] = time.monotonic,
        auditor: BatchAuditor | None = None,
    ) -> None:
        self.policy = policy or FlushPolicy()
        self.auditor = auditor
        self._per_request = FlushPolicy(kind="none", max_batch=1)
        self._clock = clock
        self._queues: dict[tuple[str, str], BatchQueue] = {}
        self._inference_lock = asyncio.Lock()
        self.clients: set[str] = set()
        self.forward_passes = 0
        self.requests_served = 0
        self.batch_size_counts: Counter[int] = Counter()
        self.audit_passes = 0

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
        episode_key: str = "",
    ) -> Any:
        """Queue ``item``; resolve with its output once its batch has run."""
        key = (function_name, config_hash(config))
        queue = self._queues.setdefault(key, BatchQueue())
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        queue.pending.append(PendingRequest(client, self._clock(), item, future, episode_key))
        try:
            while not future.done():
                policy = self._policy(function_name)
                due = flush_due_at(policy, queue, len(self.clients), self._clock())
                if due is None:
                    break  # taken into a batch that another caller is running
                delay = due - self._clock()
                if delay <= 0:
                    await self._flush(function_name, queue, config, handler)
                else:
                    await asyncio.wait([future], timeout=delay)
            return await future
        except asyncio.CancelledError:
            future.cancel()  # dropped from its batch before the forward pass
            raise

    def _policy(self, function_name: str) -> FlushPolicy:
        """Per request (one pass per request, at once) for a function found batch-dependent."""
        if self.auditor is not None and self.auditor.per_request(function_name):
            return self._per_request
        return self.policy

    async def _flush(
        self, function_name: str, queue: BatchQueue, config: dict[str, Any], handler: BatchHandler
    ) -> None:
        """Run one forward pass of this queue's oldest requests, under the inference lock."""
        async with self._inference_lock:
            # Decided again and taken under the lock, with no await before the pass starts:
            # requests that queued while a pass ran join this one, the clients of a pass of
            # this queue that just ended get their cap to come back, and no two callers take
            # the same request.
            now_s = self._clock()
            policy = self._policy(function_name)
            due = flush_due_at(policy, queue, len(self.clients), now_s)
            if due is None or due > now_s:
                return
            batch = queue.take(1 if policy.kind == "none" else policy.max_batch)
            forward = asyncio.get_running_loop().run_in_executor(
                None, handler, [r.item for r in batch], config
            )
            try:
                await _until_done(forward)
            finally:  # also when this caller was cancelled: the others get their outputs
                queue.last_pass_end_s = self._clock()
                self.forward_passes += 1
                self.batch_size_counts[len(batch)] += 1
                self.requests_served += _resolve(batch, forward)
            if self.auditor is not None and not forward.cancelled() and not forward.exception():
                await self._audit(function_name, batch, forward.result(), config, handler)

    async def _audit(
        self,
        function_name: str,
        batch: list[PendingRequest],
        outputs: Sequence[Any],
        config: dict[str, Any],
        handler: BatchHandler,
    ) -> None:
        """Recompute the sampled row of a served batch alone; runs under the inference lock."""
        assert self.auditor is not None
        if len(outputs) != len(batch):
            return
        row = self.auditor.plan(function_name, [r.episode_key for r in batch])
        if row is None:
            return
        request = batch[row]
        alone = asyncio.get_running_loop().run_in_executor(None, handler, [request.item], config)
        with contextlib.suppress(Exception):  # read from the future below
            await _until_done(alone)
        self.audit_passes += 1
        error = alone.exception()
        if error is not None or len(alone.result()) != 1:
            reason = f"{type(error).__name__}: {error}" if error else "not one output"
            self.auditor.record_failure(
                function_name, reason, request.episode_key, request.client, len(batch)
            )
            return
        self.auditor.record(
            function_name,
            outputs[row],
            alone.result()[0],
            request.episode_key,
            request.client,
            len(batch),
            row,
        )

    def stats(self) -> dict[str, Any]:
        return {
            "policy": self.policy.kind,
            "forward_passes": self.forward_passes,
            "requests_served": self.requests_served,
            "attached": len(self.clients),
            "batch_sizes": {str(n): count for n, count in sorted(self.batch_size_counts.items())},
            "audit_passes": self.audit_passes,
        }


async def _until_done(forward: asyncio.Future[Any]) -> None:
    """Wait for a forward pass running in a thread, even through the caller's cancellation.

    The thread cannot be stopped, so the inference lock must cover it to the end and the
    other requests of its batch must still get their outputs; the cancellation is re-raised
    once the pass is over.
    """
    cancelled = False
    while not forward.done():
        try:
            await asyncio.shield(forward)
        except asyncio.CancelledError:
            if forward.cancelled():
                raise
            cancelled = True
    if cancelled:
        raise asyncio.CancelledError


def _resolve(batch: list[PendingRequest], forward: asyncio.Future[Any]) -> int:
    """Hand each request its output, or the batch's error to each; returns outputs handed."""
    error = (
        ServerError("the forward pass was cancelled")
        if forward.cancelled()
        else (forward.exception())
    )
    outputs: Sequence[Any] = () if error is not None else forward.result()
    if error is None and len(outputs) != len(batch):
        error = ServerError(
            f"batch handler returned {len(outputs)} outputs for {len(batch)} inputs"
        )
    if error is not None:  # fail every request of this batch; the server lives on
        for request in batch:
            if not request.future.done():
                request.future.set_exception(error)
        return 0
    served = 0
    for request, output in zip(batch, outputs, strict=True):
        if not request.future.done():  # its caller may have gone meanwhile
            request.future.set_result(output)
            served += 1
    return served
