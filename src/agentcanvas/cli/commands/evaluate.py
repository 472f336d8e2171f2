"""``agentcanvas eval``, ``verify-invariance`` and ``demo``: runs in the foreground."""

from __future__ import annotations

import argparse
import asyncio
import shlex
from collections.abc import Mapping

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from agentcanvas import envsettings, exit_codes
from agentcanvas.cli.command import Command, Parser
from agentcanvas.cli.common import print_json, resolve_graph, stderr, workspace_registry
from agentcanvas.cli.options import add_json, add_meta, meta_of
from agentcanvas.cli.run_options import add_run_options, build_config
from agentcanvas.cli.summary import print_summary
from agentcanvas.cluster import select_engine
from agentcanvas.errors import ConfigError, RunError
from agentcanvas.eval.config import EvalConfig, EvalRun
from agentcanvas.eval.episode_plan import planned_total
from agentcanvas.eval.events import EvalProgress, EvalWaiting, LiveEvent
from agentcanvas.eval.foreground import ForegroundRun, run_foreground
from agentcanvas.eval.invariance import diff_runs
from agentcanvas.eval.run_meta import RunMeta, write_meta
from agentcanvas.eval.run_setup import new_run_dir, run_registry
from agentcanvas.eval.store import RunDir
from agentcanvas.eval.tasks import check_tasks
from agentcanvas.fileio import read_json
from agentcanvas.graph.model import Graph
from agentcanvas.paths import runs_dir
from agentcanvas.server.registry import WorkspaceComponentRegistry

__all__ = ["DEMO", "EVAL", "VERIFY_INVARIANCE", "interrupted_text", "run_here"]


def waiting_line(event: EvalWaiting) -> str:
    """What a run waits for before its first episode, said on the progress view."""
    return (
        f"waiting for Ray to place the run's actors ({event.waited_s:.0f} s of "
        f"{event.deadline_s:.0f} s): {event.reason}"
    )


class ProgressView:
    """Rich progress on stderr: episodes done/total, the running success rate (with its
    anytime-valid sequence), the errors so far, the ETA; at the end, the final summary's."""

    def __init__(self, total: int, label: str) -> None:
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("SR {task.fields[sr]}"),
            TextColumn("{task.fields[errors]}"),
            TimeRemainingColumn(),
            console=stderr,
            transient=False,
        )
        self.task = self.progress.add_task(label, total=total, sr="-", errors=_errors(0))

    def __call__(self, event: LiveEvent) -> None:
        if isinstance(event, EvalWaiting):  # e.g. a Ray placement group not placed yet
            self.progress.console.print(
                waiting_line(event), markup=False, highlight=False, soft_wrap=True
            )
            return
        if isinstance(event, EvalProgress) and event.episodes_done is not None:
            sr = event.success_rate
            shown = "-" if sr is None else f"{sr:.3f} of {event.success_n} scored"
            if event.success_cs is not None:  # valid however often one looks
                lo, hi = event.success_cs
                shown += f" · anytime CS [{lo:.3f}, {hi:.3f}] (n={event.success_cs_n})"
            self.progress.update(
                self.task,
                completed=event.episodes_done,
                sr=shown,
                errors=_errors(event.error_count or 0),
            )

    def finish(self, run: EvalRun) -> None:
        """The bar's last state is the final summary's (live aggregates lag behind)."""
        success = run.aggregate_metrics.get("success")
        shown = "-"
        if success is not None and success.mean is not None:
            shown = f"{success.mean:.3f} of {success.n} scored (final)"
        self.progress.update(
            self.task,
            total=run.episodes_total or None,
            completed=run.episodes_done,
            sr=shown,
            errors=_errors(run.health.error_count),
        )


def _errors(count: int) -> str:
    return f"[red]{count} error(s), not scored[/]" if count else "0 errors"


def _run(args: argparse.Namespace, label: str, meta: RunMeta | None = None) -> ForegroundRun:
    envsettings.check_all()  # refused here, naming the variable, before any server starts
    registry = workspace_registry()
    graph = resolve_graph(registry, args.graph)
    config = build_config(args, graph.name)
    check_tasks(registry, graph, config.tasks, field="--tasks")
    run_dir = new_run_dir(runs_dir(registry.workspace))
    if meta is not None and meta != RunMeta():  # the folder first, so the name shows at once
        write_meta(run_dir.root, meta)
    label = f"{label} w={config.worker_count}"
    try:
        return asyncio.run(run_here(registry, graph, config, run_dir, label))
    except KeyboardInterrupt:
        stderr.print(interrupted_text(run_dir, args), markup=False, highlight=False)
        raise


async def run_here(
    registry: WorkspaceComponentRegistry,
    graph: Graph,
    config: EvalConfig,
    run_dir: RunDir,
    label: str,
    *,
    shared_urls: Mapping[str, str] | None = None,
) -> ForegroundRun:
    """One foreground run with a progress bar; ``shared_urls``: shared servers to borrow.
    The bar's total is the plan's (``planned_total``: a retry's listed episodes, else
    episode_count per task)."""
    view = ProgressView(planned_total(config, graph), label)
    run = run_registry(registry.catalogue, run_dir)  # its servers log into the run folder
    with view.progress:
        result = await run_foreground(
            run,
            graph,
            config,
            broadcast=view,
            run_dir=run_dir,
            shared_urls=shared_urls,
            engine=select_engine(config),
        )
        view.finish(result.summary)
    return result


