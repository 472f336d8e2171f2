"""A finished run for the terminal: the metrics and per-task tables with their intervals,
the health verdict, the determinism block and the stop rule's decision (``eval``, ``demo``).
"""

from __future__ import annotations

from collections.abc import Mapping

from rich.table import Table

from agentcanvas.api.failure_report import record_problem
from agentcanvas.cli.common import stderr
from agentcanvas.cli.determinism import determinism_line, determinism_table
from agentcanvas.cli.status_text import counts_text
from agentcanvas.eval.config import EvalRun
from agentcanvas.eval.metrics import MetricAggregate

__all__ = [
    "error_lines",
    "method_legend",
    "metrics_table",
    "print_summary",
    "stop_line",
    "task_table",
]


def _num(value: float | None, digits: int = 4) -> str:
    return "-" if value is None or value != value else f"{value:.{digits}f}"


def _kind(agg: MetricAggregate) -> str:
    kind: str = agg.kind or "?"
    if agg.range is not None and agg.kind == "bounded":
        kind += f" [{agg.range[0]:g},{agg.range[1]:g}]"
    return kind + (" (inferred)" if agg.kind_source == "inferred" else "")


def _coverage(agg: MetricAggregate) -> str:
    """``n scored / planned``: how much of the plan a figure covers."""
    return f"{agg.n}/{agg.n_planned}" if agg.n_planned is not None else str(agg.n)


def _with_errors(agg: MetricAggregate) -> tuple[str, str]:
    """The mean with errors counted as failures, and the worst–best range."""
    if agg.worst is None or agg.best is None:
        return "-", "-"
    spread = f"{agg.worst:.3f}–{agg.best:.3f}"
    return _num(agg.errors_as_failures, 3), spread


SHORT_METHOD = {
    "wilson": "Wilson",
    "clopper-pearson": "Clopper-Pearson",
    "betting": "betting",
    "t": "t",
    "bootstrap": "bootstrap",
    "none": "-",
}


def metrics_table(aggregates: Mapping[str, MetricAggregate], title: str) -> Table:
    """Each metric: kind, mean over scored episodes with its interval and method, how many
    planned episodes it covers; when any episode errored, its errors, the rate with errors
    as failures and the worst-best range (a clean run keeps the table narrow)."""
    errors = any(agg.n_errors for agg in aggregates.values())
    table = Table(title=title)
    columns = ["metric", "kind", "mean", "95% interval", "scored/planned"]
    columns += ["errors", "errors as failures", "worst–best"] if errors else []
    for col in [*columns, "method"]:
        table.add_column(col)
    for name, agg in aggregates.items():
        row = [
            name,
            _kind(agg),
            _num(agg.mean, 3),
            "-" if agg.method == "none" else f"[{agg.lo:.3f}, {agg.hi:.3f}]",
            _coverage(agg),
        ]
        if errors:
            row += [f"[red]{agg.n_errors}" if agg.n_errors else "0", *_with_errors(agg)]
        table.add_row(*row, SHORT_METHOD.get(agg.method, agg.method))
    return table


def method_legend(aggregates: Mapping[str, MetricAggregate]) -> list[str]:
    """Each interval method used, once, with its reference."""
    used = {agg.method: agg.method_name for agg in aggregates.values() if agg.method != "none"}
    return [f"{SHORT_METHOD.get(m, m)}: {name}" for m, name in sorted(used.items()) if name]


def task_table(by_task: Mapping[str, Mapping[str, MetricAggregate]]) -> Table:
    """Success per task with its interval and coverage (and errors, when any); every task is
    listed."""
    errors = any(a.n_errors for aggs in by_task.values() for a in aggs.values())
    table = Table(title="per task (success over scored episodes; errors are not scored)")
    columns = ["task", "success", "95% interval", "scored/planned"]
    columns += ["errors", "errors as failures", "worst–best"] if errors else []
    for col in [*columns, "spl/return"]:
        table.add_column(col)
    for task, aggs in by_task.items():
        success = aggs.get("success")
        second = aggs.get("spl") or aggs.get("return")
        tail = _num(second.mean if second else None, 3)
        if success is None:
            table.add_row(task, *["-"] * (len(columns) - 1), tail)
            continue
        row = [
            task,
            _num(success.mean, 3),
            "-" if success.method == "none" else f"[{success.lo:.3f}, {success.hi:.3f}]",
            _coverage(success),
        ]
        if errors:
            row += [f"[red]{success.n_errors}" if success.n_errors else "0"]
            row += list(_with_errors(success))
        table.add_row(*row, tail)
    return table


