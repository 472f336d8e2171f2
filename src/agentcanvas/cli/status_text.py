"""A run's state in a few readable lines, from its summary as the backend serves it (JSON):
``agentcanvas status`` without ``--json``. Counts read ``completed 18 · error 6``, never a
Python repr; every rate names its interval's method and what it covers.

Its failures too (:func:`failures_text`), from the report the backend serves and
``agentcanvas failures --json`` prints (:class:`agentcanvas.api.failure_report.FailureReport`
as JSON): one line per cause, largest first, with its episodes, tasks and an example message;
with ``verbose``, the example's traceback under it (as recorded: already bounded)."""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence
from typing import Any, Final

from agentcanvas.api.failure_report import first_line

__all__ = ["counts_text", "failures_text", "listed", "status_text", "success_text"]


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


MAX_SHOWN_EPISODES: Final = 8
MAX_SHOWN_TASKS: Final = 4
MAX_SHOWN_GROUPS: Final = 20


def listed(items: Sequence[Any], at_most: int) -> str:
    """``1, 3, 5`` or ``1, 3, 5, … (+12 more)``."""
    shown = ", ".join(map(str, items[:at_most]))
    return shown + (f", … (+{len(items) - at_most} more)" if len(items) > at_most else "")


def _group_lines(group: Mapping[str, Any], verbose: bool) -> list[str]:
    tasks = group["tasks"]
    lines = [
        f"  {group['count']} × {group['label']} - task{'s' if len(tasks) > 1 else ''} "
        f"{listed(tasks, MAX_SHOWN_TASKS)} - episode{'s' if group['count'] > 1 else ''} "
        f"{listed(group['episodes'], MAX_SHOWN_EPISODES)}",
        f"      {first_line(group['example'])}",
    ]
    trace = group.get("example_traceback")
    if verbose and trace:
        lines.append(f"      traceback of episode {group['example_episode']}:")
        lines.append(textwrap.indent(trace, "        "))
    return lines


def failures_text(report: Mapping[str, Any], verbose: bool = False) -> str:
    """The report in lines (see the module's doc), with how to retry them."""
    run_id = report["run_id"]
    if not report["failed"]:
        return f"run {run_id}: no failure in {report['episodes']} episode(s)"
    lines = [
        f"run {run_id}: {report['failed']} of {report['episodes']} episode(s) did not succeed "
        f"({report['errors']} error(s)), by cause:"
    ]
    groups = report["groups"]
    for group in groups[:MAX_SHOWN_GROUPS]:
        lines += _group_lines(group, verbose)
    if len(groups) > MAX_SHOWN_GROUPS:
        lines.append(f"  … {len(groups) - MAX_SHOWN_GROUPS} more cause(s) (--json lists them all)")
    if not verbose and any(g.get("example_traceback") for g in groups):
        lines.append(f"  tracebacks: agentcanvas failures {run_id} --verbose")
    if report["errors"]:
        lines.append(f"  run the errors again: agentcanvas retry {run_id} --errors")
    elif report["retryable_failures"]:
        lines.append(f"  run them again: agentcanvas retry {run_id} --failures")
    return "\n".join(lines)
