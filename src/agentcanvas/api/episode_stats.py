"""Distributions of a run's episodes: per-task histograms of steps and return, step budgets.

Only completed episodes count (an episode that raised has no verdict, and its step count says
where it stopped, not how long the task took). Steps are the graph's iterations (the
``steps`` field of a record); the env's own ``steps`` metric counts actions and is one less
when the first iteration only observes the reset state. Non-finite values are left out, so
the answer is strict JSON.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any, Final

__all__ = ["MAX_BINS", "distributions", "histogram"]

MAX_BINS: Final = 12


def histogram(values: list[float]) -> dict[str, Any] | None:
    """``{"edges", "counts", "n", "mean"}`` with at most MAX_BINS bins; integers get whole
    bins (edges k, k + width, ...); None without values."""
    if not values:
        return None
    lo, hi = min(values), max(values)
    if all(float(v).is_integer() for v in values):
        width: float = max(1, math.ceil((hi - lo + 1) / MAX_BINS))
        n_bins = max(1, math.ceil((hi - lo + 1) / width))
    else:
        n_bins = min(MAX_BINS, max(1, math.ceil(math.sqrt(len(values)))))
        width = (hi - lo) / n_bins if hi > lo else 1.0
    counts = [0] * n_bins
    for value in values:
        counts[min(n_bins - 1, int((value - lo) // width))] += 1
    edges = [lo + k * width for k in range(n_bins + 1)]
    return {"edges": edges, "counts": counts, "n": len(values), "mean": sum(values) / len(values)}


def _finite(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def distributions(episodes: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """``{"tasks": {task: {"steps": hist, "return": hist}}, "step_budgets": [...]}``."""
    steps: dict[str, list[float]] = {}
    returns: dict[str, list[float]] = {}
    budgets: set[int] = set()
    for episode in episodes:
        budget = episode.get("step_budget")
        if isinstance(budget, int) and not isinstance(budget, bool):
            budgets.add(budget)
        if episode.get("status") != "completed":
            continue
        task = str(episode.get("task"))
        step = _finite(episode.get("steps"))
        if step is not None:
            steps.setdefault(task, []).append(step)
        metrics = episode.get("metrics")
        value = _finite(metrics.get("return")) if isinstance(metrics, Mapping) else None
        if value is not None:
            returns.setdefault(task, []).append(value)
    tasks = sorted(set(steps) | set(returns))
    return {
        "tasks": {
            t: {"steps": histogram(steps.get(t, [])), "return": histogram(returns.get(t, []))}
            for t in tasks
        },
        "step_budgets": sorted(budgets),
    }
