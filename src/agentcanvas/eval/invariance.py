"""Diffing two runs' per-episode records: the check behind ``verify-invariance``."""

from __future__ import annotations

from agentcanvas.eval.config import EvalRun


def diff_runs(a: EvalRun, b: EvalRun) -> list[str]:
    """Human-readable differences in per-episode records and aggregates (empty: identical)."""
    diffs: list[str] = []
    left = {e.index: e.identity() for e in a.episodes}
    right = {e.index: e.identity() for e in b.episodes}
    for index in sorted(set(left) | set(right)):
        if index not in left or index not in right:
            diffs.append(f"episode {index}: present in only one run")
            continue
        for key in sorted(set(left[index]) | set(right[index])):
            if left[index].get(key) != right[index].get(key):
                diffs.append(
                    f"episode {index} {key}: {left[index].get(key)!r} != {right[index].get(key)!r}"
                )
    if a.aggregate_metrics != b.aggregate_metrics:
        diffs.append("aggregate_metrics differ")
    if a.aggregate_by_task != b.aggregate_by_task:
        diffs.append("aggregate_by_task differ")
    return diffs
