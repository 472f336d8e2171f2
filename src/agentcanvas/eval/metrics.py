"""Aggregate per-episode metrics into means with 95 % intervals; pure and deterministic.

Rules (DESIGN § 5.2 and § 5b):

- Records are sorted by ``(index, task)`` before anything is computed, so the output does
  not depend on the order in which episodes finished; a duplicate ``(index, task)`` is an
  error.
- Only episodes whose status is ``"completed"`` are *scored*: they enter the means and
  intervals. Errored ones (``error``, ``exception``, ``timeout``, ``no_verdict``) are never
  silently dropped: every aggregate says how many planned episodes it covers
  (``n_planned``), how many ended in an error (``n_errors``) and, for binary and bounded
  metrics, the mean counting errored episodes as failures (at the bottom of the range:
  ``errors_as_failures``) and the worst and best cases over every planned episode without a
  score (``worst``, ``best``). A task whose every episode errored is listed, with no mean.
- For each metric, ``None`` and non-finite values (nan, ±inf) are skipped and counted in
  ``n_missing``; an episode that lacks a metric another episode reports counts as missing.
- Each metric has a *kind* (``nodes.MetricSpec``): declared by a node set or the graph
  (``kind_source="declared"``), else inferred from the values (``"inferred"``): all in
  {0, 1} → binary; whole numbers ≥ 0 → count; otherwise continuous. The interval follows
  the kind and is named in ``method`` / ``method_name`` (``eval.intervals``): binary → Wilson
  score (or Clopper–Pearson, ``MetricRules.binary_interval``); bounded → the hedged betting
  interval of Waudby-Smith & Ramdas over the values in index order; count and continuous →
  Student t. Every method's coverage is checked by simulation (tests/eval/test_intervals.py,
  bench/coverage.py). Fewer than two values of a count or continuous metric, or none of
  any, give ``method="none"`` and nan bounds.
- Means use ``math.fsum`` (correctly rounded, hence independent of summation order).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final, Literal, Protocol

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator

from agentcanvas.eval import intervals
from agentcanvas.eval.health import ERROR_STATUSES
from agentcanvas.nodes.manifest import MetricKind, MetricSpec, NodeSetManifest

__all__ = [
    "EpisodeLike",
    "MetricAggregate",
    "MetricRules",
    "aggregate_by_task",
    "aggregate_metrics",
    "declared_kinds",
    "mcnemar",
    "status_counts",
    "wilson_interval",
]

COMPLETED: Final = "completed"
WILSON_CAVEAT_MAX_N: Final = 100  # up to here Wilson's minimum coverage near 0 or 1 is < 93 %
IntervalMethod = Literal["wilson", "clopper-pearson", "betting", "t", "bootstrap", "none"]
KindSource = Literal["declared", "inferred"]


class EpisodeLike(Protocol):
    """What the aggregates need from a per-episode record (e.g. ``EpisodeResult``)."""

    @property
    def index(self) -> int: ...

    @property
    def task(self) -> str: ...

    @property
    def status(self) -> str: ...

    @property
    def metrics(self) -> Mapping[str, object]: ...


class MetricRules(BaseModel):
    """How a run's metrics are aggregated: declared kinds, the binary interval, the plan."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    kinds: dict[str, MetricSpec] = Field(default_factory=dict)
    """Declared kinds by metric name (node sets' manifests, then the graph's ``metrics``)."""
    binary_interval: Literal["wilson", "clopper-pearson"] = "wilson"
    """The interval of binary metrics."""
    planned_by_task: dict[str, int] = Field(default_factory=dict)
    """Episodes the run planned per task; a task absent here counts the records it has."""


class MetricAggregate(BaseModel):
    """The aggregate of one metric over the episodes of a run or a task."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    mean: float
    """Mean over the scored values (completed episodes); nan when there are none."""
    n: int
    """Number of values that entered the mean."""
    lo: float
    """Lower bound of the 95 % interval; nan when ``method`` is ``"none"``."""
    hi: float
    """Upper bound of the 95 % interval; nan when ``method`` is ``"none"``."""
    method: IntervalMethod
    """The interval's method (``bootstrap`` only in summaries written before kinds)."""
    n_missing: int
    """Completed episodes whose value was absent, None or non-finite."""
    kind: MetricKind | None = None
    """binary | bounded | count | continuous (None in summaries written before kinds)."""
    kind_source: KindSource | None = None
    """Whether the kind was declared (node set or graph) or inferred from the values."""
    range: tuple[float, float] | None = None
    """The range of a bounded metric (binary: 0 to 1)."""
    method_name: str = ""
    """The interval's method in words, with its reference."""
    note: str | None = None
    """Why the interval is not the kind's usual one (e.g. values outside a declared range)."""
    n_planned: int | None = None
    """Episodes planned for this run or task: what the figures below cover."""
    n_errors: int = 0
    """Planned episodes that ended in error, exception, timeout or no_verdict (not scored)."""
    errors_as_failures: float | None = None
    """Binary and bounded: the mean with every errored episode counted at the bottom of the
    range (a failure)."""
    worst: float | None = None
    """Binary and bounded: the mean over every planned episode, each one without a score
    (errored, missing or not run) at the bottom of the range."""
    best: float | None = None
    """Binary and bounded: the same with each one without a score at the top of the range."""

    @field_validator("mean", "lo", "hi", mode="before")
    @classmethod
    def _null_is_nan(cls, value: Any) -> Any:
        # Files store nan as null (see agentcanvas.fileio); read it back as nan.
        return math.nan if value is None else value


