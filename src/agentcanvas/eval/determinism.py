"""A run's determinism block: what its shared servers say about every batched function.

At the start of a run (``collect_determinism``) each shared server of the graph reports its
node set's own modes (the ``determinism`` hook) and the state of its batched functions; when
the run starts (``start_determinism``) a ``--certify`` run asks each of them to audit every
batched row of its episodes; at the end (``finish_determinism``) the run asks again with its
run id, and learns from the server's audit whether any function was found batch-dependent
meanwhile and how this run's requests were served (``server.batch_audit``).

Each batched function gets a level (rule 7 of the design's determinism rules), and the run
the worst of them (``DeterminismInfo.settle``):

- ``certified``: no request of this run got an output computed in a batch of more than one:
  each ran alone (a batch of one, e.g. every ``-w 1`` run, or an in-process node set), or
  ``--certify`` recomputed its row alone, matched it bit for bit and served the alone result;
- ``sampled``: some were served batched outputs, and the start-up examples passed and/or k of
  the run's M batches were audited, without a mismatch (the block says what that rules out);
- ``unverified``: served batched outputs with no example and no audited batch (e.g. the audit
  off), or the server's report could not be read;
- ``broken``: a mismatch was seen (start-up check or audit); the function runs per request
  since, and the block says from which episode on the run was affected.

Before the run's end the level is prospective: what the run will get if it is batched.
Every function that is not ``certified`` gets a reason (``batched function <nodeset.node>:
...``); the runner adds the wall-clock timeouts.
"""

from __future__ import annotations

from typing import Any

from agentcanvas.errors import ServerError, UserInputError
from agentcanvas.eval.config import BatchedFunctionInfo, DeterminismInfo, DeterminismLevel
from agentcanvas.graph.model import Graph
from agentcanvas.nodes.handles import BatchAudited
from agentcanvas.server.deadlines import call_deadline
from agentcanvas.server.registry import WorkspaceComponentRegistry

REASON_PREFIX = "batched function "
EXTERNAL_PREFIX = "external function "
CERTIFY_PREFIX = "--certify: "
AUDIT_TIMEOUT_S = 10.0
CONFIDENCE = 0.95
AUDIT_OFF = "the audit was off (AGENTCANVAS_AUDIT_RATE=0)"
NOT_RULED_OUT = (
    "a dependence that shows in fewer batches, or only for inputs unlike the examples, is "
    "not ruled out"
)


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
    await finish_determinism(registry, graph, "", info, final=False)
    return info


async def start_determinism(
    registry: WorkspaceComponentRegistry,
    graph: Graph,
    run_id: str,
    certify: bool,
    info: DeterminismInfo,
) -> None:
    """Before the run's first episode: with ``certify``, have every shared server that runs a
    batched function of the graph audit every batched row of this run (and serve it alone)."""
    info.certify = certify
    info.reasons = [r for r in info.reasons if not r.startswith(CERTIFY_PREFIX)]
    if certify:
        for nodeset in batched_functions(registry, graph):
            why = await _certify(registry, nodeset, run_id, on=True)
            if why:
                info.reasons.append(f"{CERTIFY_PREFIX}{nodeset} could not be asked: {why}")
    await finish_determinism(registry, graph, run_id, info, final=False)


async def finish_determinism(
    registry: WorkspaceComponentRegistry,
    graph: Graph,
    run_id: str,
    info: DeterminismInfo,
    *,
    final: bool = True,
) -> None:
    """Refresh ``info.batched_functions``, their levels and reasons from the servers' audits;
    ``final`` at the run's end (a certifying run then stops being certified)."""
    info.reasons = [r for r in info.reasons if not r.startswith(REASON_PREFIX)]
    for nodeset, nodes in batched_functions(registry, graph).items():
        report = await _server_report(registry, nodeset, run_id)
        for node in nodes:
            name = f"{nodeset}.{node}"
            try:
                entry = _entry(report, node, final)
            except (KeyError, TypeError, ValueError, AttributeError) as exc:
                reason = f"the server's audit report is malformed ({type(exc).__name__}: {exc})"
                entry = BatchedFunctionInfo(
                    mode="unknown",
                    verified=False,
                    verified_by=reason,
                    level="unverified",
                    level_detail=reason,
                )
            _cap_by_own_check(entry, info.shared_server_modes.get(name, ""))
            info.batched_functions[name] = entry
            if entry.level != "certified":
                info.reasons.append(f"{REASON_PREFIX}{name}: {entry.level}: {entry.level_detail}")
        if final and info.certify and run_id:
            await _certify(registry, nodeset, run_id, on=False)
    info.reasons = [r for r in info.reasons if not r.startswith(EXTERNAL_PREFIX)]
    for name, entry in (await external_functions(registry, graph)).items():
        info.batched_functions[name] = entry
        info.reasons.append(f"{EXTERNAL_PREFIX}{name}: {entry.level}: {entry.level_detail}")
    info.settle()


