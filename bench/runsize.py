"""Per-episode cost as a run grows: the first 10 % of a run against its last 10 %.

    .venv/bin/python bench/runsize.py [--quick] [--episodes N] [--workers W]

One foreground run of the built-in ``babyai_oracle`` graph (no simulated latency, so the
run's own bookkeeping is a large share of an episode) with N episodes in all on W workers.
Each episode's completion is timed where the runner announces it (``eval_episode_done``,
sent once the episode is persisted and summary.json rewritten), so every figure below comes
from the same run:

- episodes/s over the first 10 % of the episodes and over the last 10 %, side by side, and
  their ratio (goal: last >= 0.8 x first);
- the whole run (first completion to last) against N x the early per-episode cost
  (1 / the first-10 % rate), and their ratio (goal: <= 1.3);
- the size of summary.json at the end, and the time from the last episode to the end of the
  run (final aggregates, the complete summary, servers stopped).

Defaults: 5,000 episodes on 2 workers; ``--quick`` runs 1,000. The machine's other load
shows up as noise in both windows alike; compare ratios, not absolute rates.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from agentcanvas.eval.config import EvalConfig
from agentcanvas.eval.events import EvalEpisodeDone, LiveEvent
from agentcanvas.eval.foreground import run_foreground
from agentcanvas.eval.run_setup import new_run_dir, run_registry
from agentcanvas.paths import runs_dir
from agentcanvas.server.registry import WorkspaceComponentRegistry

GRAPH_NAME = "babyai_oracle"
N_TASKS = 2  # babyai_oracle's levels; episodes are episode_count per task


@dataclass
class Clock:
    """Completion times of the episodes, in the order the runner announced them."""

    done_at: list[float] = field(default_factory=list)

    def __call__(self, event: LiveEvent) -> None:
        if isinstance(event, EvalEpisodeDone):
            self.done_at.append(time.perf_counter())


@dataclass(frozen=True)
class Figures:
    n: int
    first_rate: float
    last_rate: float
    whole_s: float
    final_s: float
    summary_bytes: int

    @property
    def predicted_s(self) -> float:
        """The whole run at the early per-episode cost."""
        return self.n / self.first_rate


def window_rate(times: list[float], start: int, count: int) -> float:
    """Episodes per second over ``count`` completions after completion ``start``."""
    elapsed = times[start + count] - times[start]
    return count / elapsed if elapsed > 0 else float("inf")


async def measure(workspace: Path, n_per_task: int, workers: int) -> Figures:
    registry = WorkspaceComponentRegistry(workspace=workspace)
    registry.scan_all()
    graph = registry.load_graph(GRAPH_NAME)
    config = EvalConfig(graph_name=GRAPH_NAME, episode_count=n_per_task, worker_count=workers)
    clock = Clock()
    run_dir = new_run_dir(runs_dir(workspace))  # as `agentcanvas eval` does
    run_reg = run_registry(registry.catalogue, run_dir)
    run = await run_foreground(run_reg, graph, config, broadcast=clock, run_dir=run_dir)
    ended = time.perf_counter()
    counts = run.summary.status_counts
    if counts.get("completed") != run.summary.episodes_total:
        raise RuntimeError(f"the run did not complete cleanly: {counts}")
    times = clock.done_at
    n = len(times)
    tenth = max(1, n // 10)
    return Figures(
        n=n,
        first_rate=window_rate(times, 0, tenth),
        last_rate=window_rate(times, n - 1 - tenth, tenth),
        whole_s=times[-1] - times[0],
        final_s=ended - times[-1],
        summary_bytes=run.run_dir.summary_path.stat().st_size,
    )


def report(fig: Figures, workers: int) -> None:
    ratio = fig.last_rate / fig.first_rate
    whole_ratio = fig.whole_s / fig.predicted_s
    print(f"run size: {fig.n} episodes of {GRAPH_NAME} on {workers} workers, no latency")
    print(f"{'':36}{'first 10 %':>12}{'last 10 %':>12}{'last/first':>12}")
    print(f"{'episodes/s':36}{fig.first_rate:>12.1f}{fig.last_rate:>12.1f}{ratio:>12.2f}")
    print(f"{'':36}{'whole run':>12}{'N x early':>12}{'whole/pred':>12}")
    print(
        f"{'seconds (first to last completion)':36}{fig.whole_s:>12.1f}"
        f"{fig.predicted_s:>12.1f}{whole_ratio:>12.2f}"
    )
    print(
        f"run end after the last episode (final summary, servers stopped): {fig.final_s:.2f} s; "
        f"summary.json {fig.summary_bytes / 1e6:.2f} MB"
    )
    verdict = "met" if ratio >= 0.8 and whole_ratio <= 1.3 else "NOT met"
    print(f"goals (last/first >= 0.8, whole/pred <= 1.3): {verdict}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="1,000 episodes")
    parser.add_argument("--episodes", type=int, help="episodes in all (default 5000; quick 1000)")
    parser.add_argument("--workers", type=int, default=2, help="workers (default 2)")
    args = parser.parse_args()
    n_total = args.episodes or (1000 if args.quick else 5000)
    warnings.filterwarnings("ignore")
    with tempfile.TemporaryDirectory(prefix="bench_runsize_") as tmp:
        workspace = Path(tmp)
        os.environ["AGENTCANVAS_HOME"] = str(workspace)
        figures = asyncio.run(measure(workspace, max(1, n_total // N_TASKS), args.workers))
    report(figures, args.workers)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
