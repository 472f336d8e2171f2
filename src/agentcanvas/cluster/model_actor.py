"""Shared node sets (models) as Ray actors, reached from worker actors through handles.

One :class:`ModelServer` actor per shared node set of a run. It loads the node set as its
server would (that node set alone: ``NodeSetCatalogue.load_one``), runs the same start-up
batch-invariance checks, and serves node calls through the same
:class:`BatchedInferenceServer` (coalescing across the workers attached to it, audit
included). It is an async actor, so concurrent calls
from several workers land in one batch. Inputs and outputs travel wire-encoded, as they do to
a node-set server, so a value reaches the model exactly as on the local engine.

:class:`RayModelHandle` is the ``NodeSetHandle`` a worker's executor calls. A model actor is
created with ``max_restarts``: when it dies Ray restarts it, and the handle retries the call
(with the same inputs: the model is deterministic) until ``retry_s`` runs out, re-attaching
its client after the restart.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from agentcanvas import wire
from agentcanvas.catalogue import NodeSetCatalogue
from agentcanvas.errors import NodeSetError, ServerDiedError
from agentcanvas.nodes.base import CallContext, LocalNodeSet
from agentcanvas.nodes.handles import AttachesClients, BatchAudited
from agentcanvas.nodes.manifest import LoadInfo, NodeSetManifest
from agentcanvas.server.batch_audit import audit_settings_from_env, build_auditor
from agentcanvas.server.batched_inference import BatchedInferenceServer
from agentcanvas.server.batching import policy_from_env
from agentcanvas.server.hosted import call_node
from agentcanvas.server.registry import WorkspaceComponentRegistry
from agentcanvas.server.runtime import fix_numeric_threads

MODEL_RETRY_S = 120.0  # how long a caller keeps retrying a model actor that died


def load_catalogue(
    workspace: str | None, active: str | None, names: Iterable[str]
) -> WorkspaceComponentRegistry:
    """The node sets ``names`` of the shipped workspace (and overlay), each imported alone
    (``NodeSetCatalogue.load_one``, the precedence of a full scan), as a node-set server
    loads its own: no other node set of the workspace is imported."""
    catalogue = NodeSetCatalogue(
        Path(workspace) if workspace else Path.cwd(), Path(active) if active else None
    )
    for name in names:
        catalogue.load_one(name)
    return WorkspaceComponentRegistry(catalogue=catalogue)


class ModelServer:
    """The body of a shared node set's actor (wrapped with ``ray.remote`` by the engine)."""

    def __init__(self, nodeset: str, workspace: str | None, active: str | None) -> None:
        fix_numeric_threads()
        registry = load_catalogue(workspace, active, [nodeset])
        self.instance = LocalNodeSet(registry.nodeset(nodeset))
        policy = policy_from_env()
        auditor = build_auditor(self.instance, policy.max_batch, audit_settings_from_env())
        self.batcher = BatchedInferenceServer(policy, auditor=auditor)

    async def call(self, node: str, config: dict[str, Any], payload: bytes) -> bytes:
        """A node call; the node's failure comes back as ``{"error": ...}`` data."""
        args: dict[str, Any] = wire.loads(payload)  # type: ignore[assignment]
        ctx = CallContext(**args["ctx"])
        try:
            outputs = await call_node(
                self.instance, self.batcher, node, config, args["inputs"], ctx
            )
        except Exception as exc:  # the node's failure is data; the actor lives on
            outputs = {"error": f"{type(exc).__name__}: {exc}"}
        return wire.dumps(outputs)

    async def evict(self, episode_key: str) -> None:
        await self.instance.evict(episode_key)

    async def attach(self, client: str) -> int:
        return self.batcher.attach(client)

    async def detach(self, client: str) -> int:
        return self.batcher.detach(client)

    async def determinism(self) -> dict[str, str]:
        return await self.instance.determinism()

    async def batch_audit(self, run_id: str) -> dict[str, Any]:
        assert self.batcher.auditor is not None
        return self.batcher.auditor.report(run_id)

    async def batch_certify(self, run_id: str, on: bool) -> bool:
        """Audit every batched row of ``run_id`` (served alone), or stop at its end."""
        assert self.batcher.auditor is not None
        self.batcher.auditor.certify(run_id, on)
        return True

    async def stats(self) -> dict[str, Any]:
        return self.batcher.stats()

    async def ping(self) -> str:
        import ray

        return str(ray.get_runtime_context().get_node_id())


