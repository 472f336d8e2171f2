"""A run's state in a few readable lines, from its summary as the backend serves it (JSON):
``agentcanvas status`` without ``--json``. Counts read ``completed 18 · error 6``, never a
Python repr; every rate names its interval's method and what it covers."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["counts_text", "status_text", "success_text"]


def counts_text(counts: Mapping[str, Any] | None) -> str:
    """``{'completed': 18, 'error': 6}`` → ``completed 18 · error 6`` (``-`` when none)."""
    if not counts:
        return "-"
    return " · ".join(f"{status} {count}" for status, count in counts.items())


def _rate(value: Any) -> str:
    return "-" if not isinstance(value, int | float) else f"{value:.3f}"


def success_text(success: Mapping[str, Any] | None) -> str:
    """The success rate with its interval and method, what it covers and its errors."""
    if not success or success.get("mean") is None:
        return "- (no scored episode yet)"
    text = _rate(success.get("mean"))
    if success.get("lo") is not None and success.get("hi") is not None:
        method = success.get("method_name") or success.get("method") or "?"
        text += f" [{_rate(success['lo'])}, {_rate(success['hi'])}] 95 % ({method})"
    n, planned = success.get("n"), success.get("n_planned")
    text += f", over {n} scored" + (f" of {planned} planned" if planned is not None else "")
    errors = success.get("n_errors") or 0
    if errors:
        text += (
            f"; {errors} errored, not scored "
            f"({_rate(success.get('errors_as_failures'))} with errors as failures)"
        )
    return text


def status_text(summary: Mapping[str, Any], name: str | None = None) -> str:
    """The lines of ``agentcanvas status``: status and health, episodes, success, errors,
    determinism, the run's error and why it waits (each only when there is something)."""
    run = str(summary.get("run_id", "?"))
    title = f"run {run}" + (f' "{name}"' if name else "")
    lines = [f"{title} - graph {summary.get('graph_name') or '?'}"]
    health = summary.get("health") or {}
    verdict = health.get("verdict", "-")
    status = f"{summary.get('status', '?')}, health {verdict}"
    if health.get("reason"):
        status += f" ({health['reason']})"
    rows: list[tuple[str, str]] = [("status", status)]
    done, total = summary.get("episodes_done", 0), summary.get("episodes_total", 0)
    rows.append(("episodes", f"{done}/{total} done · {counts_text(summary.get('status_counts'))}"))
    metrics = summary.get("aggregate_metrics") or {}
    rows.append(("success", success_text(metrics.get("success"))))
    rows.append(("errors", f"{health.get('error_count', 0)} episode(s)"))
    determinism = summary.get("determinism") or {}
    if determinism.get("level"):
        detail = determinism.get("level_detail") or ""
        rows.append(("determinism", determinism["level"] + (f" - {detail}" if detail else "")))
    if summary.get("error"):
        rows.append(("error", str(summary["error"])))
    if summary.get("waiting_reason"):
        rows.append(("waiting", str(summary["waiting_reason"])))
    width = max(len(label) for label, _ in rows)
    lines += [f"  {label:<{width}}  {value}" for label, value in rows]
    return "\n".join(lines)
