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
The rows of a run being certified (``BatchAuditor.certify``) are all recomputed alone, and
their requests wait for that: they are served the alone result, never the batched one.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from agentcanvas.errors import ServerError
from agentcanvas.server.batch_audit import AuditPlan, BatchAuditor
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
            plan: AuditPlan | None = None
            try:
                await _until_done(forward)
            finally:  # also when this caller was cancelled: the others get their outputs
                queue.last_pass_end_s = self._clock()
                self.forward_passes += 1
                self.batch_size_counts[len(batch)] += 1
                plan = self._plan(function_name, batch, forward)
                held = plan.serve_alone if plan is not None else frozenset()
                self.requests_served += _resolve(batch, forward, held)
            if plan is not None:
                await self._audit(function_name, batch, forward.result(), config, handler, plan)

    def _plan(
        self, function_name: str, batch: list[PendingRequest], forward: asyncio.Future[Any]
    ) -> AuditPlan | None:
        """The rows of a batch that ran well to recompute alone (None: no audit)."""
        if self.auditor is None or forward.cancelled() or forward.exception() is not None:
            return None
        if len(forward.result()) != len(batch):
            return None
        return self.auditor.plan_batch(function_name, [r.episode_key for r in batch])

    async def _audit(
        self,
        function_name: str,
        batch: list[PendingRequest],
        outputs: Sequence[Any],
        config: dict[str, Any],
        handler: BatchHandler,
        plan: AuditPlan,
    ) -> None:
        """Recompute the planned rows of a served batch alone, under the inference lock; a
        row held for its alone result gets it (or the error it raised alone).

        A caller cancelled meanwhile still finishes every row: the held requests belong to
        other callers, who wait for them.
        """
        assert self.auditor is not None
        try:
            cancelled = await self._recompute(function_name, batch, outputs, config, handler, plan)
        finally:  # never leave a held request without an answer
            for row in plan.serve_alone:
                if not batch[row].future.done():
                    batch[row].future.set_exception(ServerError("its alone recomputation failed"))
        if cancelled:
            raise asyncio.CancelledError

    async def _recompute(
        self,
        function_name: str,
        batch: list[PendingRequest],
        outputs: Sequence[Any],
        config: dict[str, Any],
        handler: BatchHandler,
        plan: AuditPlan,
    ) -> bool:
        """Each planned row alone, compared and (if held) served; whether it was cancelled."""
        assert self.auditor is not None
        cancelled = False
        for row in plan.rows:
            request = batch[row]
            alone = asyncio.get_running_loop().run_in_executor(
                None, handler, [request.item], config
            )
            try:
                await _until_done(alone)
            except asyncio.CancelledError:
                cancelled = True
            except Exception:  # read from the future below
                pass
            self.audit_passes += 1
            error = None if alone.cancelled() else alone.exception()
            result = None if alone.cancelled() or error is not None else alone.result()
            if result is None or len(result) != 1:
                reason = f"{type(error).__name__}: {error}" if error else "not one output"
                self.auditor.record_failure(
                    function_name, reason, request.episode_key, request.client, len(batch)
                )
                served: tuple[Any, BaseException | None] = (
                    None,
                    error or ServerError(f"the row recomputed alone gave {reason}"),
                )
            else:
                self.auditor.record(
                    function_name,
                    outputs[row],
                    result[0],
                    request.episode_key,
                    request.client,
                    len(batch),
                    row,
                )
                served = (result[0], None)
            if row in plan.serve_alone and not request.future.done():
                if served[1] is not None:
                    request.future.set_exception(served[1])
                else:
                    request.future.set_result(served[0])
                    self.requests_served += 1
        return cancelled

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


def _resolve(
    batch: list[PendingRequest], forward: asyncio.Future[Any], held: frozenset[int] = frozenset()
) -> int:
    """Hand each request its output, or the batch's error to each; returns outputs handed.

    The rows in ``held`` (a certified run's) wait for their output computed alone."""
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
    for row, (request, output) in enumerate(zip(batch, outputs, strict=True)):
        if row not in held and not request.future.done():  # its caller may have gone
            request.future.set_result(output)
            served += 1
    return served
