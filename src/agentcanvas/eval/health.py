"""A run's health verdict and its error budget (``max_errors``).

A run that had errors never looks like a clean one: the verdict is derived from the run's
status and its episodes' statuses, and every summary carries it. An episode *has a verdict*
when it ended ``completed``; ``error``, ``exception``, ``timeout`` and ``no_verdict`` are
errors; ``cancelled`` episodes are neither (they belong to a run that did not finish).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

__all__ = [
    "ERROR_STATUSES",
    "HealthVerdict",
    "RunHealth",
    "assess",
    "error_budget_exceeded",
    "error_count",
    "of_summary",
]

HealthVerdict = Literal["clean", "errors", "failed", "cancelled", "aborted", "in_progress"]
ERROR_STATUSES = ("error", "exception", "timeout", "no_verdict")
_UNFINISHED: dict[str, HealthVerdict] = {
    "failed": "failed",
    "cancelled": "cancelled",
    "aborted": "aborted",
}


class RunHealth(BaseModel):
    """The verdict on a run: ``clean`` only when it completed and every episode has a
    verdict."""

    model_config = ConfigDict(frozen=True, use_attribute_docstrings=True)

    verdict: HealthVerdict
    """clean | errors (some episodes ended without a verdict) | failed | cancelled | aborted
    | in_progress."""
    error_count: int
    """Episodes that ended in error, exception, timeout or no_verdict."""
    reason: str | None = None
    """Why the verdict is not ``clean``, in words."""


def error_count(status_counts: Mapping[str, int]) -> int:
    """Episodes counted as errors in a run's ``status_counts``."""
    return sum(status_counts.get(status, 0) for status in ERROR_STATUSES)


def _error_breakdown(status_counts: Mapping[str, int]) -> str:
    return ", ".join(
        f"{status} {status_counts[status]}"
        for status in ERROR_STATUSES
        if status_counts.get(status)
    )


def assess(
    status: str, status_counts: Mapping[str, int], episodes_total: int, run_error: str | None
) -> RunHealth:
    """The verdict for a run in ``status`` whose episodes ended as ``status_counts`` say."""
    errors = error_count(status_counts)
    breakdown = _error_breakdown(status_counts)
    if status in _UNFINISHED:
        reason = run_error or f"the run is {status}"
        if errors:
            reason += f"; {errors} episode(s) ended without a verdict ({breakdown})"
        return RunHealth(verdict=_UNFINISHED[status], error_count=errors, reason=reason)
    if status != "completed":
        reason = f"{errors} episode(s) so far ended without a verdict ({breakdown})"
        return RunHealth(
            verdict="in_progress", error_count=errors, reason=reason if errors else None
        )
    if errors:
        reason = f"{errors} of {episodes_total} episodes ended without a verdict ({breakdown})"
        return RunHealth(verdict="errors", error_count=errors, reason=reason)
    return RunHealth(verdict="clean", error_count=0)


def of_summary(summary: Mapping[str, Any]) -> RunHealth:
    """The verdict of a summary.json read as a dict (also one written without a verdict,
    e.g. by the scheduler for a run that never started)."""
    return assess(
        str(summary.get("status", "pending")),
        summary.get("status_counts") or {},
        int(summary.get("episodes_total") or 0),
        summary.get("error"),
    )


def error_budget_exceeded(
    max_errors: int | float | None, errors: int, episodes_total: int
) -> str | None:
    """Why the run must stop, when ``errors`` exceed ``max_errors``; else None.

    An int is a count of error episodes; a float in (0, 1) a fraction of the run's planned
    episodes (so the run stops as soon as the final fraction is sure to exceed it).
    """
    if max_errors is None:
        return None
    if isinstance(max_errors, float):
        if errors <= max_errors * episodes_total:
            return None
        budget = f"{max_errors:g} of {episodes_total} episodes"
    elif errors <= max_errors:
        return None
    else:
        budget = str(max_errors)
    return (
        f"max_errors {budget} exceeded: {errors} episodes ended in error, exception, timeout "
        "or no_verdict; the run stopped early"
    )
