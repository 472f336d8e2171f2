"""Batch invariance of every batched function a shared server runs: checked, audited, reported.

Three layers, all per function (``NODESET.batched_node``):

1. **Start-up check.** When the function declares example inputs, the server runs
   ``nodes.batch_check.check_examples`` on them before serving: every batch size
   ``1..max_batch``, every position, bit for bit against each example alone. A function
   that fails (or raises) runs **per request** for the server's whole life.
2. **Audit.** While serving, a deterministic sample of the batches of more than one request
   is re-checked: one row, picked by a seeded hash of (seed, function, batch number), is
   recomputed alone and compared bit for bit. The first batch of more than one request is
   always audited, then ``AGENTCANVAS_AUDIT_RATE`` of them (default 1 in 16; 0 turns the
   audit off, 1 audits every batch). On the first mismatch the function drops to per-request
   mode for the rest of the server's life.
   A run may ask to be **certified** (``certify(run_id)``, ``POST /batch_audit/certify``):
   then every row of its requests in a batch of more than one is recomputed alone and
   compared, and the request is served the ALONE result, so its records equal per-request
   results even before a mismatch is found. Other runs sharing the batch keep the sampled
   audit (and their rows their batched outputs).
3. **Report.** ``report(run_key)`` says, per function: the mode it runs in, how it was
   verified, the audit's counts, the mismatch (if any: where, and which request showed it)
   and, for one run (the ``<run_id>`` part of its episode keys ``<run_id>:<index>``), how
   many of that run's requests were served an output computed in a shared batch and the
   first such episode (the first one the mismatch may have affected), how many of its
   batches there were (M) and how many were audited (k), how many of its rows were
   recomputed and served alone, and whether the run is being certified.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agentcanvas import envsettings
from agentcanvas.errors import ConfigError
from agentcanvas.nodes.base import CallContext, LocalNodeSet
from agentcanvas.nodes.batch_check import (
    CHECK_CLIENT,
    StartupCheck,
    check_examples,
    describe_difference,
    same_bits,
)

__all__ = [
    "DEFAULT_AUDIT_RATE",
    "AuditPlan",
    "AuditSettings",
    "BatchAuditor",
    "FunctionAudit",
    "Mismatch",
    "RunUse",
    "audit_settings_from_env",
    "build_auditor",
    "split_episode_key",
    "startup_check",
]

DEFAULT_AUDIT_RATE = envsettings.AUDIT_RATE.default


@dataclass(frozen=True)
class AuditSettings:
    """What share of multi-request batches is audited, and the seed that picks rows."""

    rate: float = DEFAULT_AUDIT_RATE
    seed: int = 0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.rate) and 0.0 <= self.rate <= 1.0):
            raise ConfigError(f"audit rate must be from 0 to 1, not {self.rate!r}")


def audit_settings_from_env() -> AuditSettings:
    """``AGENTCANVAS_AUDIT_RATE`` and ``AGENTCANVAS_AUDIT_SEED`` (declared with their ranges
    in ``envsettings``); a bad one is a ConfigError naming it."""
    return AuditSettings(rate=envsettings.AUDIT_RATE.get(), seed=envsettings.AUDIT_SEED.get())


@dataclass(frozen=True)
class Mismatch:
    """The first evidence that a function's output depends on its batch."""

    found_by: str  # "start-up check" | "audit"
    detail: str
    episode_key: str = ""
    client: str = ""


@dataclass
class RunUse:
    """One run's requests in batches of more than one while the function batched."""

    batched_requests: int = 0
    """Requests served the output computed in their batch."""
    first_batched_episode: int | None = None
    """The first episode among those."""
    audited_batches: int = 0
    batches: int = 0
    """Batches of more than one request that held a request of this run."""
    rows_alone: int = 0
    """Rows of a certified run recomputed alone and served the alone result."""


@dataclass(frozen=True)
class AuditPlan:
    """What to recompute alone after a served batch, and which of those rows to serve alone."""

    rows: tuple[int, ...]
    serve_alone: frozenset[int]


