"""Versioned data models of a run: EvalConfig (what to run), EpisodeResult, EvalRun (summary)."""

from __future__ import annotations

import enum
from collections.abc import Iterable
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    WithJsonSchema,
    computed_field,
    field_validator,
    model_validator,
)

from agentcanvas.eval.health import RunHealth, assess
from agentcanvas.eval.metrics import MetricAggregate, MetricRules
from agentcanvas.eval.run_state import RunStatus, check_move

RUN_FORMAT_VERSION: Literal[1] = 1
EpisodeStatus = Literal["completed", "timeout", "exception", "error", "no_verdict", "cancelled"]
FramesMode = Literal["every", "failures", "none"]
BinaryInterval = Literal["wilson", "clopper-pearson"]
MetricValue = float | int | bool | str | None
RAY_ADDRESS_PATTERN = r"^(auto|(ray://)?[A-Za-z0-9.\-]+:[0-9]{1,5})$"


def _max_errors_not_bool(value: Any) -> Any:
    if isinstance(value, bool):
        raise ValueError("max_errors must be a count (>= 0) or a fraction (0 < f < 1)")
    return value


def _max_errors_range(value: int | float | None) -> int | float | None:
    if isinstance(value, float) and value >= 0.0 and value.is_integer():
        value = int(value)  # 3.0 and 0.0 are counts (JSON Schema calls them integers)
    if isinstance(value, float) and not 0.0 < value < 1.0:
        raise ValueError(
            f"max_errors {value!r}: a fraction must be between 0 and 1 (exclusive); "
            "a count must be a whole number"
        )
    if isinstance(value, int) and not 0 <= value <= 1_000_000_000:
        raise ValueError(f"max_errors {value}: a count must be between 0 and 1000000000")
    return value


MaxErrors = Annotated[
    int | float | None,
    BeforeValidator(_max_errors_not_bool),
    AfterValidator(_max_errors_range),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "integer", "minimum": 0, "maximum": 1_000_000_000},
                {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
                {"type": "null"},
            ]
        }
    ),
]
"""An error budget: a count of error episodes (>= 0) or a fraction of the run (0 < f < 1)."""


