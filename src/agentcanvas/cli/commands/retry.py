"""``agentcanvas retry RUN``: run some of a run's episodes again — its errors, its failures or
the run indices given — with the same seeds, as a new run linked to the original
(``retry_of``); the original keeps its records (:mod:`agentcanvas.eval.retry`).

In the foreground like ``eval`` (progress bar, summary, exit code), then the command that
compares the two runs (they pair by ``(task, episode_index)``). ``--submit`` queues it on the
backend instead (``POST /api/eval/v2/retry/{id}``: the backend's copy of the run, its frozen
graph).
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path
from typing import Any

from agentcanvas import envsettings, exit_codes
from agentcanvas.cli.command import Command
from agentcanvas.cli.commands.backend import add_idempotency_key, backend, post_start
from agentcanvas.cli.commands.evaluate import interrupted_text, run_here
from agentcanvas.cli.common import RUN_HELP, print_json, run_id_of, stderr, workspace_registry
from agentcanvas.cli.options import add_json, add_meta, add_url, meta_of
from agentcanvas.cli.summary import print_summary
from agentcanvas.errors import DamagedRunError, NotFoundError, UserInputError
from agentcanvas.eval.config import EvalConfig
from agentcanvas.eval.retry import SELECTION_KEYWORDS, original_graph, parse_selection, retry_config
from agentcanvas.eval.run_meta import RunMeta, write_meta
from agentcanvas.eval.run_setup import new_run_dir
from agentcanvas.eval.run_spec import RunSpec
from agentcanvas.eval.store import RunDir
from agentcanvas.export import workspace_runs
from agentcanvas.paths import runs_dir
from agentcanvas.server.registry import WorkspaceComponentRegistry

__all__ = ["RETRY"]


def selection_of(args: argparse.Namespace) -> tuple[str, str]:
    """The selection's text and the flag that gave it (default: ``--errors``)."""
    if args.episodes is not None:
        return args.episodes, "--episodes"
    if args.failures:
        return "failures", "--failures"
    return "errors", "--errors"


def retried(args: argparse.Namespace, run_dir: RunDir) -> EvalConfig:
    """The retry's config; a bad or empty selection is a UserInputError naming its flag."""
    text, flag = selection_of(args)
    try:
        config = retry_config(run_dir, parse_selection(text))
    except (NotFoundError, DamagedRunError):
        raise
    except UserInputError as exc:
        raise UserInputError(f"{flag}: {exc}") from exc
    if args.worker_count is not None:
        config = EvalConfig.model_validate(
            {**config.model_dump(), "worker_count": args.worker_count}
        )
    return config


def cmd_retry(args: argparse.Namespace) -> int:
    meta = meta_of(args)  # refused before anything runs
    if args.submit:
        return _submit(args, meta)
    original = run_id_of(args.run)
    run_dir = RunDir(workspace_runs(None) / original)
    graph = original_graph(run_dir)
    config = retried(args, run_dir)
    envsettings.check_all()  # refused here, naming the variable, before any server starts
    registry = _registry(RunSpec.read(run_dir))
    new_dir = new_run_dir(runs_dir(registry.workspace))
    if meta != RunMeta():
        write_meta(new_dir.root, meta)
    label = f"retry w={config.worker_count}"
    try:
        result = asyncio.run(run_here(registry, graph, config, new_dir, label))
    except KeyboardInterrupt:
        stderr.print(interrupted_text(new_dir, args), markup=False, highlight=False)
        raise
    summary = result.summary
    if args.json:
        print_json(summary.model_dump(mode="json"), indent=1)
    else:
        print_summary(summary, str(new_dir.root))
    _say_what_next(original, result.run_id, len(config.episodes or ()), args.json)
    return exit_codes.for_run(summary.status, summary.health.verdict)


def _registry(spec: RunSpec) -> WorkspaceComponentRegistry:
    """The workspace's registry; with the original's overlay over it when it had one."""
    if spec.active_workspace_dir is None:
        return workspace_registry()
    registry = WorkspaceComponentRegistry(active_workspace=Path(spec.active_workspace_dir))
    registry.scan_all()
    return registry


def _say_what_next(original: str, new: str, count: int, quiet: bool) -> None:
    """The new run's id and how to compare it with the original (stdout keeps the JSON)."""
    lines = (
        f"retry run {new} of {original}: {count} episode(s), the original's seeds",
        f"compare them: agentcanvas compare {original} {new}",
    )
    for line in lines:
        if quiet:
            stderr.print(line, markup=False, highlight=False)
        else:
            print(line)


def _submit(args: argparse.Namespace, meta: RunMeta) -> int:
    """Queue the retry on the backend (``POST /api/eval/v2/retry/{id}``): it selects the
    episodes from the original's records there and runs the original's frozen graph."""
    original, _ = backend(args).find_run(args.run)
    text, flag = selection_of(args)
    body: dict[str, Any] = {"select": text, **meta.model_dump(exclude_defaults=True)}
    if args.worker_count is not None:
        body["worker_count"] = args.worker_count
    try:
        started = post_start(args, body, f"/api/eval/v2/retry/{original}")
    except UserInputError as exc:
        raise UserInputError(str(exc).replace("select:", f"{flag}:", 1)) from exc
    if args.json:
        print_json(started, indent=None)
    else:
        print(f"queued retry run {started['run_id']} of {original}, the original's seeds")
        print(f"compare them once it ends: agentcanvas compare {original} {started['run_id']}")
    return exit_codes.OK


def _retry_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", metavar="RUN", help=f"the original: {RUN_HELP}")
    which = p.add_mutually_exclusive_group()
    which.add_argument(
        "--errors",
        action="store_true",
        help=f"the {SELECTION_KEYWORDS['errors']} (the default)",
    )
    which.add_argument("--failures", action="store_true", help=f"{SELECTION_KEYWORDS['failures']}")
    which.add_argument(
        "--episodes",
        metavar="I,J,A-B",
        help="these run indices of the original (e.g. 3,17,40-45)",
    )
    p.add_argument(
        "-w",
        "--workers",
        dest="worker_count",
        type=int,
        metavar="W",
        help="parallel workers, 1 to 64 (default: the original's)",
    )
    add_json(p, "the new run's summary (--submit: the backend's answer)")
    add_meta(p)
    p.add_argument(
        "--submit",
        action="store_true",
        help="queue the retry on the backend (--url) instead of running it here",
    )
    add_url(p)
    add_idempotency_key(p)


RETRY = Command(
    "retry",
    "run a run's errored, failed or chosen episodes again, with the same seeds",
    cmd_retry,
    _retry_arguments,
    examples=(
        "retry 20261201_050254",
        'retry "flaky cli" --failures -w 4',
        "retry 20261201_050254 --episodes 3,17,40-45 --name 'after the fix'",
        "retry 20261201_050254 --errors --submit --url http://gpu-box:8765",
    ),
    exit_codes="eval",
    description="A new run of exactly the chosen episodes of RUN, each with the seed it had "
    "(same task, episode index and run seed), linked to RUN (its config's retry_of); RUN's "
    "records are never rewritten. Runs in the foreground like eval, and exits like it; then "
    "prints the new run's id and the compare command. With --submit it is queued on the "
    "backend (exit 0 once queued).",
)