@dataclass
class FunctionAudit:
    """Everything the server knows about one batched function's batch invariance."""

    name: str
    batch_mode: str
    """How the node set runs a batch (its ``determinism`` hook, e.g. ``padded``) or ``batched``."""
    check: StartupCheck | None
    check_error: str | None = None
    per_request: bool = False
    batches: int = 0
    """Batches of more than one request served in batched mode."""
    audited: int = 0
    mismatch: Mismatch | None = None
    runs: dict[str, RunUse] = field(default_factory=dict)

    @property
    def verified(self) -> bool:
        """Passed its start-up check and no audit has found a mismatch since."""
        return self.check is not None and self.check.ok and self.mismatch is None

    def verified_by(self) -> str:
        if self.check_error is not None:
            return f"start-up check failed: the function raised: {self.check_error}"
        if self.check is not None:
            return self.check.summary()
        return "no start-up check (the function declares no example inputs)"


def split_episode_key(key: str) -> tuple[str, int | None]:
    """``<run_id>:<index>`` → (run_id, index); any other key → (key, None)."""
    run, _, index = key.rpartition(":")
    return (run, int(index)) if run and index.isdigit() else (key, None)


class BatchAuditor:
    """Per-function start-up checks, the running audit, and what a run is told about them."""

    def __init__(self, settings: AuditSettings | None = None) -> None:
        self.settings = settings or AuditSettings()
        self.functions: dict[str, FunctionAudit] = {}
        self.certifying: set[str] = set()
        """Runs whose every batched row is recomputed alone (and served alone)."""

    def certify(self, run: str, on: bool = True) -> None:
        """Start (or, at the run's end, stop) auditing every batched row of ``run``."""
        if on:
            self.certifying.add(run)
        else:
            self.certifying.discard(run)

    def register(self, audit: FunctionAudit) -> None:
        if (audit.check is not None and not audit.check.ok) or audit.check_error is not None:
            audit.per_request = True
            if audit.mismatch is None:
                detail = audit.check_error or (audit.check.first_mismatch if audit.check else "")
                audit.mismatch = Mismatch("start-up check", detail or "")
        self.functions[audit.name] = audit

    def per_request(self, function: str) -> bool:
        audit = self.functions.get(function)
        return audit is not None and audit.per_request

    def plan(self, function: str, episode_keys: Sequence[str]) -> int | None:
        """Record a served batch; the sampled row to recompute alone, or None (no audit)."""
        return self._sampled_row(function, episode_keys, self.plan_batch(function, episode_keys))

    def plan_batch(self, function: str, episode_keys: Sequence[str]) -> AuditPlan | None:
        """Record a served batch: every row of a certified run, and the sampled row, are to
        be recomputed alone (None: none is); a certified run's rows are served alone."""
        audit = self.functions.get(function)
        if audit is None or audit.per_request or len(episode_keys) < 2:
            return None
        audit.batches += 1
        alone: set[int] = set()
        for row, key in enumerate(episode_keys):
            run, index = split_episode_key(key)
            use = audit.runs.setdefault(run, RunUse())
            if run in self.certifying:
                alone.add(row)
                use.rows_alone += 1
                continue
            use.batched_requests += 1
            if index is not None and (
                use.first_batched_episode is None or index < use.first_batched_episode
            ):
                use.first_batched_episode = index
        runs = {split_episode_key(key)[0] for key in episode_keys}
        for run in runs:
            audit.runs[run].batches += 1
        rows = set(alone)
        n, rate = audit.batches, self.settings.rate
        if rate > 0.0 and (n == 1 or math.floor(n * rate) != math.floor((n - 1) * rate)):
            digest = hashlib.blake2b(f"{self.settings.seed}:{function}:{n}".encode(), digest_size=8)
            rows.add(int.from_bytes(digest.digest(), "little") % len(episode_keys))
        if not rows:
            return None
        audit.audited += 1
        for run in runs:
            audit.runs[run].audited_batches += 1
        return AuditPlan(tuple(sorted(rows)), frozenset(alone))

    def _sampled_row(
        self, function: str, episode_keys: Sequence[str], plan: AuditPlan | None
    ) -> int | None:
        """The row of ``plan`` the sampled audit picked (not one a certified run added)."""
        if plan is None:
            return None
        sampled = [row for row in plan.rows if row not in plan.serve_alone]
        return sampled[0] if sampled else (plan.rows[0] if plan.rows else None)

    def record(
        self,
        function: str,
        batched: Any,
        alone: Any,
        episode_key: str,
        client: str,
        size: int,
        position: int,
    ) -> bool:
        """Compare an audited row with its recomputation alone; a mismatch ends batching."""
        audit = self.functions[function]
        if same_bits(batched, alone):
            return True
        if audit.mismatch is None:
            detail = (
                f"position {position} of a batch of {size}: {describe_difference(batched, alone)}"
            )
            audit.mismatch = Mismatch("audit", detail, episode_key, client)
        audit.per_request = True
        return False

    def record_failure(
        self, function: str, error: str, episode_key: str, client: str, size: int
    ) -> None:
        """The row raised when run alone although its batch did not: batch-dependent too."""
        audit = self.functions[function]
        if audit.mismatch is None:
            detail = f"a row of a batch of {size} raised when run alone: {error}"
            audit.mismatch = Mismatch("audit", detail, episode_key, client)
        audit.per_request = True

    def report(self, run_key: str = "") -> dict[str, Any]:
        """The JSON a run collects at its end (``GET /batch_audit?run=<run_id>``)."""
        return {
            "audit_rate": self.settings.rate,
            "audit_seed": self.settings.seed,
            "functions": {
                name: _describe(a, run_key, run_key in self.certifying)
                for name, a in self.functions.items()
            },
        }