class EvalConfig(BaseModel):
    """What to run. Episodes are ``episode_count`` per task, indexed from ``start_index``."""

    model_config = ConfigDict(extra="forbid")

    version: Literal[1] = RUN_FORMAT_VERSION
    graph_name: str = Field(min_length=1, description="Graph to run (see `agentcanvas graphs`).")
    episode_count: int = Field(default=10, ge=1, le=1_000_000, description="Episodes per task.")
    worker_count: int = Field(default=1, ge=1, le=64, description="Parallel workers (speed only).")
    tasks: list[str] | None = Field(
        default=None, description="Task ids (panel task_id); default: the graph's env tasks."
    )
    start_index: int = Field(default=0, ge=0, description="First episode_index of each task.")
    step_budget: int | None = Field(
        default=None, ge=1, description="Override of the per-episode step budget (>= 1)."
    )
    seed: int = Field(default=0, ge=0, description="Run seed; episode seeds derive from it.")
    per_step_timeout_s: float = Field(
        default=10.0, gt=0, description="Wall-clock safety net per step (timeout = budget × this)."
    )
    episode_timeout_s: float | None = Field(
        default=None,
        gt=0,
        allow_inf_nan=False,
        description="Wall-clock safety net per episode; default: step budget × per_step_timeout_s.",
    )
    max_errors: MaxErrors = Field(
        default=None,
        description="Error budget: the run stops, status failed, once more episodes than this "
        "end in error, exception, timeout or no_verdict. A count (>= 0) or a fraction of the "
        "run's episodes (0 < f < 1). Default: never stop; the health verdict reports them.",
    )
    max_attempts: int = Field(
        default=2, ge=1, le=5, description="Attempts per episode when its env server dies."
    )
    save_frames: bool = Field(default=False, description="Render frames and save them as assets.")
    frames: FramesMode | None = Field(
        default=None,
        description="Which episodes keep their frames: every, failures (episodes that did not "
        "succeed) or none. Default: every when save_frames, else none.",
    )
    record_log: bool = Field(default=True, description="Write each episode's log.jsonl.")
    certify: bool = Field(
        default=False,
        description="Audit every batched row of this run (each recomputed alone, bit for bit, "
        "and the alone result served): a determinism level of certified for results that go "
        "in a paper, at the cost of a second forward pass per batched row.",
    )
    binary_interval: BinaryInterval = Field(
        default="wilson",
        description="Interval of 0/1 metrics: wilson (Wilson score; near-nominal on average) "
        "or clopper-pearson (exact; never below nominal, wider).",
    )
    until_halfwidth: float | None = Field(
        default=None,
        gt=0,
        lt=0.5,
        allow_inf_nan=False,
        description="Stop rule: end the run once the anytime-valid confidence sequence of the "
        "overall success rate (all tasks pooled, scored episodes) is at most ±this wide. "
        "Decided on the episodes finished in plan order (tasks interleaved), so a run stops "
        "after the same episodes at any worker count; episode_count stays the cap.",
    )
    until_decided_vs: str | None = Field(
        default=None,
        pattern=r"^[0-9]{8}_[0-9]{6}(_[0-9]+)?$",
        description="Stop rule: a baseline run id; end the run once an anytime-valid paired "
        "test (the mixture martingale on discordant pairs, an anytime-valid McNemar) says "
        "this run is better or worse than the baseline on the same episodes (errors count "
        "as failures), or at the cap / when the baseline's episodes run out: not "
        "distinguishable. With until_halfwidth too, the first rule to decide stops the run.",
    )
    stop_alpha: float = Field(
        default=0.05,
        gt=0,
        lt=0.5,
        allow_inf_nan=False,
        description="Error rate of the stop rules: alpha of the test, 1 - confidence of the CS.",
    )
    engine: Literal["local", "ray"] = Field(
        default="local", description="local: servers on this host; ray: episodes in Ray actors."
    )
    ray_address: str | None = Field(
        default=None,
        max_length=256,
        pattern=RAY_ADDRESS_PATTERN,
        description="Engine ray: auto, host:port or ray://host:10001; default: a local Ray.",
    )

    @field_validator("tasks")
    @classmethod
    def _tasks_non_empty(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and (not value or any(not t.strip() for t in value)):
            raise ValueError("tasks must be a non-empty list of non-empty task ids")
        if value is not None and len(set(value)) != len(value):
            raise ValueError("tasks must not repeat a task id (episodes are keyed by task)")
        return value


class EpisodeResult(BaseModel):
    """One episode's self-describing record (episode.json, and an entry of summary.json)."""

    version: Literal[1] = RUN_FORMAT_VERSION
    index: int = Field(description="Position in the run (0 … episodes_total-1).")
    episode_id: str = ""
    task: str = ""
    episode_index: int = Field(description="The env's episode index within its task.")
    seed: int
    status: EpisodeStatus
    steps: int = 0
    metrics: dict[str, MetricValue] = Field(
        default_factory=dict,
        description="The scored metrics: those of a completed episode (empty otherwise).",
    )
    partial_metrics: dict[str, MetricValue] = Field(
        default_factory=dict,
        description="What an episode that did not complete had harvested before it ended "
        "(the seed's partial results): kept, never scored.",
    )
    error: str | None = None
    node_errors: dict[str, str] = Field(default_factory=dict)
    attempts: int = 1
    step_budget: int | None = None
    scene_id: str = ""
    instruction: str = ""
    duration_s: float = 0.0

    def identity(self) -> dict[str, Any]:
        """The fields that must be bit-identical across worker counts.

        Wall time and supervision retries (``attempts``) are how a run went, not what it scored.
        """
        return self.model_dump(exclude={"duration_s", "attempts"})


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


class WorkerStats(BaseModel):
    """How one worker's share of a run went (timing-dependent, never part of the results)."""

    worker_id: int
    episodes: int = Field(default=0, description="Episodes this worker was handed.")
    task_switches: int = Field(
        default=0, description="Times its next episode was of another task than its previous."
    )
    steals: int = Field(default=0, description="Episodes it took from another worker's chunk.")


class LiveInterval(BaseModel):
    """The anytime-valid confidence sequence of the success rate on the plan-order prefix of
    finished episodes: valid however often it is looked at (unlike the fixed-n interval)."""

    lo: float
    hi: float
    k: int = Field(description="Successes among the scored episodes of the prefix.")
    n: int = Field(description="Scored episodes of the prefix.")
    prefix: int = Field(description="Episodes of the prefix (plan order, tasks interleaved).")
    confidence: float
    method: str


class StopReport(BaseModel):
    """What a stop rule decided, on which episodes, with what evidence."""

    rule: str = Field(description="until_halfwidth or until_decided_vs.")
    target: str = Field(description="The rule's argument: the half-width, or the baseline run.")
    alpha: float
    method: str
    decision: str = Field(
        description="until_decided_vs: B better, B worse, not distinguishable; "
        "until_halfwidth: narrow enough, not narrow enough at the cap."
    )
    decided: bool = Field(description="Whether the rule ended the run before its cap.")
    episodes_used: int = Field(description="The plan-order prefix the decision rests on.")
    episodes_planned: int = Field(description="The cap: every episode of the plan.")
    evidence: float | None = Field(
        default=None, description="until_decided_vs: the e-value (the test rejects at 1/alpha)."
    )
    threshold: float | None = None
    b_wins: int | None = Field(default=None, description="Pairs only this run succeeded on.")
    a_wins: int | None = Field(default=None, description="Pairs only the baseline succeeded on.")
    halfwidth: float | None = Field(default=None, description="The sequence's half-width.")
    kept_apart: int = Field(
        default=0,
        description="Episodes that finished past the decision: not in the records or the "
        "aggregates (so those are the same at any worker count); their folders are in "
        "kept_apart_folder.",
    )
    kept_apart_folder: str = "past_stop"
    note: str = ""


class _Keep(enum.Enum):
    KEEP = "keep"


_KEEP = _Keep.KEEP


class EvalRun(BaseModel):
    """The run summary (summary.json)."""

    version: Literal[1] = RUN_FORMAT_VERSION
    run_id: str
    status: RunStatus = RunStatus.PENDING
    graph_name: str
    config: EvalConfig
    episodes_total: int
    episodes_done: int = 0
    metric_rules: MetricRules = Field(
        default_factory=MetricRules,
        description="How the aggregates were computed: declared metric kinds, the binary "
        "interval, the episodes planned per task.",
    )
    aggregate_metrics: dict[str, MetricAggregate] = Field(default_factory=dict)
    aggregate_by_task: dict[str, dict[str, MetricAggregate]] = Field(default_factory=dict)
    status_counts: dict[str, int] = Field(default_factory=dict)
    episodes: list[EpisodeResult] = Field(default_factory=list)
    episodes_complete: bool = Field(
        default=True,
        description="Whether `episodes` holds every record; false while the run goes (the "
        "records are then in episodes.jsonl, see agentcanvas.eval.records).",
    )
    episodes_aggregated: int = Field(
        default=0, description="How many episode results the aggregates were computed from."
    )
    timings: dict[str, float | None] = Field(default_factory=dict)
    determinism: DeterminismInfo = Field(default_factory=DeterminismInfo)
    live_interval: LiveInterval | None = Field(
        default=None, description="The success rate's anytime-valid sequence, so far."
    )
    stop: StopReport | None = Field(
        default=None, description="The stop rule's decision (a run with a stop rule)."
    )
    error: str | None = None
    workers: list[WorkerStats] = Field(
        default_factory=list,
        description="Per worker of the last execution: episodes, task switches, steals "
        "(timing-dependent; not part of the per-episode records).",
    )

    def move_to(self, status: RunStatus, error: str | _Keep | None = _KEEP) -> None:
        """Change the run's status (RunStateError when its lifecycle has no such move);
        ``error`` replaces the run's error when given."""
        self.status = check_move(self.status, status, self.run_id)
        if not isinstance(error, _Keep):
            self.error = error

    @computed_field  # type: ignore[prop-decorator]
    @property
    def health(self) -> RunHealth:
        """The run's health verdict (derived from status, status_counts and error)."""
        return assess(self.status, self.status_counts, self.episodes_total, self.error)
