"""Reading a run folder back after a crash: a validated spec, and a summary rebuilt from disk.

The episode folders are the truth of a run: each ``episodes/ep*/episode.json`` is written
(atomically) before summary.json is rewritten, so after a crash summary.json may lag behind
them by an episode or more, never the other way round. :func:`reconcile_summary` rebuilds the
summary's per-episode records and counts from the episode folders, so after ``recover`` or a
resume the two agree. A spec.json that may have been edited, truncated or poisoned since it
was written is read through :meth:`~agentcanvas.eval.run_spec.RunSpec.read` (ConfigError
naming the bad field).
"""

from __future__ import annotations

import contextlib
import shutil

from pydantic import ValidationError

from agentcanvas.errors import RunError
from agentcanvas.eval import metrics
from agentcanvas.eval.config import EpisodeResult, EvalConfig, EvalRun
from agentcanvas.eval.episode_plan import planned_by_task, planned_total
from agentcanvas.eval.records import recorded_results
from agentcanvas.eval.run_spec import RunSpec
from agentcanvas.eval.store import RunDir
from agentcanvas.fileio import read_json
from agentcanvas.graph.model import Graph

__all__ = [
    "drop_cancelled_episodes",
    "episode_records",
    "episodes_planned",
    "reconcile_summary",
    "refresh_counts",
    "remove_stale_temp_files",
]


def episodes_planned(config: EvalConfig, graph: Graph) -> int:
    """How many episodes a run of ``config`` on ``graph`` plans (episodes_total)."""
    return planned_total(config, graph)


def episode_records(run_dir: RunDir) -> dict[int, EpisodeResult]:
    """Every readable episode.json of the run, keyed by index (an unreadable one is absent)."""
    return {r.index: r for r in recorded_results(run_dir)}


def drop_cancelled_episodes(run_dir: RunDir) -> list[int]:
    """Remove the folders of cancelled episodes (a resume runs them again from scratch), so
    that no stale record outlives the resume; the indexes removed."""
    dropped = []
    for index, record in episode_records(run_dir).items():
        if record.status == "cancelled":
            shutil.rmtree(run_dir.episode_dir(index), ignore_errors=True)
            dropped.append(index)
    return dropped


def refresh_counts(run: EvalRun, results: dict[int, EpisodeResult]) -> None:
    """The summary's records, counts and aggregates recomputed from ``results``.

    ``episodes_done`` counts episodes that finished; cancelled ones are only in
    ``status_counts``; episodes never started are simply absent.
    """
    ordered = [results[i] for i in sorted(results)]
    run.episodes = ordered
    run.episodes_complete = True  # every record the episode folders hold
    run.episodes_aggregated = len(ordered)
    run.episodes_done = sum(1 for r in ordered if r.status != "cancelled")
    run.status_counts = metrics.status_counts(ordered)
    run.aggregate_metrics = metrics.aggregate_metrics(ordered, run.metric_rules)
    run.aggregate_by_task = metrics.aggregate_by_task(ordered, run.metric_rules)


def remove_stale_temp_files(run_dir: RunDir) -> list[str]:
    """Delete the temp files of atomic writes a killed writer left behind (``.NAME.*.tmp``
    in the folder and its episode folders); only under the run's lock, when no writer can
    be mid-write. The names removed, relative to the folder."""
    removed = []
    folders = [run_dir.root, *sorted(run_dir.episodes_dir.glob("ep*"))]
    for folder in folders:
        for stale in folder.glob(".*.tmp"):
            with contextlib.suppress(OSError):
                stale.unlink()
                removed.append(str(stale.relative_to(run_dir.root)))
    return removed


def reconcile_summary(run_dir: RunDir) -> EvalRun:
    """summary.json's run with its episodes, counts and aggregates taken from the episode
    folders (the caller sets the status, writes it, and holds the run's lock). Temp files
    of writes a killed writer never finished are removed first."""
    remove_stale_temp_files(run_dir)
    try:
        run = EvalRun.model_validate(read_json(run_dir.summary_path))
    except (RunError, ValidationError):
        spec = RunSpec.read(run_dir)
        config = spec.config
        graph = spec.graph_model(source=f"{run_dir.spec_path} graph")
        run = EvalRun(
            run_id=run_dir.root.name,
            graph_name=config.graph_name,
            config=config,
            episodes_total=episodes_planned(config, graph),
            # The node sets' declared kinds are not in the spec: only the graph's are.
            metric_rules=metrics.MetricRules(
                kinds=metrics.declared_kinds([], graph.metrics),
                binary_interval=config.binary_interval,
                planned_by_task=planned_by_task(config, graph),
            ),
        )
    refresh_counts(run, episode_records(run_dir))
    return run
