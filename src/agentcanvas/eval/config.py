"""Versioned data models of a run: EvalConfig (what to run) and EvalRun (summary.json).

An episode's record (``EpisodeResult``) and the determinism block (``DeterminismInfo``)
have modules of their own and are re-exported here, where readers have always found them.
"""

from __future__ import annotations

import enum
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

from agentcanvas.eval.determinism_info import (
    DETERMINISM_LEVELS,
    BatchedFunctionInfo,
    DeterminismInfo,
    DeterminismLevel,
)
from agentcanvas.eval.episode_result import (
    END_REASONS,
    RUN_FORMAT_VERSION,
    EndReason,
    EpisodeResult,
    EpisodeStatus,
    MetricValue,
)
from agentcanvas.eval.health import RunHealth, assess
from agentcanvas.eval.metrics import MetricAggregate, MetricRules
from agentcanvas.eval.run_state import RunStatus, check_move

__all__ = [
    "DETERMINISM_LEVELS",
    "END_REASONS",
    "MAX_PLANNED_EPISODES",
    "RAY_ADDRESS_PATTERN",
    "RUN_FORMAT_VERSION",
    "RUN_ID_PATTERN",
    "BatchedFunctionInfo",
    "BinaryInterval",
    "DeterminismInfo",
    "DeterminismLevel",
    "EndReason",
    "EpisodeRef",
    "EpisodeResult",
    "EpisodeStatus",
    "EvalConfig",
    "EvalRun",
    "FramesMode",
    "LiveInterval",
    "MaxErrors",
    "MetricValue",
    "StopReport",
    "WorkerStats",
]

FramesMode = Literal["every", "failures", "none"]
BinaryInterval = Literal["wilson", "clopper-pearson"]
RAY_ADDRESS_PATTERN = r"^(auto|(ray://)?[A-Za-z0-9.\-]+:[0-9]{1,5})$"
RUN_ID_PATTERN = r"^[0-9]{8}_[0-9]{6}(_[0-9]+)?$"
MAX_PLANNED_EPISODES = 1_000_000


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


class EpisodeRef(BaseModel):
    """One episode by its identity: the task and the env's episode index within it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    task: str = Field(min_length=1, description="Task id (panel task_id).")
    episode_index: int = Field(ge=0, description="The env's episode index within the task.")


class EvalConfig(BaseModel):
    """What to run. Episodes are ``episode_count`` per task, indexed from ``start_index``,
    or exactly the listed ``episodes`` (a retry of some of a run's episodes)."""

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
        pattern=RUN_ID_PATTERN,
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
    episodes: list[EpisodeRef] | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_PLANNED_EPISODES,
        description="Run exactly these episodes, each a (task, episode_index) pair, in this "
        "order, instead of episode_count per task: run indices are 0..k-1, and each seed "
        "derives from (seed, task, episode_index) as in any run, so with an earlier run's seed "
        "they replay that run's episodes. With it, leave tasks and start_index unset; "
        "episode_count is ignored. Default: episode_count per task.",
    )
    retry_of: str | None = Field(
        default=None,
        pattern=RUN_ID_PATTERN,
        description="The run id this run retries episodes of (given with episodes and that "
        "run's seed): a link to the original, which keeps its records. Default: none.",
    )

    @field_validator("tasks")
    @classmethod
    def _tasks_non_empty(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and (not value or any(not t.strip() for t in value)):
            raise ValueError("tasks must be a non-empty list of non-empty task ids")
        if value is not None and len(set(value)) != len(value):
            raise ValueError("tasks must not repeat a task id (episodes are keyed by task)")
        return value

    @model_validator(mode="after")
    def _frames_resolved(self) -> EvalConfig:
        """``save_frames`` without ``frames`` is recorded as ``every``, so a summary says
        which episodes kept their frames without knowing the default."""
        if self.save_frames and self.frames is None:
            self.frames = "every"
        return self

    @model_validator(mode="after")
    def _episodes_alone(self) -> EvalConfig:
        """``episodes`` decides the plan alone; ``retry_of`` needs it; no episode twice."""
        if self.episodes is None:
            if self.retry_of is not None:
                raise ValueError("retry_of: give the episodes to retry too (episodes)")
            return self
        if self.tasks is not None:
            raise ValueError("tasks: leave it unset with episodes (their tasks are the run's)")
        if self.start_index != 0:
            raise ValueError("start_index: leave it at 0 with episodes (they name their index)")
        seen: set[tuple[str, int]] = set()
        for position, ref in enumerate(self.episodes):
            key = (ref.task, ref.episode_index)
            if key in seen:
                raise ValueError(
                    f"episodes[{position}]: task {ref.task!r} episode_index "
                    f"{ref.episode_index} is listed twice (a record is keyed by it)"
                )
            seen.add(key)
        return self


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
