"""Aggregate per-episode metrics into means with 95 % intervals; pure and deterministic.

Rules (DESIGN § 5.2):

- Records are sorted by ``(index, task)`` before anything is computed, so the output does
  not depend on the order in which episodes finished; a duplicate ``(index, task)`` is an
  error.
- Only episodes whose status is ``"completed"`` enter the aggregates. The others (errors,
  timeouts, …) are failures of the run, not of the task; :func:`status_counts` lists them.
- For each metric, ``None`` and non-finite values (nan, ±inf) are skipped and counted in
  ``n_missing``; an episode that lacks a metric another episode reports counts as missing.
- A metric whose values are all in {0, 1} (bools included) is *binary*: mean and a 95 %
  Wilson score interval. Otherwise it is *continuous*: mean and a 95 % percentile
  bootstrap interval from ``numpy.random.default_rng(0)`` with 2000 resamples; the
  generator is re-seeded for every (metric, group), so an interval does not depend on
  which other metrics or tasks exist. A continuous metric with fewer than two values, or
  any metric with none, gets ``method="none"`` and nan bounds.
- Means use ``math.fsum`` (correctly rounded, hence independent of summation order).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final, Literal, Protocol

import numpy as np
from pydantic import BaseModel, ConfigDict, field_validator

__all__ = [
    "BOOTSTRAP_RESAMPLES",
    "BOOTSTRAP_SEED",
    "EpisodeLike",
    "MetricAggregate",
    "aggregate_by_task",
    "aggregate_metrics",
    "mcnemar",
    "status_counts",
    "wilson_interval",
]

COMPLETED: Final = "completed"
BOOTSTRAP_SEED: Final = 0
BOOTSTRAP_RESAMPLES: Final = 2000
Z_95: Final = 1.959963984540054  # standard normal quantile at 0.975
# Rows of resample indices drawn at once; bounds memory to ~4M indices whatever n is.
_MAX_BOOTSTRAP_CELLS: Final = 4_000_000


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


class MetricAggregate(BaseModel):
    """The aggregate of one metric over the completed episodes of a run or a task."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    mean: float
    """Mean over the non-missing values; nan when there are none."""
    n: int
    """Number of values that entered the mean."""
    lo: float
    """Lower bound of the 95 % interval; nan when ``method`` is ``"none"``."""
    hi: float
    """Upper bound of the 95 % interval; nan when ``method`` is ``"none"``."""
    method: Literal["wilson", "bootstrap", "t", "none"]
    """How the interval was computed: Wilson score (binary), percentile bootstrap, or none."""
    n_missing: int
    """Completed episodes whose value was absent, None or non-finite."""

    @field_validator("mean", "lo", "hi", mode="before")
    @classmethod
    def _null_is_nan(cls, value: Any) -> Any:
        # Files store nan as null (see agentcanvas.fileio); read it back as nan.
        return math.nan if value is None else value


def wilson_interval(k: int, n: int, z: float = Z_95) -> tuple[float, float]:
    """Wilson score interval for ``k`` successes in ``n`` trials (default: 95 %)."""
    if n <= 0 or not 0 <= k <= n:
        raise ValueError(f"wilson_interval needs 0 <= k <= n and n > 0, got k={k}, n={n}")
    z2 = z * z
    denom = n + z2
    center = (k + z2 / 2) / denom
    half = (z / denom) * math.sqrt(k * (n - k) / n + z2 / 4)
    # At k == 0 (k == n) the bound is exactly 0 (1); rounding would leave ~1e-17 instead.
    lo = 0.0 if k == 0 else max(0.0, center - half)
    hi = 1.0 if k == n else min(1.0, center + half)
    return lo, hi


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


def aggregate_metrics(records: Iterable[EpisodeLike]) -> dict[str, MetricAggregate]:
    """Aggregate every metric over the completed episodes; metric names sorted."""
    return _aggregate_group(_completed_sorted(records))


def aggregate_by_task(records: Iterable[EpisodeLike]) -> dict[str, dict[str, MetricAggregate]]:
    """:func:`aggregate_metrics` per task, tasks sorted; a task with no completed episode
    is absent.
    """
    by_task: dict[str, list[EpisodeLike]] = {}
    for record in _completed_sorted(records):
        by_task.setdefault(record.task, []).append(record)
    return {task: _aggregate_group(by_task[task]) for task in sorted(by_task)}


def _completed_sorted(records: Iterable[EpisodeLike]) -> list[EpisodeLike]:
    ordered = sorted(records, key=lambda r: (r.index, r.task))
    for before, after in itertools.pairwise(ordered):
        if (before.index, before.task) == (after.index, after.task):
            raise ValueError(f"duplicate episode (index={after.index}, task={after.task!r})")
    return [r for r in ordered if r.status == COMPLETED]


def _aggregate_group(records: Sequence[EpisodeLike]) -> dict[str, MetricAggregate]:
    names = sorted({name for record in records for name in record.metrics})
    return {name: _aggregate_one([r.metrics.get(name) for r in records]) for name in names}


def _usable(value: object) -> float | None:
    # bool is an int subclass, so True/False become 1.0/0.0; numpy scalars count as numbers.
    if isinstance(value, int | float | np.integer | np.floating | np.bool_):
        number = float(value)
        return number if math.isfinite(number) else None
    return None


def _aggregate_one(raw: Sequence[object]) -> MetricAggregate:
    values = [v for v in map(_usable, raw) if v is not None]
    n, n_missing = len(values), len(raw) - len(values)
    if n == 0:
        return MetricAggregate(
            mean=math.nan, n=0, lo=math.nan, hi=math.nan, method="none", n_missing=n_missing
        )
    mean = math.fsum(values) / n
    if all(v in (0.0, 1.0) for v in values):
        lo, hi = wilson_interval(sum(1 for v in values if v == 1.0), n)
        return MetricAggregate(mean=mean, n=n, lo=lo, hi=hi, method="wilson", n_missing=n_missing)
    if n < 2:
        return MetricAggregate(
            mean=mean, n=n, lo=math.nan, hi=math.nan, method="none", n_missing=n_missing
        )
    lo, hi = _bootstrap_interval(values)
    return MetricAggregate(mean=mean, n=n, lo=lo, hi=hi, method="bootstrap", n_missing=n_missing)


def _bootstrap_interval(values: Sequence[float]) -> tuple[float, float]:
    """95 % percentile bootstrap interval of the mean; deterministic for a given input."""
    data = np.asarray(values, dtype=np.float64)
    n = data.size
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    rows_per_draw = max(1, _MAX_BOOTSTRAP_CELLS // n)
    means = np.empty(BOOTSTRAP_RESAMPLES, dtype=np.float64)
    for start in range(0, BOOTSTRAP_RESAMPLES, rows_per_draw):
        stop = min(start + rows_per_draw, BOOTSTRAP_RESAMPLES)
        picks = rng.integers(0, n, size=(stop - start, n))
        means[start:stop] = data[picks].mean(axis=1)
    lo, hi = np.quantile(means, [0.025, 0.975])
    return float(lo), float(hi)
