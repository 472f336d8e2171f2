"""Runs compared on the same episodes: a paired view of two runs and a leaderboard of N.

Episodes are paired by ``(task, episode_index)``; a pair counts when both episodes
completed with a ``success`` value. Every number names where it comes from (``METHODS``):

- a success rate's interval is the 95 % Wilson score interval;
- the paired test is the exact two-sided McNemar test on the discordant pairs;
- a difference (B − A, in percentage points of success rate) is the mean of the paired
  differences; its 95 % interval is the *exact conditional* interval: Clopper–Pearson for
  the share of discordant pairs that favour B, mapped onto the difference with the number
  of discordant pairs held fixed. It is the interval dual to the McNemar test, so it
  excludes 0 exactly when McNemar's p < 0.05: the interval and the test never disagree.
  With no discordant pairs the difference is 0 and no interval is given (``None``).
- Per-task intervals are not adjusted for multiple comparisons; the overall line pools
  every paired episode of every task.

Pure functions of the summaries; results are sorted by key, so they do not depend on the
order of the records.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from agentcanvas.eval.metrics import mcnemar, wilson_interval

__all__ = [
    "METHODS",
    "PairedCounts",
    "compare_runs",
    "config_differences",
    "leaderboard",
    "paired_difference",
    "success_of",
]

ALPHA: Final = 0.05
METHODS: Final = {
    "rate": "Wilson score interval, 95 %",
    "difference": "exact conditional interval (Clopper-Pearson on the discordant pairs, dual "
    "to the McNemar test), 95 %",
    "test": "exact two-sided McNemar test on the discordant pairs",
    "units": "rates in %, differences in percentage points (pp) of success rate, B − A",
}
Key = tuple[str, int]


@dataclass(frozen=True)
class PairedCounts:
    """The 2×2 table of paired successes: both, only A, only B, neither."""

    both: int = 0
    a_only: int = 0
    b_only: int = 0
    neither: int = 0

    @property
    def n(self) -> int:
        return self.both + self.a_only + self.b_only + self.neither

    def add(self, a: bool, b: bool) -> PairedCounts:
        return PairedCounts(
            self.both + (a and b),
            self.a_only + (a and not b),
            self.b_only + (b and not a),
            self.neither + (not a and not b),
        )


def success_of(episode: Mapping[str, Any]) -> bool | None:
    """The episode's success (completed episodes only); None when it has no verdict."""
    if episode.get("status") != "completed":
        return None
    value = (episode.get("metrics") or {}).get("success")
    return None if value is None else bool(value)


def paired_difference(counts: PairedCounts) -> dict[str, Any]:
    """Rates of A and B on the pairs, their difference B − A with its exact conditional
    interval, and the McNemar p-value; all rates and differences as fractions."""
    n = counts.n
    if n == 0:
        return {"n": 0, "a": None, "b": None, "delta": None, "delta_lo": None, "delta_hi": None}
    ka, kb = counts.both + counts.a_only, counts.both + counts.b_only
    lo, hi = _conditional_interval(counts)
    return {
        "n": n,
        "a": ka / n,
        "b": kb / n,
        "a_interval": wilson_interval(ka, n),
        "b_interval": wilson_interval(kb, n),
        "delta": (counts.b_only - counts.a_only) / n,
        "delta_lo": lo,
        "delta_hi": hi,
        "a_only": counts.a_only,
        "b_only": counts.b_only,
        "p_value": mcnemar(counts.a_only, counts.b_only),
    }


def _conditional_interval(counts: PairedCounts) -> tuple[float | None, float | None]:
    """Clopper–Pearson for π = b_only / discordant, mapped to (discordant / n)(2π − 1)."""
    from scipy.stats import beta  # imported on first use: scipy.stats is slow to import

    discordant = counts.a_only + counts.b_only
    if discordant == 0:
        return None, None
    k = counts.b_only
    lo = 0.0 if k == 0 else float(beta.ppf(ALPHA / 2, k, discordant - k + 1))
    hi = 1.0 if k == discordant else float(beta.ppf(1 - ALPHA / 2, k + 1, discordant - k))
    share = discordant / counts.n
    return share * (2 * lo - 1), share * (2 * hi - 1)