class RayModelHandle(AttachesClients, BatchAudited):
    """A NodeSetHandle that calls a :class:`ModelServer` actor; retries across its restarts."""

    def __init__(
        self, name: str, actor: Any, manifest: NodeSetManifest, retry_s: float = MODEL_RETRY_S
    ) -> None:
        self.name = name
        self.actor = actor
        self.manifest = manifest
        self.retry_s = retry_s
        self.clients: set[str] = set()
        self.certifying: set[str] = set()
        self.retries = 0

    async def _invoke(self, method: str, *args: Any) -> Any:
        """``actor.method(*args)``; a dead or restarting actor is retried until ``retry_s``."""
        import ray.exceptions

        deadline = time.monotonic() + self.retry_s
        while True:
            try:
                return await getattr(self.actor, method).remote(*args)
            except ray.exceptions.RayActorError as exc:
                if time.monotonic() > deadline:
                    raise ServerDiedError(
                        f"model actor {self.name!r} did not come back within {self.retry_s:g} s"
                        f" ({type(exc).__name__})"
                    ) from exc
                self.retries += 1
                await asyncio.sleep(0.2)
                await self._reattach()

    async def _reattach(self) -> None:
        """A restarted actor has forgotten its clients and the runs it certifies: tell it
        again (best effort)."""
        import ray.exceptions

        try:
            for client in sorted(self.clients):
                await self.actor.attach.remote(client)
            for run_id in sorted(self.certifying):
                await self.actor.batch_certify.remote(run_id, True)
        except ray.exceptions.RayActorError:
            return

    async def call(
        self, node_name: str, config: dict[str, Any], inputs: dict[str, Any], ctx: CallContext
    ) -> dict[str, Any]:
        payload = wire.dumps({"inputs": inputs, "ctx": ctx.__dict__})
        outputs: dict[str, Any] = wire.loads(await self._invoke("call", node_name, config, payload))  # type: ignore[assignment]
        return outputs

    async def attach(self, client: str) -> int:
        self.clients.add(client)
        return int(await self._invoke("attach", client))

    async def detach(self, client: str) -> int:
        self.clients.discard(client)
        return int(await self._invoke("detach", client))

    async def evict(self, episode_key: str) -> None:
        await self._invoke("evict", episode_key)

    async def determinism(self) -> dict[str, str]:
        modes: dict[str, str] = await self._invoke("determinism")
        return modes

    async def batch_audit(self, run_id: str) -> dict[str, Any]:
        report: dict[str, Any] = await self._invoke("batch_audit", run_id)
        return report

    async def batch_certify(self, run_id: str, on: bool) -> bool:
        (self.certifying.add if on else self.certifying.discard)(run_id)
        return bool(await self._invoke("batch_certify", run_id, on))

    def _no_panel(self) -> NodeSetError:
        return NodeSetError(f"shared node set {self.name!r} has no panel")

    async def panel_change(self, field_name: str, value: Any) -> dict[str, Any]:
        raise self._no_panel()

    async def panel_action(self, action: str) -> dict[str, Any]:
        raise self._no_panel()

    async def panel_load(self) -> LoadInfo:
        raise self._no_panel()

    async def panel_episode(self, fields: list[tuple[str, Any]]) -> LoadInfo:
        raise self._no_panel()

    async def close(self) -> None:
        """The engine owns the actor; a handle has nothing to close."""