def print_summary(run: EvalRun, where: str) -> None:
    title = (
        f"{run.graph_name} - {run.episodes_done}/{run.episodes_total} episodes, "
        f"{run.config.worker_count} worker(s), status {run.status}, "
        f"health {run.health.verdict} ({run.health.error_count} errors)"
    )
    stderr.print(metrics_table(run.aggregate_metrics, title))
    for line in method_legend(run.aggregate_metrics):
        stderr.print(f"  {line}", markup=False)
    for name, agg in run.aggregate_metrics.items():
        if agg.note:
            stderr.print(f"  {name}: {agg.note}", style="yellow", markup=False)
    stderr.print(task_table(run.aggregate_by_task))
    stderr.print(f"status counts: {counts_text(run.status_counts)}", markup=False)
    health = run.health
    style = "green" if health.verdict == "clean" else "bold red"
    stderr.print(
        f"[{style}]health: {health.verdict}, {health.error_count} error episode(s)"
        + (f" - {health.reason}" if health.reason else "")
    )
    for line in error_lines(run):
        stderr.print(line, style="red", markup=False, highlight=False)
    stderr.print(determinism_table(run.determinism))
    style = "green" if run.determinism.level == "certified" else "yellow"
    stderr.print(determinism_line(run.determinism), style=style, markup=False)
    for reason in run.determinism.reasons:
        stderr.print(f"  {reason}", style="yellow", markup=False)
    if run.stop is not None:
        stderr.print(stop_line(run), markup=False)
    stderr.print(f"run written to {where}")


MAX_ERROR_LINES = 20


def error_lines(run: EvalRun) -> list[str]:
    """One line per episode that did not complete (at most MAX_ERROR_LINES): its status, its
    end reason and the first line of what went wrong (:func:`record_problem`), then where to
    see them grouped by cause when any episode did not succeed."""
    errors = [e for e in run.episodes if e.status != "completed"]
    lines = [
        f"  episode {ep.index} ({ep.task} #{ep.episode_index}): {record_problem(ep)}"
        for ep in errors[:MAX_ERROR_LINES]
    ]
    if len(errors) > MAX_ERROR_LINES:
        lines.append(f"  … {len(errors) - MAX_ERROR_LINES} more episode(s) in error")
    if errors or any(e.end_reason not in (None, "success") for e in run.episodes):
        lines.append(f"  grouped by cause: agentcanvas failures {run.run_id}")
    return lines


def stop_line(run: EvalRun) -> str:
    """The stop rule's decision in one line: what, on how many episodes, with what evidence."""
    stop = run.stop
    assert stop is not None
    saved = stop.episodes_planned - stop.episodes_used
    text = f"stop rule {stop.rule} {stop.target}: {stop.decision} after {stop.episodes_used} "
    text += f"of {stop.episodes_planned} planned episodes"
    text += f" ({saved} not run)" if stop.decided else ""
    if stop.evidence is not None:
        text += (
            f"; e-value {stop.evidence:.3g} (threshold {stop.threshold:.3g} = 1/alpha), "
            f"discordant pairs {stop.b_wins} for this run, {stop.a_wins} for the baseline"
        )
    if stop.halfwidth is not None:
        text += f"; confidence sequence ±{stop.halfwidth:.3f}"
    if stop.kept_apart:
        text += f"; {stop.kept_apart} episode(s) finished past the decision, kept apart in "
        text += f"{stop.kept_apart_folder}/"
    return f"{text}. Method: {stop.method}, alpha {stop.alpha:g}" + (
        f". {stop.note}" if stop.note else ""
    )
