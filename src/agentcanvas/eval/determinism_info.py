"""A run's determinism block: how far its independence of the worker count is checked.

``DeterminismInfo`` is summary.json's ``determinism``; ``BatchedFunctionInfo`` one batched
function of a shared server the run used. (Computed by ``agentcanvas.eval.determinism``.)
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal

from pydantic import BaseModel, Field, computed_field, model_validator

__all__ = ["DETERMINISM_LEVELS", "BatchedFunctionInfo", "DeterminismInfo", "DeterminismLevel"]

DeterminismLevel = Literal["broken", "unverified", "sampled", "certified"]
DETERMINISM_LEVELS: tuple[DeterminismLevel, ...] = ("broken", "unverified", "sampled", "certified")
"""Worst first: a run's level is the worst of its batched functions' levels."""


class BatchedFunctionInfo(BaseModel):
    """One batched function the run used (``nodeset.node``): how a shared server ran it."""

    mode: str = Field(
        description="padded / single / batched (verified, batched), per_request (found "
        "batch-dependent), audited (batched, unverified, the audit found no mismatch in this "
        "run's batches), unverified (batched with no check at all), unknown (server unreachable)."
    )
    verified: bool = Field(description="Passed its start-up check; no mismatch since.")
    verified_by: str = ""
    level: DeterminismLevel = Field(
        default="unverified",
        description="certified: no request of this run got an output computed in a batch of "
        "more than one (each was alone, or --certify recomputed its row alone, matched bit for "
        "bit, and served the alone result); sampled: served in shared batches, and the start-up "
        "examples passed and/or some of this run's batches were audited, without a mismatch; "
        "unverified: served in shared batches with no example and no audited batch, or the "
        "server's report could not be read; broken: a mismatch was seen (start-up check or "
        "audit) and the function runs per request since.",
    )
    level_detail: str = Field(
        default="", description="Why it has its level, in plain words (what the check rules out)."
    )
    batches_audited: int = Field(default=0, description="Over the server's life so far.")
    batched_requests: int = Field(
        default=0,
        description="This run's requests that were served an output computed in a batch of "
        "more than one (rows --certify recomputed alone are not counted: see rows_alone).",
    )
    run_batches: int = Field(
        default=0, description="M: this run's batches of more than one request (batched mode)."
    )
    run_batches_audited: int = Field(
        default=0, description="k: how many of those the audit recomputed a row of, alone."
    )
    rows_alone: int = Field(
        default=0,
        description="This run's rows of such batches recomputed alone and served the alone "
        "result (--certify).",
    )
    certify: bool = Field(
        default=False, description="The server audited every batched row of this run."
    )
    audit_rate: float | None = Field(
        default=None, description="The server's AGENTCANVAS_AUDIT_RATE (0: the audit was off)."
    )
    ruled_out_above: float | None = Field(
        default=None,
        description="Sampled with k > 0 audited batches: X = 1 - 0.05^(1/k), the share of "
        "batch-dependent batches above which k clean audits are ruled out at 95 % confidence.",
    )
    mismatch: str | None = Field(default=None, description="The first evidence of dependence.")
    mismatch_episode_key: str | None = None
    first_episode_affected: int | None = Field(
        default=None,
        description="The first episode of this run served in a shared batch before the "
        "function dropped to per-request mode (None: no episode was).",
    )

    @model_validator(mode="before")
    @classmethod
    def _level_of_old_entries(cls, data: Any) -> Any:
        """An entry written before levels existed: the old "verified" rested on the start-up
        examples, a sample at best; an in-process function ran every call alone."""
        if isinstance(data, dict) and "level" not in data and "mode" in data:
            level = (
                "broken"
                if data.get("mismatch") is not None
                else "certified"
                if data.get("mode") == "in_process"
                else "sampled"
                if data.get("verified")
                else "unverified"
            )
            data = {**data, "level": level}
        return data


class DeterminismInfo(BaseModel):
    """What this run's independence of the worker count rests on: a level, and why.

    ``level`` is the worst of its batched functions' levels (``certified`` when it used
    none). Wall-clock timeouts are timing, which no audit can vouch for: the episodes they
    decided are listed in ``timeouts`` (and in ``reasons``) and cap the level at
    ``unverified`` (a ``broken`` run stays ``broken``). ``guaranteed`` is ``level ==
    "certified"``, kept for readers of older summaries; an old summary without a level gets
    one on loading: ``broken`` if a function had a mismatch, else ``sampled`` if it said
    guaranteed (that claim rested at best on a sample), else ``unverified``.
    """

    level: DeterminismLevel = Field(
        default="certified",
        description="certified / sampled / unverified / broken: the worst of the batched "
        "functions' levels (certified with none), capped at unverified by wall-clock timeouts.",
    )
    level_detail: str = Field(default="", description="Why, in plain words.")
    certify: bool = Field(
        default=False, description="The run asked its shared servers to audit every batched row."
    )
    timeouts: list[int] = Field(
        default_factory=list,
        description="Episodes (run indices) a wall-clock timeout decided: not reproducible by "
        "construction; any makes the level at most unverified.",
    )
    shared_server_modes: dict[str, str] = Field(default_factory=dict)
    batched_functions: dict[str, BatchedFunctionInfo] = Field(default_factory=dict)
    reasons: list[str] = Field(
        default_factory=list, description="Why the level is not certified, one line each."
    )
    seed_function: str = "sha256(agentcanvas-v1|run_seed|task|episode_index) mod 2**31"
    engine: str = Field(default="local", description="The engine that ran the episodes.")
    worker_nodes: dict[str, list[str]] = Field(
        default_factory=dict, description="Engine ray: the Ray node ids each worker ran on."
    )
    placement_group: str | None = Field(
        default=None,
        description="Engine ray: the placement group (hex id) the run's actors were reserved "
        "in; each worker actor reported it from inside.",
    )

    @computed_field  # type: ignore[prop-decorator]
    @property
    def guaranteed(self) -> bool:
        """``level == "certified"`` (older summaries' only field)."""
        return self.level == "certified"

    @model_validator(mode="before")
    @classmethod
    def _level_of_old_summaries(cls, data: Any) -> Any:
        if isinstance(data, dict) and "level" not in data and "guaranteed" in data:
            functions = data.get("batched_functions") or {}
            broken = any(
                isinstance(f, dict) and f.get("mismatch") is not None for f in functions.values()
            )
            level = "broken" if broken else "sampled" if data["guaranteed"] else "unverified"
            data = {**data, "level": level}
        return data

    @staticmethod
    def worst(levels: Iterable[DeterminismLevel]) -> DeterminismLevel:
        """The worst of ``levels``; ``certified`` when there are none."""
        return min(levels, key=DETERMINISM_LEVELS.index, default="certified")

    def settle(self) -> None:
        """Recompute ``level`` and ``level_detail`` from the functions and the timeouts."""
        functions = sorted(self.batched_functions.items())
        level = self.worst(f.level for _, f in functions)
        if not functions:
            detail = "the run used no batched function of a shared server"
        else:
            detail = "; ".join(f"{n}: {f.level_detail}" for n, f in functions if f.level == level)
        if self.timeouts:
            if level in ("sampled", "certified"):
                level = "unverified"
            detail += (
                f"; wall-clock timeouts decided {len(self.timeouts)} episode(s) "
                f"(first: {self.timeouts[0]}), which no audit can vouch for"
            )
        self.level, self.level_detail = level, detail