def wilson_interval(k: int, n: int) -> tuple[float, float]:
    """The 95 % Wilson score interval of ``k`` in ``n`` (``intervals.wilson``)."""
    return intervals.wilson(k, n)


def mcnemar(b: int, c: int) -> float:
    """Exact two-sided McNemar p-value for ``b`` and ``c`` discordant pairs.

    ``b`` counts pairs that succeed only in the first run, ``c`` only in the second. Under
    the null each discordant pair flips either way with probability 1/2, so the p-value is
    ``min(1, 2 * P[X <= min(b, c)])`` for ``X ~ Binomial(b + c, 1/2)``; computed exactly in
    integers, then rounded once.
    """
    if b < 0 or c < 0:
        raise ValueError(f"mcnemar needs b, c >= 0, got b={b}, c={c}")
    n = b + c
    if n == 0:
        return 1.0
    # Running binomial coefficient: C(n, i+1) = C(n, i) * (n - i) / (i + 1), exact in ints.
    term = tail = 1
    for i in range(min(b, c)):
        term = term * (n - i) // (i + 1)
        tail += term
    return min(1.0, (2 * tail) / (1 << n))


def status_counts(records: Iterable[EpisodeLike]) -> dict[str, int]:
    """How many episodes ended in each status, statuses sorted by name."""
    counts: dict[str, int] = {}
    for record in records:
        counts[record.status] = counts.get(record.status, 0) + 1
    return dict(sorted(counts.items()))


def declared_kinds(
    manifests: Iterable[NodeSetManifest], graph_kinds: Mapping[str, MetricSpec]
) -> dict[str, MetricSpec]:
    """The metric kinds a run declares: each node set's (the first to declare a name wins,
    in the order given), then the graph's, which override them."""
    kinds: dict[str, MetricSpec] = {}
    for manifest in manifests:
        for name, spec in manifest.metrics.items():
            kinds.setdefault(name, spec)
    kinds.update(graph_kinds)
    return dict(sorted(kinds.items()))


def aggregate_metrics(
    records: Iterable[EpisodeLike], rules: MetricRules | None = None
) -> dict[str, MetricAggregate]:
    """Aggregate every metric over the scored episodes of the run; metric names sorted."""
    rules = rules or MetricRules()
    ordered = _sorted_unique(records)
    planned = _planned(rules, ordered, None)
    return _aggregate_group(ordered, _kinds(ordered, rules), rules, planned)


def aggregate_by_task(
    records: Iterable[EpisodeLike], rules: MetricRules | None = None
) -> dict[str, dict[str, MetricAggregate]]:
    """:func:`aggregate_metrics` per task, tasks sorted. Every task with a record or a plan
    is listed, also one whose every episode errored (its means are nan, its errors counted)."""
    rules = rules or MetricRules()
    ordered = _sorted_unique(records)
    kinds = _kinds(ordered, rules)  # of the whole run: a task without values has one too
    by_task: dict[str, list[EpisodeLike]] = {task: [] for task in rules.planned_by_task}
    for record in ordered:
        by_task.setdefault(record.task, []).append(record)
    return {
        task: _aggregate_group(by_task[task], kinds, rules, _planned(rules, by_task[task], task))
        for task in sorted(by_task)
    }


def _sorted_unique(records: Iterable[EpisodeLike]) -> list[EpisodeLike]:
    ordered = sorted(records, key=lambda r: (r.index, r.task))
    for before, after in itertools.pairwise(ordered):
        if (before.index, before.task) == (after.index, after.task):
            raise ValueError(f"duplicate episode (index={after.index}, task={after.task!r})")
    return ordered


def _kinds(
    ordered: Sequence[EpisodeLike], rules: MetricRules
) -> dict[str, tuple[MetricSpec, KindSource]]:
    """Every scored metric's kind, from the declarations or the run's values; names sorted."""
    scored = [r for r in ordered if r.status == COMPLETED]
    names = sorted({name for r in scored for name in r.metrics})
    values = {name: [v for r in scored if (v := _usable(r.metrics.get(name))) is not None]
              for name in names}  # fmt: skip
    return {name: _kind_of(name, values[name], rules) for name in names}


def _planned(rules: MetricRules, group: Sequence[EpisodeLike], task: str | None) -> int:
    """Planned episodes of the group: the plan's count, never fewer than its records."""
    if task is None:
        tasks = set(rules.planned_by_task) | {r.task for r in group}
        return sum(max(rules.planned_by_task.get(t, 0), _count(group, t)) for t in tasks)
    return max(rules.planned_by_task.get(task, 0), len(group))