def _describe(audit: FunctionAudit, run_key: str, certifying: bool) -> dict[str, Any]:
    use = audit.runs.get(run_key, RunUse()) if run_key else RunUse()
    mismatch = audit.mismatch
    return {
        "batch_mode": audit.batch_mode,
        "mode": "per_request" if audit.per_request else audit.batch_mode,
        "verified": audit.verified,
        "verified_by": audit.verified_by(),
        "batches": audit.batches,
        "batches_audited": audit.audited,
        "mismatch": None
        if mismatch is None
        else {
            "found_by": mismatch.found_by,
            "detail": mismatch.detail,
            "episode_key": mismatch.episode_key,
            "client": mismatch.client,
        },
        "run": {
            "batched_requests": use.batched_requests,
            "first_batched_episode": use.first_batched_episode,
            "audited_batches": use.audited_batches,
            "batches": use.batches,
            "rows_alone": use.rows_alone,
            "certify": certifying,
        },
    }


def build_auditor(
    instance: LocalNodeSet, max_batch: int, settings: AuditSettings | None = None
) -> BatchAuditor:
    """Register every batched function of ``instance``, running each start-up check."""
    auditor = BatchAuditor(settings)
    hook = instance.nodeset.determinism
    modes = dict(hook(instance.state)) if hook is not None else {}
    for spec in instance.manifest.nodes:
        if not spec.batched:
            continue
        mode = modes.get(spec.name, "batched")
        check, error = startup_check(instance, spec.name, max_batch)
        auditor.register(FunctionAudit(spec.name, mode, check, error))
    return auditor


def startup_check(
    instance: LocalNodeSet, node_name: str, max_batch: int
) -> tuple[StartupCheck | None, str | None]:
    """Run the examples check of one function: (report, None), (None, error) or (None, None)."""
    definition = instance.nodeset.definition(node_name)
    if not definition.examples or definition.batch_fn is None:
        return None, None
    batch_fn, examples = definition.batch_fn, definition.examples
    config = instance.nodeset.validate_config(node_name, {})

    def run_batch(indices: Sequence[int]) -> Sequence[Any]:
        keys = [f"{CHECK_CLIENT}:{i}" for i in indices]
        items = [(dict(examples[i]), _check_ctx(node_name, i)) for i in indices]
        try:
            return batch_fn(items, config, instance.state)
        finally:
            evict = instance.nodeset.evict
            if evict is not None:  # caches keyed by episode must not answer the next batch
                for key in set(keys):
                    evict(instance.state, key)

    try:
        return check_examples(run_batch, len(examples), max_batch), None
    except Exception as exc:  # a function that crashes on its own examples is not verified
        return None, f"{type(exc).__name__}: {exc}"


def _check_ctx(node_name: str, index: int) -> CallContext:
    """The context of example ``index``: the same whether it runs alone or in a batch."""
    return CallContext(
        node_id=node_name,
        step=0,
        episode_key=f"{CHECK_CLIENT}:{index}",
        episode_seed=index,
        client=CHECK_CLIENT,
    )