async def external_functions(
    registry: WorkspaceComponentRegistry, graph: Graph
) -> dict[str, BatchedFunctionInfo]:
    """The graph's nodes whose answers come from outside the run (``external`` node types:
    a policy server by URL), each ``unverified`` — nothing here sees how that server
    computes — or ``sampled`` when its node set says every request of this process was
    sent twice and answered bit-identically (its ``determinism`` hook: "repeat-checked")."""
    found: dict[str, BatchedFunctionInfo] = {}
    for node in graph.nodes:
        nodeset, _, name = node.type.partition(".")
        spec = registry.manifest(nodeset).node_type(name)
        key = f"{nodeset}.{name}"
        if spec is None or not spec.external or key in found:
            continue
        handle = registry.bound(nodeset) or registry.local_instance(nodeset)
        said = (await handle.determinism()).get(name, "")
        where = str(node.config.get("url", "")) or "a server outside the run"
        if "repeat-checked" in said:
            level: DeterminismLevel = "sampled"
            detail = (
                f"answers come from {where}, outside the run; every request was sent twice and "
                "answered bit-identically (repeat_check) — a server whose answers depend on its "
                "load in ways two identical requests do not show is not ruled out"
            )
        else:
            level = "unverified"
            detail = (
                f"answers come from {where}, outside the run: nothing checks that it answers an "
                "observation the same way at any load (repeat_check tests it)"
            )
        found[key] = BatchedFunctionInfo(
            mode="external", verified=False, verified_by=said, level=level, level_detail=detail
        )
    return found


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
    """The server's audit report for this run (``/batch_audit``, or a model actor's), or why
    it could not be read; ``in_process`` when no server runs the node set."""
    handle = registry.bound(nodeset)
    if not isinstance(handle, BatchAudited):
        return "in_process"
    try:
        with call_deadline(AUDIT_TIMEOUT_S):
            return await handle.batch_audit(run_id)
    except (ServerError, UserInputError) as exc:
        return f"the server's audit could not be read ({type(exc).__name__}: {exc})"


async def _certify(
    registry: WorkspaceComponentRegistry, nodeset: str, run_id: str, *, on: bool
) -> str:
    """Tell the node set's server to certify ``run_id`` (or stop); why it failed, or ""."""
    handle = registry.bound(nodeset)
    if not isinstance(handle, BatchAudited):
        return ""  # in process: every call is a batch of one
    try:
        with call_deadline(AUDIT_TIMEOUT_S):
            return "" if await handle.batch_certify(run_id, on) else "it keeps no audit"
    except (ServerError, UserInputError) as exc:
        return f"{type(exc).__name__}: {exc}"


def ruled_out_above(k: int, confidence: float = CONFIDENCE) -> float:
    """X = 1 - (1 - confidence)^(1/k): k audited batches without a mismatch rule out, at that
    confidence, that more than this share of batches is batch-dependent."""
    return float(1.0 - (1.0 - confidence) ** (1.0 / k))