def _by_key(summary: Mapping[str, Any]) -> dict[Key, Mapping[str, Any]]:
    return {(e["task"], int(e["episode_index"])): e for e in summary.get("episodes", [])}


def compare_runs(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, Any]:
    """Two runs paired by (task, episode_index): flips, per-task and overall paired
    differences, McNemar, and the config fields that differ."""
    left, right = _by_key(a), _by_key(b)
    paired = sorted(set(left) & set(right))
    flips: list[dict[str, Any]] = []
    per_task: dict[str, PairedCounts] = {}
    overall = PairedCounts()
    for key in paired:
        sa, sb = success_of(left[key]), success_of(right[key])
        if sa is None or sb is None:
            continue
        per_task[key[0]] = per_task.get(key[0], PairedCounts()).add(sa, sb)
        overall = overall.add(sa, sb)
        if sa != sb:
            flips.append(
                {
                    "task": key[0],
                    "episode_index": key[1],
                    "a": sa,
                    "b": sb,
                    "a_index": left[key]["index"],
                    "b_index": right[key]["index"],
                }
            )
    return {
        "a": a.get("run_id"),
        "b": b.get("run_id"),
        "paired": len(paired),
        "flips": flips,
        "mcnemar": {
            "a_only": overall.a_only,
            "b_only": overall.b_only,
            "p_value": mcnemar(overall.a_only, overall.b_only),
        },
        "overall": paired_difference(overall),
        "per_task": {t: paired_difference(c) for t, c in sorted(per_task.items())},
        "config_differences": config_differences(a.get("config", {}), b.get("config", {})),
        "methods": METHODS,
    }


def config_differences(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    """Config fields that differ (worker_count is a speed dial, so it is not listed)."""
    keys = sorted((set(a) | set(b)) - {"worker_count"})
    return [k for k in keys if a.get(k) != b.get(k)]


def leaderboard(summaries: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """N runs side by side, best overall success rate first.

    Each run's overall rate is over its completed episodes of the tasks every run has
    (``common_tasks``), so runs are ranked on the same task set; per-task columns cover
    every task any run has (``None`` where a run has none). Ties keep the given order."""
    task_sets = [{e["task"] for e in s.get("episodes", [])} for s in summaries]
    common = set.intersection(*task_sets) if task_sets else set()
    rows = [_leaderboard_row(s, common) for s in summaries]
    ranked = sorted(rows, key=lambda r: -(r["overall"]["rate"] if r["overall"]["n"] else -1.0))
    for rank, row in enumerate(ranked, start=1):
        row["rank"] = rank
    return {
        "runs": ranked,
        "tasks": sorted(set().union(*task_sets)) if task_sets else [],
        "common_tasks": sorted(common),
        "same_task_set": all(t == task_sets[0] for t in task_sets),
        "methods": METHODS,
    }


def _leaderboard_row(summary: Mapping[str, Any], common: set[str]) -> dict[str, Any]:
    episodes = summary.get("episodes", [])
    per_task: dict[str, list[bool]] = {}
    for episode in episodes:
        success = success_of(episode)
        if success is not None:
            per_task.setdefault(episode["task"], []).append(success)
    overall = [s for task in sorted(common) for s in per_task.get(task, [])]
    config = summary.get("config") or {}
    return {
        "run_id": summary.get("run_id"),
        "graph_name": summary.get("graph_name"),
        "status": summary.get("status"),
        "episodes_total": summary.get("episodes_total"),
        "episodes": len(episodes),
        "config": {k: config.get(k) for k in ("seed", "step_budget", "start_index")},
        "overall": _rate(overall),
        "per_task": {task: _rate(values) for task, values in sorted(per_task.items())},
    }


def _rate(values: Iterable[bool]) -> dict[str, Any]:
    flags = list(values)
    n, k = len(flags), sum(flags)
    if n == 0:
        return {"n": 0, "k": 0, "rate": None, "lo": None, "hi": None}
    lo, hi = wilson_interval(k, n)
    return {"n": n, "k": k, "rate": k / n, "lo": lo, "hi": hi}
