"""``agentcanvas eval`` and ``agentcanvas verify-invariance`` (foreground runs)."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from agentcanvas import envsettings, exit_codes
from agentcanvas.cli_common import (
    FRAMES_HELP,
    add_meta_arguments,
    command,
    parse_max_errors,
    print_json,
    resolve_graph,
    workspace_registry,
)
from agentcanvas.cli_determinism import determinism_line, determinism_table
from agentcanvas.cluster import select_engine
from agentcanvas.errors import ConfigError
from agentcanvas.eval.config import EvalConfig, EvalRun
from agentcanvas.eval.events import EvalProgress, LiveEvent
from agentcanvas.eval.foreground import ForegroundRun, run_foreground
from agentcanvas.eval.invariance import diff_runs
from agentcanvas.eval.metrics import MetricAggregate
from agentcanvas.eval.run_meta import RunMeta, meta_from_flags, write_meta
from agentcanvas.eval.run_setup import new_run_dir, run_registry
from agentcanvas.eval.runner import episode_tasks
from agentcanvas.eval.store import RunDir
from agentcanvas.eval.tasks import check_tasks
from agentcanvas.graph.model import Graph
from agentcanvas.paths import runs_dir
from agentcanvas.server.registry import WorkspaceComponentRegistry

stderr = Console(stderr=True)


def add_eval_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("graph", help="graph name or path to a graph .json")
    p.add_argument("-n", "--episodes", type=int, default=10, help="episodes per task (default 10)")
    p.add_argument("--tasks", help="comma-separated task ids (default: the graph's tasks)")
    p.add_argument("--start-index", type=int, default=0, help="first episode_index of each task")
    p.add_argument("--step-budget", type=int, help="override the step budget (>= 1)")
    p.add_argument("--seed", type=int, default=0, help="run seed (default 0)")
    p.add_argument(
        "--per-step-timeout",
        type=float,
        default=10.0,
        help="deadline of each node call, seconds (a wall-clock safety net)",
    )
    p.add_argument(
        "--episode-timeout",
        type=float,
        help="wall-clock limit per episode, seconds (default: step budget × per-step timeout)",
    )
    p.add_argument(
        "--max-errors",
        metavar="N|FRACTION",
        help="stop the run (status failed, exit 2) once more than N episodes, or more than "
        "this fraction (0 < f < 1) of the run's episodes, end in error, exception, timeout "
        "or no_verdict (default: never stop; the health verdict reports them)",
    )
    p.add_argument("--save-frames", action="store_true", help="save frames (= --frames every)")
    p.add_argument("--frames", choices=["every", "failures", "none"], help=FRAMES_HELP)
    p.add_argument(
        "--engine",
        choices=("local", "ray"),
        default="local",
        help="local: node-set servers on this host (default); ray: episodes in Ray actors",
    )
    p.add_argument(
        "--ray-address",
        help="engine ray: auto, host:port or ray://host:10001 (default: start a local Ray)",
    )
    p.add_argument(
        "--certify",
        action="store_true",
        help="audit every batched row of the run, each recomputed alone (determinism level "
        "certified; a second forward pass per batched row): for numbers that go in a paper",
    )
    p.add_argument(
        "--until-halfwidth",
        type=float,
        metavar="H",
        help="stop rule: end once the success rate's anytime-valid confidence sequence "
        "(overall, all tasks pooled) is at most ±H wide; -n stays the cap",
    )
    p.add_argument(
        "--until-decided-vs",
        metavar="RUN",
        help="stop rule: end once an anytime-valid paired test (McNemar on the discordant "
        "pairs) says this run is better or worse than run RUN on the same episodes; at the "
        "cap: not distinguishable",
    )
    p.add_argument(
        "--stop-alpha",
        type=float,
        default=0.05,
        help="error rate of the stop rules (default 0.05)",
    )
    p.add_argument(
        "--binary-interval",
        choices=("wilson", "clopper-pearson"),
        default="wilson",
        help="interval of 0/1 metrics such as success: wilson (default) or clopper-pearson "
        "(exact, never below 95 %%, wider)",
    )


def build_config(args: argparse.Namespace, graph_name: str, workers: int) -> EvalConfig:
    """EvalConfig from CLI flags; a bad value names the flag's field."""
    try:
        return EvalConfig(
            graph_name=graph_name,
            episode_count=args.episodes,
            worker_count=workers,
            tasks=[t.strip() for t in args.tasks.split(",")] if args.tasks else None,
            start_index=args.start_index,
            step_budget=args.step_budget,
            seed=args.seed,
            per_step_timeout_s=args.per_step_timeout,
            episode_timeout_s=args.episode_timeout,
            max_errors=parse_max_errors(args.max_errors),
            save_frames=args.save_frames,
            frames=args.frames,
            engine=args.engine,
            ray_address=args.ray_address,
            certify=args.certify,
            binary_interval=args.binary_interval,
            until_halfwidth=args.until_halfwidth,
            until_decided_vs=args.until_decided_vs,
            stop_alpha=args.stop_alpha,
        )
    except ValidationError as exc:
        item = exc.errors()[0]
        raise ConfigError(f"field '{'.'.join(map(str, item['loc']))}': {item['msg']}") from exc