def _entry(report: dict[str, Any] | str, node: str, final: bool) -> BatchedFunctionInfo:
    """The function's block entry, with its level and why."""
    if report == "in_process":
        why = "in-process: every call is a batch of one"
        return BatchedFunctionInfo(
            mode="in_process", verified=True, verified_by=why, level="certified", level_detail=why
        )
    found = report.get("functions", {}).get(node) if isinstance(report, dict) else None
    if found is None or "run" not in found:
        why = report if isinstance(report, str) else "the server does not report it"
        return BatchedFunctionInfo(
            mode="unknown", verified=False, verified_by=why, level="unverified", level_detail=why
        )
    run = found["run"]
    mismatch = found.get("mismatch")
    rate = report.get("audit_rate") if isinstance(report, dict) else None
    entry = BatchedFunctionInfo(
        mode=_mode(found, run),
        verified=bool(found["verified"]),
        verified_by=str(found["verified_by"]),
        batches_audited=int(found.get("batches_audited", 0)),
        batched_requests=int(run.get("batched_requests", 0)),
        run_batches=int(run.get("batches", 0)),
        run_batches_audited=int(run.get("audited_batches", 0)),
        rows_alone=int(run.get("rows_alone", 0)),
        certify=bool(run.get("certify", False)),
        audit_rate=None if rate is None else float(rate),
        mismatch=None if mismatch is None else f"{mismatch['found_by']}: {mismatch['detail']}",
        mismatch_episode_key=(mismatch or {}).get("episode_key") or None,
        first_episode_affected=run.get("first_batched_episode") if mismatch else None,
    )
    entry.level, entry.level_detail = function_level(entry, final)
    if entry.level == "sampled" and entry.run_batches_audited:
        entry.ruled_out_above = ruled_out_above(entry.run_batches_audited)
    return entry


def function_level(entry: BatchedFunctionInfo, final: bool = True) -> tuple[DeterminismLevel, str]:
    """A function's level and why, from what its server reported for this run (``final``:
    at the run's end; before it, what the run will get if its requests are batched)."""
    if entry.mismatch is not None:
        return "broken", _broken(entry)
    if entry.certify and entry.batched_requests == 0:
        if not final:
            return "certified", (
                "--certify: every batched row of this run is recomputed alone and served alone"
            )
        if entry.rows_alone:
            return "certified", (
                f"every one of this run's {entry.rows_alone} rows in shared batches was "
                "recomputed alone and matched bit for bit (each was served its alone result)"
            )
    if final and entry.batched_requests == 0:
        return "certified", (
            "no request of this run was served in a batch of more than one (a batch of one "
            "is alone)"
        )
    examples = entry.verified
    k, m, rate = entry.run_batches_audited, entry.run_batches, entry.audit_rate
    off = f" ({AUDIT_OFF})" if rate == 0 else ""
    batches = f"this run's {m} shared batches" if final else "this run's shared batches"
    if k:
        x = ruled_out_above(k)
        at = f" (audit rate {rate:g})" if rate is not None else ""
        audit = (
            f"{k} of {batches} were audited{at} without a mismatch: {k} audited batches "
            f"without a mismatch rule out, at 95 % confidence, that more than {x:.1%} of "
            "batches are batch-dependent (X = 1 - 0.05^(1/k))"
        )
    elif final:
        audit = f"none of {batches} was audited{off}"
    elif rate == 0:
        audit = AUDIT_OFF
    else:
        at = f" at audit rate {rate:g}" if rate is not None else ""
        audit = f"the audit samples {batches}{at}"
    if examples or k:
        check = "its start-up check passed on its example inputs" if examples else "no examples"
        return "sampled", (
            f"{check}; {audit}; {NOT_RULED_OUT}; rerun with --certify to recompute every "
            "batched row alone"
        )
    why = "it declares no example inputs for the start-up check (batched_node(..., examples=[...]))"
    return "unverified", f"{why}; {audit}"


def _broken(entry: BatchedFunctionInfo) -> str:
    if not entry.batched_requests:
        served = "no episode of this run was served an output computed in a shared batch"
        if entry.rows_alone:
            served += f" (its {entry.rows_alone} batched rows were served their alone results)"
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


def _cap_by_own_check(entry: BatchedFunctionInfo, mode: str) -> None:
    """A node set whose own invariance check failed (its ``determinism`` hook says so)
    vouches for nothing above unverified."""
    if "failed" in mode and entry.level in ("certified", "sampled"):
        entry.level = "unverified"
        entry.level_detail += f"; the node set's own batch-invariance check failed ({mode})"


def _mode(found: dict[str, Any], run: dict[str, Any]) -> str:
    if found["mode"] == "per_request" or found["verified"]:
        return str(found["mode"])
    return "audited" if run.get("audited_batches", 0) > 0 else "unverified"