async def _runs_at(args: argparse.Namespace, counts: list[int]) -> list[ForegroundRun]:
    """The same run at each worker count. The graph's shared node sets (models) start once,
    in the first run's folder, and every run borrows them by URL as runs queued on the
    backend do: a model loads once, not once per worker count. (The Ray engine starts its
    own model actors per run.)"""
    registry = workspace_registry()
    graph = resolve_graph(registry, args.graph)
    # Every count's config is checked before the first run starts.
    configs = [build_config(args, graph.name, worker_count=w) for w in counts]
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
            runs.append(await run_here(registry, graph, config, run_dir, label, shared_urls=urls))
    finally:
        await asyncio.shield(owner.shutdown_all())
    return runs


def interrupted_text(run_dir: RunDir, args: argparse.Namespace) -> str:
    """What Ctrl-C leaves: the run's folder, what it holds, how to go on from there."""
    run_id = run_dir.root.name
    done = "?"
    try:
        summary = read_json(run_dir.summary_path)
        done = f"{summary.get('episodes_done', 0)} of {summary.get('episodes_total', '?')}"
        status = summary.get("status", "?")
    except (RunError, OSError):
        status = "not started"
    again = shlex.join(["agentcanvas", *getattr(args, "argv", [])]) or "agentcanvas eval ..."
    return (
        f"interrupted: run {run_id} is {status} with {done} episodes done; its folder: "
        f"{run_dir.root}\n"
        f"  to finish it (only the missing episodes, same folder): start a backend in this "
        f"workspace (`agentcanvas serve`), then `agentcanvas resume {run_id} --follow`\n"
        f"  or run it again from the start: {again}"
    )


def cmd_eval(args: argparse.Namespace) -> int:
    meta = meta_of(args)  # refused before anything runs
    result = _run(args, "eval", meta)
    summary = result.summary
    if args.json:
        print_json(summary.model_dump(mode="json"), indent=1)
    else:
        print_summary(summary, str(result.run_dir.root))
    return exit_codes.for_run(summary.status, summary.health.verdict)


def cmd_verify(args: argparse.Namespace) -> int:
    text = args.worker_counts
    try:
        counts = [int(w) for w in text.split(",")]
    except ValueError as exc:
        raise ConfigError(f"--workers: expected e.g. 1,2,4, got {text!r}") from exc
    if len(counts) < 2 or any(not 1 <= w <= 64 for w in counts):
        raise ConfigError(f"--workers: give two or more counts from 1 to 64, got {text!r}")
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


DEMO_ARGV = ("babyai_oracle", "-n", "10", "-w", "2", "--save-frames")
"""``demo`` is ``eval`` with these arguments, parsed by eval's own parser."""


def demo_arguments() -> argparse.Namespace:
    """The demo's arguments, through the eval command's parser: they cannot drift."""
    parser = Parser(prog="agentcanvas demo")
    EVAL.arguments(parser)
    return parser.parse_args(list(DEMO_ARGV))


def cmd_demo(args: argparse.Namespace) -> int:
    """The main job on built-in defaults: a 2-worker batch eval of babyai_oracle."""
    demo_args = demo_arguments()
    stderr.print("demo: batch eval of babyai_oracle, 10 episodes x 2 tasks on 2 workers")
    result = _run(demo_args, "demo")
    print_summary(result.summary, str(result.run_dir.root))
    print(f"run folder: {result.run_dir.root}")
    return exit_codes.for_run(result.summary.status, result.summary.health.verdict)


def _graph_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("graph", metavar="GRAPH", help="graph name or path to a graph .json")


def _eval_arguments(p: argparse.ArgumentParser) -> None:
    _graph_argument(p)
    add_json(p, "only the final summary (progress and tables go to stderr)")
    add_meta(p)
    add_run_options(p)


def _verify_arguments(p: argparse.ArgumentParser) -> None:
    _graph_argument(p)
    p.add_argument(
        "--workers",
        dest="worker_counts",
        metavar="W1,W2,...",
        default="1,3,4",
        help="comma-separated worker counts, two or more from 1 to 64 (default: 1,3,4)",
    )
    add_run_options(p, exclude={"worker_count"})


EVAL = Command(
    "eval",
    "batch-evaluate a graph over many episodes",
    cmd_eval,
    _eval_arguments,
    examples=(
        "eval babyai_oracle -n 50 -w 4",
        "eval my_graph --tasks T1,T2 --start-index 100 --step-budget 64 --seed 7 --json",
        "eval my_graph -n 100 --max-errors 5 --per-step-timeout 2 --episode-timeout 60",
        "eval my_graph -n 500 --until-halfwidth 0.05",
        'eval my_graph -n 20 --name "lr 3e-4" --tag sweep --save-frames',
    ),
    exit_codes="eval",
)
VERIFY_INVARIANCE = Command(
    "verify-invariance",
    "run at several worker counts and diff the results",
    cmd_verify,
    _verify_arguments,
    examples=("verify-invariance babyai_oracle -n 12 --workers 1,4",),
    exit_codes="verify-invariance",
)
DEMO = Command(
    "demo",
    "run the main job on built-in defaults",
    cmd_demo,
    examples=("demo",),
    description="A 2-worker batch eval of babyai_oracle, 10 episodes x 2 tasks, saving "
    f"frames: `agentcanvas eval {' '.join(DEMO_ARGV)}`.",
)