class _ProgressView:
    """Rich progress on stderr: episodes done/total, running success rate, ETA."""

    def __init__(self, total: int, label: str) -> None:
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("SR {task.fields[sr]}"),
            TimeRemainingColumn(),
            console=stderr,
            transient=False,
        )
        self.task = self.progress.add_task(label, total=total, sr="-")

    def __call__(self, event: LiveEvent) -> None:
        if isinstance(event, EvalProgress) and event.episodes_done is not None:
            sr, errors = event.success_rate, event.error_count or 0
            shown = "-" if sr is None else f"{sr:.3f} of {event.success_n} scored"
            if event.success_cs is not None:  # valid however often one looks
                lo, hi = event.success_cs
                shown += f" · anytime CS [{lo:.3f}, {hi:.3f}] (n={event.success_cs_n})"
            if errors:
                shown += f" [red]· {errors} error(s), not scored[/]"
            self.progress.update(self.task, completed=event.episodes_done, sr=shown)


def _run(
    args: argparse.Namespace, workers: int, label: str, meta: RunMeta | None = None
) -> ForegroundRun:
    envsettings.check_all()  # refused here, naming the variable, before any server starts
    registry = workspace_registry()
    graph = resolve_graph(registry, args.graph)
    config = build_config(args, graph.name, workers)
    check_tasks(registry, graph, config.tasks, field="--tasks")
    run_dir = new_run_dir(runs_dir(registry.workspace))
    if meta is not None and meta != RunMeta():  # the folder first, so the name shows at once
        write_meta(run_dir.root, meta)
    return asyncio.run(_run_here(registry, graph, config, run_dir, label))


async def _run_here(
    registry: WorkspaceComponentRegistry,
    graph: Graph,
    config: EvalConfig,
    run_dir: RunDir,
    label: str,
    shared_urls: Mapping[str, str] | None = None,
) -> ForegroundRun:
    """One foreground run with a progress bar; ``shared_urls``: shared servers to borrow."""
    view = _ProgressView(config.episode_count * len(episode_tasks(config, graph)), label)
    run = run_registry(registry.catalogue, run_dir)  # its servers log into the run folder
    with view.progress:
        return await run_foreground(
            run,
            graph,
            config,
            broadcast=view,
            run_dir=run_dir,
            shared_urls=shared_urls,
            engine=select_engine(config),
        )


async def _runs_at(args: argparse.Namespace, counts: list[int]) -> list[ForegroundRun]:
    """The same run at each worker count. The graph's shared node sets (models) start once,
    in the first run's folder, and every run borrows them by URL as runs queued on the
    backend do: a model loads once, not once per worker count. (The Ray engine starts its
    own model actors per run.)"""
    registry = workspace_registry()
    graph = resolve_graph(registry, args.graph)
    configs = [build_config(args, graph.name, w) for w in counts]  # all refused up front
    check_tasks(registry, graph, configs[0].tasks, field="--tasks")
    base = runs_dir(registry.workspace)
    run_dirs = [new_run_dir(base)]
    owner = run_registry(registry.catalogue, run_dirs[0])
    runs: list[ForegroundRun] = []
    try:
        local = configs[0].engine == "local"
        urls = await owner.ensure_shared_nodesets_for_graph(graph) if local else {}
        for config in configs:
            run_dir = run_dirs.pop() if run_dirs else new_run_dir(base)
            label = f"w={config.worker_count}"
            runs.append(await _run_here(registry, graph, config, run_dir, label, urls))
    finally:
        await asyncio.shield(owner.shutdown_all())
    return runs


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
    stderr.print(f"status counts: {run.status_counts}")
    health = run.health
    style = "green" if health.verdict == "clean" else "bold red"
    stderr.print(
        f"[{style}]health: {health.verdict}, {health.error_count} error episode(s)"
        + (f" - {health.reason}" if health.reason else "")
    )
    errors = [e for e in run.episodes if e.status != "completed"]
    for ep in errors[:20]:
        stderr.print(
            f"  [red]episode {ep.index} ({ep.task} #{ep.episode_index}): {ep.status}: {ep.error}"
        )
    stderr.print(determinism_table(run.determinism))
    style = "green" if run.determinism.level == "certified" else "yellow"
    stderr.print(determinism_line(run.determinism), style=style, markup=False)
    for reason in run.determinism.reasons:
        stderr.print(f"  {reason}", style="yellow", markup=False)
    if run.stop is not None:
        stderr.print(stop_line(run), markup=False)
    stderr.print(f"run written to {where}")


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


