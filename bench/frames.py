"""What frames cost: a run with frames none / every / failures, and making episode videos.

    .venv/bin/python bench/frames.py [--quick] [--episodes N] [--workers W]

Runs ``babyai_oracle`` in the foreground (``run_foreground``) three times on the same
episodes, with a step budget tight enough that some fail, with ``frames`` none, every and
failures; prints each run's wall time (from the summary's start to finish: servers up,
episodes, final summary), the frames kept, and the ratio to ``none``. Checks that the three
runs' records are identical (frames are never part of a record). Then times the mp4 of
every episode of the ``every`` run (``eval.media.episode_video``: PNGs decoded, H.264
encoded with imageio-ffmpeg), per video and per frame.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

from agentcanvas.eval.config import EvalConfig, EvalRun
from agentcanvas.eval.foreground import ForegroundRun, run_foreground
from agentcanvas.eval.invariance import diff_runs
from agentcanvas.eval.media import episode_video, frame_files
from agentcanvas.server.registry import WorkspaceComponentRegistry

GRAPH = "babyai_oracle"
STEP_BUDGET = 8
MODES = ("none", "every", "failures")


async def _run(workspace: Path, mode: str, n_per_task: int, workers: int) -> ForegroundRun:
    registry = WorkspaceComponentRegistry(workspace=workspace)
    registry.scan_all()
    config = EvalConfig(
        graph_name=GRAPH,
        episode_count=n_per_task,
        worker_count=workers,
        step_budget=STEP_BUDGET,
        frames=mode,  # type: ignore[arg-type]
    )
    return await run_foreground(registry, registry.load_graph(GRAPH), config)


def _wall_s(summary: EvalRun) -> float:
    started, finished = summary.timings.get("started_at"), summary.timings.get("finished_at")
    assert started is not None and finished is not None
    return float(finished - started)


def _frames_kept(run: ForegroundRun) -> int:
    return sum(
        len(frame_files(run.run_dir.episode_assets_dir(e.index))) for e in run.summary.episodes
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="4 episodes per task")
    parser.add_argument("--episodes", type=int, default=12, help="episodes per task")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    n_per_task = 4 if args.quick else args.episodes
    with tempfile.TemporaryDirectory() as tmp:
        runs = {m: asyncio.run(_run(Path(tmp), m, n_per_task, args.workers)) for m in MODES}
        base = _wall_s(runs["none"].summary)
        print(f"{GRAPH}: {n_per_task} episodes x 2 tasks, W={args.workers}, budget {STEP_BUDGET}")
        print(f"{'frames':<10}{'wall s':>10}{'x none':>10}{'frames kept':>14}")
        for mode, run in runs.items():
            wall = _wall_s(run.summary)
            print(f"{mode:<10}{wall:>10.2f}{wall / base:>10.2f}{_frames_kept(run):>14}")
        same = all(not diff_runs(runs["none"].summary, r.summary) for r in runs.values())
        print(f"records identical across frames modes: {same}")
        every = runs["every"]
        n_frames, started = 0, time.perf_counter()
        for episode in every.summary.episodes:
            folder = every.run_dir.episode_dir(episode.index)
            n_frames += len(frame_files(folder / "assets"))
            episode_video(folder, f"episode {episode.index}")
        spent = time.perf_counter() - started
        n_videos = len(every.summary.episodes)
        print(
            f"videos: {n_videos} made in {spent:.2f} s: {1000 * spent / n_videos:.0f} ms per "
            f"video, {1000 * spent / max(n_frames, 1):.1f} ms per frame ({n_frames} frames)"
        )


if __name__ == "__main__":
    main()
