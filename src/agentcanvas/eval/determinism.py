"""A run's determinism block: what its shared servers say about every batched function.

At the start of a run (``collect_determinism``) each shared server of the graph reports its
node set's own modes (the ``determinism`` hook) and the state of its batched functions; at
the end (``finish_determinism``) the run asks again with its run id, and learns from the
server's audit whether any function was found batch-dependent meanwhile and which of this
run's episodes were served in shared batches (``server.batch_audit``).

``guaranteed`` is true only when every batched function the graph uses passed its start-up
check and no mismatch was ever found; otherwise each function that is not gets a reason
(``batched function <nodeset.node>: ...``), which the runner turns into ``guaranteed: false``.
"""

from __future__ import annotations

from typing import Any

import httpx

from agentcanvas.eval.config import BatchedFunctionInfo, DeterminismInfo
from agentcanvas.graph.model import Graph
from agentcanvas.server import protocol
from agentcanvas.server.registry import WorkspaceComponentRegistry

REASON_PREFIX = "batched function "
AUDIT_TIMEOUT_S = 10.0


async def collect_determinism(
    registry: WorkspaceComponentRegistry, graph: Graph
) -> DeterminismInfo:
    """Ask each shared server of the graph which modes it measured and checked at start-up."""
    info = DeterminismInfo()
    for name in registry.shared_in(graph):
        handle = registry.bound(name) or registry.local_instance(name)
        modes = await handle.determinism()
        for node, mode in modes.items():
            info.shared_server_modes[f"{name}.{node}"] = mode
            if "failed" in mode:
                info.reasons.append(f"{name}.{node}: batch-invariance check failed ({mode})")
    await finish_determinism(registry, graph, "", info)
    return info


async def finish_determinism(
    registry: WorkspaceComponentRegistry, graph: Graph, run_id: str, info: DeterminismInfo
) -> None:
    """Refresh ``info.batched_functions`` and their reasons from the servers' audits."""
    info.reasons = [r for r in info.reasons if not r.startswith(REASON_PREFIX)]
    for nodeset, nodes in batched_functions(registry, graph).items():
        report = await _server_report(registry, nodeset, run_id)
        for node in nodes:
            name = f"{nodeset}.{node}"
            try:
                entry, reason = _entry(name, report, node)
            except (KeyError, TypeError, ValueError, AttributeError) as exc:
                reason = f"the server's audit report is malformed ({type(exc).__name__}: {exc})"
                entry = BatchedFunctionInfo(mode="unknown", verified=False, verified_by=reason)
            info.batched_functions[name] = entry
            if reason:
                info.reasons.append(f"{REASON_PREFIX}{name}: {reason}")
    info.guaranteed = not info.reasons


def batched_functions(registry: WorkspaceComponentRegistry, graph: Graph) -> dict[str, list[str]]:
    """The batched nodes of the graph's shared node sets: ``{nodeset: [node, ...]}``."""
    used: dict[str, list[str]] = {}
    shared = set(registry.shared_in(graph))
    for node in graph.nodes:
        nodeset, _, name = node.type.partition(".")
        spec = registry.manifest(nodeset).node_type(name) if nodeset in shared else None
        if spec is not None and spec.batched and name not in used.get(nodeset, []):
            used.setdefault(nodeset, []).append(name)
    return used


async def _server_report(
    registry: WorkspaceComponentRegistry, nodeset: str, run_id: str
) -> dict[str, Any] | str:
    """The server's ``/batch_audit`` for this run, or why it could not be read."""
    handle = registry.bound(nodeset)
    audit = getattr(handle, "batch_audit", None)  # the Ray engine's model actors
    if callable(audit):
        audited: dict[str, Any] = await audit(run_id)
        return audited
    url = getattr(handle, "url", None)
    if not isinstance(url, str):
        return "in_process"
    try:
        async with httpx.AsyncClient(base_url=url, timeout=AUDIT_TIMEOUT_S) as client:
            response = await client.get(protocol.BATCH_AUDIT, params={"run": run_id})
            response.raise_for_status()
            report: dict[str, Any] = response.json()
            return report
    except (httpx.HTTPError, ValueError) as exc:
        return f"the server's audit could not be read ({type(exc).__name__}: {exc})"


def _entry(name: str, report: dict[str, Any] | str, node: str) -> tuple[BatchedFunctionInfo, str]:
    """The function's block entry and, when it is not verified, the reason."""
    if report == "in_process":
        return BatchedFunctionInfo(
            mode="in_process", verified=True, verified_by="in-process: every call is a batch of one"
        ), ""
    found = report.get("functions", {}).get(node) if isinstance(report, dict) else None
    if found is None:
        why = report if isinstance(report, str) else "the server does not report it"
        return BatchedFunctionInfo(mode="unknown", verified=False, verified_by=why), why
    run = found.get("run", {})
    mismatch = found.get("mismatch")
    entry = BatchedFunctionInfo(
        mode=_mode(found, run),
        verified=bool(found["verified"]),
        verified_by=str(found["verified_by"]),
        batches_audited=int(found.get("batches_audited", 0)),
        batched_requests=int(run.get("batched_requests", 0)),
        mismatch=None if mismatch is None else f"{mismatch['found_by']}: {mismatch['detail']}",
        mismatch_episode_key=(mismatch or {}).get("episode_key") or None,
        first_episode_affected=run.get("first_batched_episode") if mismatch else None,
    )
    return entry, _reason(entry, run)


def _mode(found: dict[str, Any], run: dict[str, Any]) -> str:
    if found["mode"] == "per_request" or found["verified"]:
        return str(found["mode"])
    return "audited" if run.get("audited_batches", 0) > 0 else "unverified"


def _reason(entry: BatchedFunctionInfo, run: dict[str, Any]) -> str:
    if entry.mismatch is not None:
        if not entry.batched_requests:
            served = "no episode of this run was served in a shared batch"
        else:
            first = entry.first_episode_affected
            served = (
                f"{entry.batched_requests} of this run's requests were served in shared "
                "batches" + (f", from episode {first} on" if first is not None else "")
            )
        return (
            f"its outputs depend on the batch ({entry.mismatch}); it runs per request "
            f"from then on; {served}"
        )
    if entry.verified:
        return ""
    audited = run.get("audited_batches", 0)
    sampled = (
        f"the audit sampled {audited} of this run's batches without a mismatch, which "
        "does not prove invariance"
        if audited
        else "no batch of this run was audited"
    )
    return (
        f"not verified: it declares no example inputs for the start-up check "
        f"(batched_node(..., examples=[...])); {sampled}"
    )