@command("eval")
def cmd_eval(args: argparse.Namespace) -> int:
    meta = meta_from_flags(args.name, args.tags, args.note)  # refused before anything runs
    result = _run(args, args.workers, f"eval w={args.workers}", meta)
    summary = result.summary
    if args.json:
        print_json(summary.model_dump(mode="json"), indent=1)
    else:
        print_summary(summary, str(result.run_dir.root))
    return exit_codes.for_run(summary.status, summary.health.verdict)


@command("verify-invariance")
def cmd_verify(args: argparse.Namespace) -> int:
    try:
        counts = [int(w) for w in args.workers.split(",")]
    except ValueError as exc:
        raise ConfigError(f"--workers: expected e.g. 1,2,4, got {args.workers!r}") from exc
    if len(counts) < 2 or any(not 1 <= w <= 64 for w in counts):
        raise ConfigError(f"--workers: give two or more counts from 1 to 64, got {args.workers!r}")
    envsettings.check_all()  # refused here, naming the variable, before any server starts
    runs = asyncio.run(_runs_at(args, counts))
    base = runs[0].summary
    failed = False
    for other in runs[1:]:
        diffs = diff_runs(base, other.summary)
        label = f"workers {counts[0]} vs {other.summary.config.worker_count}"
        if diffs:
            failed = True
            print(f"DIFFER ({label}): {len(diffs)} difference(s)")
            for line in diffs[:50]:
                print(f"  {line}")
        else:
            print(f"identical ({label}): {base.episodes_done} episodes, aggregates equal")
    for r in runs:
        health = r.summary.health
        print(
            f"  run {r.run_id} (w={r.summary.config.worker_count}): {r.run_dir.root} "
            f"[{r.summary.status}, health {health.verdict}, {health.error_count} errors]"
        )
    codes = [exit_codes.for_run(r.summary.status, r.summary.health.verdict) for r in runs]
    if exit_codes.RUN_FAILED in codes:
        return exit_codes.RUN_FAILED
    return exit_codes.NOT_INVARIANT if failed else max(codes)


@command("demo")
def cmd_demo(args: argparse.Namespace) -> int:
    """The main job on built-in defaults: a 2-worker batch eval of babyai_oracle."""
    # The eval command's own parser, so the demo's options can never drift from eval's.
    parser = argparse.ArgumentParser(prog="agentcanvas demo", add_help=False)
    add_eval_arguments(parser)
    demo_args = parser.parse_args(["babyai_oracle", "-n", "10", "--save-frames"])
    demo_args.workers, demo_args.json = 2, False
    stderr.print("demo: batch eval of babyai_oracle, 10 episodes x 2 tasks on 2 workers")
    result = _run(demo_args, 2, "demo")
    print_summary(result.summary, str(result.run_dir.root))
    print(f"run folder: {result.run_dir.root}")
    return exit_codes.for_run(result.summary.status, result.summary.health.verdict)


def extend_parser(sub: Any) -> None:
    sub.add_parser("demo", help="run the main job on built-in defaults")
    codes = {"epilog": exit_codes.EPILOG, "formatter_class": argparse.RawDescriptionHelpFormatter}
    p = sub.add_parser("eval", help="batch-evaluate a graph over many episodes", **codes)
    add_eval_arguments(p)
    p.add_argument("-w", "--workers", type=int, default=1, help="parallel workers (speed only)")
    p.add_argument("--json", action="store_true", help="print only the final summary JSON")
    add_meta_arguments(p)
    p = sub.add_parser(
        "verify-invariance", help="run at several worker counts and diff results", **codes
    )
    add_eval_arguments(p)
    p.add_argument(
        "--workers", default="1,3,4", help="comma-separated worker counts (default 1,3,4)"
    )