def _count(group: Sequence[EpisodeLike], task: str) -> int:
    return sum(1 for r in group if r.task == task)


def _aggregate_group(
    group: Sequence[EpisodeLike],
    kinds: Mapping[str, tuple[MetricSpec, KindSource]],
    rules: MetricRules,
    planned: int,
) -> dict[str, MetricAggregate]:
    scored = [r for r in group if r.status == COMPLETED]
    errors = sum(1 for r in group if r.status in ERROR_STATUSES)
    return {
        name: _aggregate_one(kind, [r.metrics.get(name) for r in scored], rules, planned, errors)
        for name, kind in kinds.items()
    }


def _usable(value: object) -> float | None:
    # bool is an int subclass, so True/False become 1.0/0.0; numpy scalars count as numbers.
    if isinstance(value, int | float | np.integer | np.floating | np.bool_):
        number = float(value)
        return number if math.isfinite(number) else None
    return None


def _kind_of(
    name: str, values: Sequence[float], rules: MetricRules
) -> tuple[MetricSpec, KindSource]:
    declared = rules.kinds.get(name)
    if declared is not None:
        return declared, "declared"
    if values and all(v in (0.0, 1.0) for v in values):
        return MetricSpec(kind="binary"), "inferred"
    if values and all(v >= 0 and v.is_integer() for v in values):
        return MetricSpec(kind="count"), "inferred"
    return MetricSpec(kind="continuous"), "inferred"


def _aggregate_one(
    kind: tuple[MetricSpec, KindSource],
    raw: Sequence[object],
    rules: MetricRules,
    planned: int,
    errors: int,
) -> MetricAggregate:
    values = [v for v in map(_usable, raw) if v is not None]
    n, n_missing = len(values), len(raw) - len(values)
    spec, source = kind
    bounds = _range(spec)
    mean = math.fsum(values) / n if n else math.nan
    lo, hi, method, note = _interval(spec, values, bounds, rules)
    fields: dict[str, Any] = {
        "mean": mean,
        "n": n,
        "lo": lo,
        "hi": hi,
        "method": method,
        "n_missing": n_missing,
        "kind": spec.kind,
        "kind_source": source,
        "range": bounds,
        "method_name": intervals.METHOD_NAMES.get(method, "no interval"),
        "note": note,
        "n_planned": planned,
        "n_errors": errors,
    }
    if bounds is not None:
        fields.update(_error_bounds(values, bounds, planned, errors))
    return MetricAggregate(**fields)


def _range(spec: MetricSpec) -> tuple[float, float] | None:
    if spec.kind == "binary":
        return (0.0, 1.0)
    if spec.kind == "bounded" and spec.lo is not None and spec.hi is not None:
        return (spec.lo, spec.hi)
    return None


def _error_bounds(
    values: Sequence[float], bounds: tuple[float, float], planned: int, errors: int
) -> dict[str, float | None]:
    """Errored episodes at the bottom of the range; every unscored one at either end."""
    low, high = bounds
    total, n = math.fsum(values), len(values)
    unscored = max(planned - n, 0)
    out: dict[str, float | None] = {"errors_as_failures": None, "worst": None, "best": None}
    if n + errors:
        out["errors_as_failures"] = (total + low * errors) / (n + errors)
    if n + unscored:
        out["worst"] = (total + low * unscored) / (n + unscored)
        out["best"] = (total + high * unscored) / (n + unscored)
    return out


def _wilson_caveat(k: int, n: int) -> str | None:
    """Where Wilson's coverage is known to fall short (bench/coverage.py), say so."""
    if n > WILSON_CAVEAT_MAX_N or 0.1 < k / n < 0.9:
        return None
    return (
        "near 0 or 1 at this n, Wilson's coverage dips to 86-92 % for some true rates "
        "(bench/coverage.py); --binary-interval clopper-pearson never falls below 95 %"
    )


def _interval(
    spec: MetricSpec,
    values: Sequence[float],
    bounds: tuple[float, float] | None,
    rules: MetricRules,
) -> tuple[float, float, IntervalMethod, str | None]:
    n = len(values)
    if n == 0:
        return math.nan, math.nan, "none", None
    if spec.kind == "binary" and all(v in (0.0, 1.0) for v in values):
        k = sum(1 for v in values if v == 1.0)
        if rules.binary_interval == "clopper-pearson":
            return (*intervals.clopper_pearson(k, n), "clopper-pearson", None)
        return (*intervals.wilson(k, n), "wilson", _wilson_caveat(k, n))
    note = None
    if bounds is not None and all(bounds[0] <= v <= bounds[1] for v in values):
        return (*intervals.betting_interval(values, bounds[0], bounds[1]), "betting", None)
    if bounds is not None:
        note = (
            f"values outside the declared {spec.kind} range [{bounds[0]:g}, {bounds[1]:g}]: "
            "a t interval instead"
        )
    if n < 2:
        return math.nan, math.nan, "none", note
    return (*intervals.t_interval(values), "t", note)
